"""A job's outputs on disk (``settings.jobs_dir / job_id``): what exists, single files, a folder
as a tar.gz built while it is sent, the log's tail and the checkpoint's state. No database here.

The tar.gz stream is written by hand (a tar header per file from ``TarInfo.tobuf``, the file in
1 MiB pieces) so that memory stays constant whatever the model's size: ``tarfile.addfile`` would
copy a whole file into the output before yielding anything. It is one gzip member whose deflate
stream changes level per file (``_Gzip``): weights barely compress, and deflating them capped a
download at ~16 MB/s on this machine (level 1), so they are stored; text files are compressed.
"""

from __future__ import annotations

import json
import os
import struct
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from gradacc.errors import ArtifactNotFound
from gradacc.outputs import CHECKPOINT_NAME, visible
from trainer_core.spec.outputs import (
    ADAPTER_DIR,
    CHECKPOINT_DIR,
    EVALUATIONS_FILE,
    MODEL_DIR,
    kept_checkpoints,
)

FOLDERS = (MODEL_DIR, ADAPTER_DIR, CHECKPOINT_DIR)  # downloaded as tar.gz (adapter: LoRA's)
CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE
STORED_SUFFIXES = (".safetensors", ".pt", ".bin", ".pth")  # weights and optimizer state


def artifact_path(root: Path, path: str) -> Path:
    """The regular file ``path`` names inside ``root``; no ``..``, no links, nothing outside."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts or not visible(parts[0]):
        raise ArtifactNotFound(path)
    candidate = root.joinpath(*parts)
    real_root = root.resolve()
    real = candidate.resolve()
    if real_root not in real.parents or candidate.is_symlink() or not real.is_file():
        raise ArtifactNotFound(path)
    return real


def folder_path(root: Path, name: str) -> Path:
    """A downloadable folder; ``checkpoint-<step>`` is the kept checkpoint of that step, the
    latest one (``checkpoint/``) included."""
    if (found := CHECKPOINT_NAME.fullmatch(name)) is not None:
        return _kept_checkpoint(root, int(found.group(1)), name)
    folder = root / name
    if name == MODEL_DIR and not folder.exists() and (root / ADAPTER_DIR).is_dir():
        raise ArtifactNotFound(
            name,
            hint="a LoRA job keeps its adapters, not a whole model: download "
            "artifacts/model?merged=true for the adapters merged into their base, or "
            f"artifacts/{ADAPTER_DIR} for the adapters alone",
        )
    if name not in FOLDERS or folder.is_symlink() or not folder.is_dir():
        raise ArtifactNotFound(name)
    return folder


def _kept_checkpoint(root: Path, step: int, name: str) -> Path:
    for found, folder, _ in kept_checkpoints(root):
        if found == step and not folder.is_symlink():
            return folder
    raise ArtifactNotFound(name)


class _Gzip:
    """One gzip member written by hand: a raw deflate stream to which each file contributes
    blocks at its own level. ``Z_FULL_FLUSH`` ends a compressor's output on a byte boundary with
    no history, so the next compressor's blocks continue the same valid stream."""

    HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, unknown OS

    def __init__(self) -> None:
        self.crc, self.size = 0, 0
        self.deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)

    def level(self, level: int) -> bytes:
        out = self.deflate.flush(zlib.Z_FULL_FLUSH)
        self.deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        return out

    def compress(self, data: bytes) -> bytes:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        return self.deflate.compress(data)

    def finish(self) -> bytes:
        trailer = struct.pack("<II", self.crc, self.size & 0xFFFFFFFF)
        return self.deflate.flush(zlib.Z_FINISH) + trailer


def tar_gz(folder: Path, arcname: str) -> Iterator[bytes]:
    """The folder as a gzip'd tar, produced piece by piece (constant memory)."""
    gzip = _Gzip()
    yield _Gzip.HEADER
    for path, name in _tar_members(folder, arcname):
        info = tarfile.TarInfo(name)
        stat = path.stat()
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
        yield gzip.level(0 if path.suffix in STORED_SUFFIXES else 6)
        yield gzip.compress(info.tobuf(format=tarfile.PAX_FORMAT))
        with path.open("rb") as source:
            while piece := source.read(CHUNK):
                yield gzip.compress(piece)
        yield gzip.compress(b"\0" * (-stat.st_size % BLOCK))
    yield gzip.compress(b"\0" * (2 * BLOCK)) + gzip.finish()  # the end-of-archive marker


def _tar_members(folder: Path, arcname: str) -> Iterator[tuple[Path, str]]:
    for current, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(current, name)
            if path.is_symlink() or not path.is_file():
                continue
            yield path, f"{arcname}/{path.relative_to(folder).as_posix()}"


# A log tail or an evaluations page reads at most this much of the file's end: a tenant's huge
# log (or one with few newlines) costs the API a bounded read, never the whole file.
TAIL_MAX_BYTES = 16 * 1024 * 1024
BLOCK_BYTES = 64 * 1024


def lines_from_end(path: Path, *, max_bytes: int | None = None) -> Iterator[bytes]:
    """The file's lines, last first, read backwards in blocks and at most ``max_bytes`` of it
    (a line cut by that bound is not yielded). The last line is yielded even without its
    newline; callers that need whole lines check it."""
    if not path.is_file():
        return
    with path.open("rb") as log:
        position = log.seek(0, os.SEEK_END)
        floor = max(0, position - (TAIL_MAX_BYTES if max_bytes is None else max_bytes))
        partial = b""
        while position > floor:
            step = min(BLOCK_BYTES, position - floor)
            position -= step
            log.seek(position)
            pieces = (log.read(step) + partial).split(b"\n")
            partial = pieces[0]
            yield from reversed(pieces[1:])
        if floor == 0:
            yield partial


def tail(path: Path, lines: int) -> bytes:
    """The last ``lines`` lines of a file (at most ``TAIL_MAX_BYTES`` of its end)."""
    found: list[bytes] = []
    for line in lines_from_end(path):
        found.append(line)
        if len(found) > lines:
            break
    if found and found[0] == b"":
        found.pop(0)  # the file ends with a newline
    kept = list(reversed(found[:lines]))
    return b"\n".join(kept) + (b"\n" if kept else b"")


def evaluations(root: Path, *, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The run's evaluation reports (``evaluations.jsonl``), newest first, ``limit`` of them and
    whether there are more; read from the file's end. A line being written (not yet whole) is
    left out."""
    found: list[dict[str, Any]] = []
    for line in lines_from_end(root / EVALUATIONS_FILE):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if len(found) == limit:
            return found, True
        found.append(report)
    return found, False
