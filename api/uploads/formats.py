"""What an upload must be: a dataset ``datasets`` can read, or a safetensors-only model archive.

Datasets are read with pyarrow, the reader ``datasets`` itself uses for these formats, in
streaming batches (constant memory, no cache folder, no import of ``datasets`` in the API).
Model archives are unpacked member by member with every check made before a byte is written:
no absolute paths, no ``..``, no links or devices, no pickle weights (loading one runs code), and
caps on the bytes actually written and on the number of files (an archive bomb is refused).
"""

from __future__ import annotations

import json
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pa_parquet

from api.uploads.arrow import open_csv, open_jsonl, type_change, with_growing_blocks
from gradacc.errors import InvalidRequest

DATASET_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
ARCHIVE_SUFFIXES = {".tar.gz": "tar.gz", ".tgz": "tar.gz", ".zip": "zip"}
# Pickle-based checkpoints: loading one executes code. Only safetensors weights are accepted.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
JSON_IN_MEMORY_BYTES = 256 * 1024**2  # a JSON document (not lines) is parsed whole
COPY_CHUNK = 1 << 20


def dataset_format(filename: str) -> str:
    fmt = DATASET_SUFFIXES.get(Path(filename).suffix.lower())
    if fmt is None:
        kinds = ", ".join(DATASET_SUFFIXES)
        raise InvalidRequest(f"unsupported dataset type {filename!r}; use {kinds}", param="file")
    return fmt


def archive_format(filename: str) -> str:
    lower = filename.lower()
    for suffix, fmt in ARCHIVE_SUFFIXES.items():
        if lower.endswith(suffix):
            return fmt
    raise InvalidRequest(
        "a model is a .tar.gz or .zip of a save_pretrained directory", param="file"
    )


def inspect_dataset(path: Path, fmt: str) -> dict[str, Any]:
    """``{"format", "rows", "columns"}``; 422 naming the problem when it cannot be read."""
    try:
        rows, columns = _READERS[fmt](path)
    except (pa.ArrowException, ValueError, OSError, UnicodeDecodeError) as exc:
        refusal = type_change(exc, param="file")
        if refusal is not None:
            raise refusal from exc
        raise InvalidRequest(f"cannot read it as {fmt}: {exc}", param="file") from exc
    if rows == 0 or not columns:
        raise InvalidRequest(f"the {fmt} file has no rows", param="file")
    return {"format": fmt, "rows": rows, "columns": columns}


def _streamed(
    path: Path, open_reader: Callable[[pa.NativeFile, int], Any]
) -> tuple[int, list[str]]:
    def read(block: int) -> tuple[int, list[str]]:
        with pa.OSFile(str(path)) as source:
            reader = open_reader(source, block)
            return sum(batch.num_rows for batch in reader), list(reader.schema.names)

    return with_growing_blocks(read)


def _csv(path: Path) -> tuple[int, list[str]]:
    return _streamed(path, open_csv)


def _jsonl(path: Path) -> tuple[int, list[str]]:
    return _streamed(path, open_jsonl)


def _json(path: Path) -> tuple[int, list[str]]:
    """JSON lines under a .json name, or one array of objects (what ``datasets`` accepts)."""
    try:
        return _jsonl(path)
    except pa.ArrowException:
        if path.stat().st_size > JSON_IN_MEMORY_BYTES:
            raise
    document = json.loads(path.read_bytes())
    if not isinstance(document, list) or not all(isinstance(row, dict) for row in document):
        raise ValueError("a .json dataset is JSON lines or one array of objects")
    columns = list(dict.fromkeys(key for row in document for key in row))
    return len(document), columns


def _parquet(path: Path) -> tuple[int, list[str]]:
    parquet = pa_parquet.ParquetFile(path)
    return parquet.metadata.num_rows, list(parquet.schema_arrow.names)


_READERS: dict[str, Callable[[Path], tuple[int, list[str]]]] = {
    "csv": _csv,
    "jsonl": _jsonl,
    "json": _json,
    "parquet": _parquet,
}


