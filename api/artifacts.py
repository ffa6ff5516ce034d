"""A job's outputs on disk (``settings.jobs_dir / job_id``): what exists, single files, a folder
as a tar.gz built while it is sent, the log's tail and the checkpoint's state. No database here.

The tar.gz stream is written by hand (a tar header per file from ``TarInfo.tobuf``, the file in
1 MiB pieces, through one gzip compressor) so that memory stays constant whatever the model's
size: ``tarfile.addfile`` would copy a whole file into the output before yielding anything.
"""

from __future__ import annotations

import json
import os
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from gradacc.errors import ArtifactNotFound

FOLDERS = ("model", "checkpoint")  # downloaded as tar.gz
KINDS = {
    "model": "model",
    "checkpoint": "checkpoint",
    "train.log": "log",
    "metrics.jsonl": "metrics",
    "summary.json": "summary",
}
HIDDEN = {"pending_writes.jsonl"}  # the worker's own journal, not an output
CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE
# Fast gzip: weights barely compress, and level 6 would cap a download at tens of MB/s.
GZIP_LEVEL = 1
CHECKPOINT_STATE = "gradacc_state.json"


def _visible(name: str) -> bool:
    return name not in HIDDEN and not name.startswith(".") and ".tmp" not in name


def list_artifacts(root: Path) -> list[dict[str, Any]]:
    """Every regular file under the job's folder: path, bytes, kind (by its top-level name)."""
    found: list[dict[str, Any]] = []
    if not root.is_dir():
        return found
    for folder, dirs, files in os.walk(root):  # does not follow symbolic links
        dirs[:] = sorted(d for d in dirs if _visible(d))
        for name in sorted(files):
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            top = relative.split("/", 1)[0]
            if not _visible(top) or path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            found.append({"path": relative, "bytes": size, "kind": KINDS.get(top, "other")})
    return found


def outputs(root: Path) -> dict[str, int]:
    """What the job has written so far, top-level name -> bytes (a folder: its files' total)."""
    totals: dict[str, int] = {}
    for artifact in list_artifacts(root):
        top = artifact["path"].split("/", 1)[0]
        totals[top] = totals.get(top, 0) + artifact["bytes"]
    return totals


def artifact_path(root: Path, path: str) -> Path:
    """The regular file ``path`` names inside ``root``; no ``..``, no links, nothing outside."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts or not _visible(parts[0]):
        raise ArtifactNotFound(path)
    candidate = root.joinpath(*parts)
    real_root = root.resolve()
    real = candidate.resolve()
    if real_root not in real.parents or candidate.is_symlink() or not real.is_file():
        raise ArtifactNotFound(path)
    return real


def folder_path(root: Path, name: str) -> Path:
    folder = root / name
    if name not in FOLDERS or folder.is_symlink() or not folder.is_dir():
        raise ArtifactNotFound(name)
    return folder


def tar_gz(folder: Path, arcname: str) -> Iterator[bytes]:
    """The folder as a gzip'd tar, produced piece by piece (constant memory)."""
    gzip = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer
    for path, name in _tar_members(folder, arcname):
        info = tarfile.TarInfo(name)
        stat = path.stat()
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
        yield gzip.compress(info.tobuf(format=tarfile.PAX_FORMAT))
        with path.open("rb") as source:
            while piece := source.read(CHUNK):
                if out := gzip.compress(piece):
                    yield out
        yield gzip.compress(b"\0" * (-stat.st_size % BLOCK))
    yield gzip.compress(b"\0" * (2 * BLOCK)) + gzip.flush()  # the end-of-archive marker


def _tar_members(folder: Path, arcname: str) -> Iterator[tuple[Path, str]]:
    for current, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(current, name)
            if path.is_symlink() or not path.is_file():
                continue
            yield path, f"{arcname}/{path.relative_to(folder).as_posix()}"


def tail(path: Path, lines: int) -> bytes:
    """The last ``lines`` lines of a file, read backwards in blocks (a log can be large)."""
    if not path.is_file():
        return b""
    with path.open("rb") as log:
        end = log.seek(0, os.SEEK_END)
        data, position = b"", end
        while position > 0 and data.count(b"\n") <= lines:
            step = min(64 * 1024, position)
            position -= step
            log.seek(position)
            data = log.read(step) + data
    return b"\n".join(data.splitlines()[-lines:]) + (b"\n" if data else b"")


def checkpoint_state(root: Path) -> dict[str, Any] | None:
    """The state the run saved with its latest checkpoint (epoch, step, metrics), if any."""
    state_file = root / "checkpoint" / CHECKPOINT_STATE
    try:
        state: dict[str, Any] = json.loads(state_file.read_text())
        state["created_at"] = int(state_file.stat().st_mtime)
    except (OSError, ValueError):
        return None
    return state
