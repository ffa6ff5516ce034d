"""A size-limited, least-recently-used cache of tokenized datasets on disk.

An entry is a directory named by its key (a hash of everything that decides the tokenized rows:
the data's content, the tokenizer, ``max_seq_length``, the columns, the task, the hold-out) with
Arrow files and a ``manifest.json`` written last. The manifest records every file's size and
SHA-256: an entry whose files do not match it (a torn write, a disk error, a hand edit) is deleted
and rebuilt, never trusted. Using an entry touches its manifest, and eviction removes the entries
touched longest ago until the cache fits its limit.

An entry is built in a private ``.build-*`` directory and renamed into place, so readers never see
half of one; an entry evicted while a job still reads it stays readable (the job holds the files
mapped, and Linux keeps unlinked files alive while they are open). Stdlib only: the ``gradacc
cache`` command imports this module without torch or ``datasets``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
DEFAULT_MAX_BYTES = 20 * 1024**3


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    size_bytes: int
    last_used: float  # seconds since the epoch
    description: dict[str, Any]


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class DataCache:
    """Tokenized datasets under ``root``, at most ``max_bytes`` in all (the newest entry is kept
    even when it alone is larger)."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def lookup(self, key: str) -> Path | None:
        """The entry's directory if it exists and is intact (and mark it used), else None."""
        entry = self.root / key
        if not entry.is_dir():
            return None
        if not self._intact(entry):
            shutil.rmtree(entry, ignore_errors=True)  # rebuilt by the caller, never trusted
            return None
        os.utime(entry / MANIFEST)  # least recently used is judged by this mtime
        return entry

    def _intact(self, entry: Path) -> bool:
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
            files: dict[str, dict[str, Any]] = manifest["files"]
            for name, meta in files.items():
                file = entry / name
                if file.stat().st_size != meta["bytes"] or file_sha256(file) != meta["sha256"]:
                    return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return True

    @contextmanager
    def building(self, key: str, description: dict[str, Any]) -> Iterator[Path]:
        """Yield an empty directory to write an entry's files into; on success it becomes the
        entry (with its manifest) and older entries are evicted to fit the limit."""
        self.root.mkdir(parents=True, exist_ok=True)
        build = self.root / f".build-{key}-{os.getpid()}"
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir()
        try:
            yield build
            files = {
                f.name: {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
                for f in sorted(build.iterdir())
                if f.is_file()
            }
            manifest = {"key": key, "created": time.time(), "files": files, **description}
            (build / MANIFEST).write_text(json.dumps(manifest, indent=1))
            try:
                build.rename(self.root / key)
            except OSError:  # another job built the same entry meanwhile: keep theirs
                shutil.rmtree(build, ignore_errors=True)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        self.evict(keep=key)

    def entries(self) -> list[CacheEntry]:
        """Every complete entry, most recently used first."""
        found: list[CacheEntry] = []
        if not self.root.is_dir():
            return found
        for entry in self.root.iterdir():
            manifest = entry / MANIFEST
            if entry.name.startswith(".") or not manifest.is_file():
                continue
            try:
                meta = json.loads(manifest.read_text())
                used = manifest.stat().st_mtime
            except (OSError, ValueError):
                meta, used = {}, 0.0
            description = {k: v for k, v in meta.items() if k not in ("files", "key")}
            found.append(CacheEntry(entry.name, entry, _tree_bytes(entry), used, description))
        return sorted(found, key=lambda e: e.last_used, reverse=True)

    def size_bytes(self) -> int:
        return sum(e.size_bytes for e in self.entries())

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove least recently used entries until the cache fits; returns the removed keys."""
        entries = self.entries()
        total = sum(e.size_bytes for e in entries)
        removed: list[str] = []
        for entry in reversed(entries):  # oldest first
            if total <= self.max_bytes:
                break
            if entry.key == keep:
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            total -= entry.size_bytes
            removed.append(entry.key)
        return removed

    def clear(self) -> int:
        """Remove every entry (and leftovers of interrupted builds); returns the entries removed."""
        if not self.root.is_dir():
            return 0
        count = 0
        for entry in self.root.iterdir():
            if entry.is_dir():
                count += 0 if entry.name.startswith(".") else 1
                shutil.rmtree(entry, ignore_errors=True)
        return count