class _Limits:
    """Counts what an archive really unpacks to (declared sizes may lie) against the caps."""

    def __init__(self, max_bytes: int, max_files: int) -> None:
        self.max_bytes, self.max_files = max_bytes, max_files
        self.bytes = self.files = 0

    def add_file(self) -> None:
        self.files += 1
        if self.files > self.max_files:
            raise InvalidRequest(f"the archive holds over {self.max_files} files", param="file")

    def add_bytes(self, count: int) -> None:
        self.bytes += count
        if self.bytes > self.max_bytes:
            raise InvalidRequest(
                f"the archive unpacks to over {self.max_bytes} bytes", param="file"
            )


def _member_path(name: str, dest: Path) -> Path:
    parts = [part for part in PurePosixPath(name.replace("\\", "/")).parts if part != "."]
    if name.startswith(("/", "\\")) or not parts or ".." in parts or ":" in parts[0]:
        raise InvalidRequest(f"unsafe path in the archive: {name!r}", param="file")
    if parts[-1].lower().endswith(PICKLE_SUFFIXES):
        raise InvalidRequest(
            f"{parts[-1]!r} is a pickle checkpoint (it can run code); send safetensors weights",
            param="file",
        )
    return dest.joinpath(*parts)


def _copy(source: IO[bytes], target: Path, limits: _Limits) -> None:
    limits.add_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:
        while chunk := source.read(COPY_CHUNK):
            limits.add_bytes(len(chunk))
            out.write(chunk)


def _unpack_tar(archive: Path, dest: Path, limits: _Limits) -> None:
    with tarfile.open(archive, "r|gz") as tar:  # a stream: one pass, members in order
        for member in tar:
            if member.isdir():
                _member_path(member.name, dest).mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():  # symbolic or hard link, device, fifo
                raise InvalidRequest(f"{member.name!r} is not a regular file", param="file")
            source = tar.extractfile(member)
            assert source is not None  # a regular file
            _copy(source, _member_path(member.name, dest), limits)


def _unpack_zip(archive: Path, dest: Path, limits: _Limits) -> None:
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            mode = info.external_attr >> 16
            if info.is_dir():
                _member_path(info.filename, dest).mkdir(parents=True, exist_ok=True)
                continue
            if mode and not stat.S_ISREG(mode):  # a symlink stored by Unix zip, a device
                raise InvalidRequest(f"{info.filename!r} is not a regular file", param="file")
            with zipped.open(info) as source:
                _copy(source, _member_path(info.filename, dest), limits)


def unpack_model(
    archive: Path, fmt: str, dest: Path, *, max_bytes: int, max_files: int
) -> dict[str, Any]:
    """Unpack into ``dest`` (a new folder) and check it is a save_pretrained directory with
    safetensors weights; ``dest`` is removed on any refusal."""
    limits = _Limits(max_bytes, max_files)
    dest.mkdir()
    try:
        unpack = _unpack_tar if fmt == "tar.gz" else _unpack_zip
        unpack(archive, dest, limits)
        _hoist_single_folder(dest)
        found = _check_model_dir(dest)
        return {"format": fmt, "files": limits.files, "unpacked_bytes": limits.bytes} | found
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise InvalidRequest(f"cannot unpack the {fmt} archive: {exc}", param="file") from exc
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _hoist_single_folder(dest: Path) -> None:
    """``tar czf m.tgz my-model/`` puts everything under ``my-model/``: take it up one level."""
    entries = list(dest.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not (dest / "config.json").exists():
        inner = entries[0].rename(dest.with_name(dest.name + ".inner"))
        dest.rmdir()
        inner.rename(dest)


def _check_model_dir(dest: Path) -> dict[str, Any]:
    config_path = dest / "config.json"
    if not config_path.is_file():
        raise InvalidRequest("no config.json at the top of the model archive", param="file")
    try:
        config = json.loads(config_path.read_text())
    except ValueError as exc:
        raise InvalidRequest(f"config.json is not valid JSON: {exc}", param="file") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise InvalidRequest("config.json names no model_type", param="file")
    if not any(dest.glob("*.safetensors")):
        raise InvalidRequest("no .safetensors weights in the model archive", param="file")
    return {
        "model_type": config["model_type"],
        "architectures": config.get("architectures"),
        "chat_template": _has_chat_template(dest),
    }


def _has_chat_template(dest: Path) -> bool:
    """Its tokenizer brings a chat template (save_pretrained writes chat_template.jinja, older
    versions a key of tokenizer_config.json)."""
    if (dest / "chat_template.jinja").is_file():
        return True
    try:
        config = json.loads((dest / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))
