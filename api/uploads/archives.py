"""Unpacking an uploaded model archive under caps that count all it makes the server hold or
write, not only the bytes of its files.

- A .tar.gz is read as one stream through a reader that counts every decompressed byte (headers,
  names, padding) against ``max_bytes``. tarfile reads a GNU long name or a pax header whole into
  memory before the loop sees a member (a 200 MiB name is a 204 KB upload): one over
  MAX_HEADER_BYTES, a run of more than MAX_HEADER_RUN of them or a sparse member is refused
  before tarfile reads it.
- Every member, directories included, counts against ``max_files``.
- A zip's end-of-central-directory record gives its entry count and the size of its central
  directory: both are checked before ``zipfile`` parses that directory (~600 B of RAM an entry).
- Every check is made before a byte is written: no absolute paths, no ``..``, no links or
  devices, no pickle weights (loading one runs code).
- A refusal names the member, never a path of the server (an OS error's details are logged).
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Any, NoReturn

from gradacc.errors import InvalidRequest

log = logging.getLogger(__name__)

# Pickle-based checkpoints: loading one executes code. Only safetensors weights are accepted.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
MAX_HEADER_BYTES = 16 * 1024  # a pax header or GNU long name (a path is at most 4 KiB)
MAX_HEADER_RUN = 4  # extended headers before one member: pax + long name + long link is 3
CENTRAL_RECORD_BYTES = 1024  # what the central directory may hold per allowed entry, on average
COPY_CHUNK = 1 << 20
_EXTENDED_HEADERS = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


def _refuse(message: str) -> NoReturn:
    raise InvalidRequest(message, param="file")


class Limits:
    """Counts what an archive really holds and unpacks to (declared sizes may lie)."""

    def __init__(self, max_bytes: int, max_files: int) -> None:
        self.max_bytes, self.max_files = max_bytes, max_files
        self.bytes = self.files = self.read = 0

    def add_entry(self) -> None:
        self.files += 1
        if self.files > self.max_files:
            _refuse(f"the archive holds over {self.max_files} files and folders")

    def add_bytes(self, count: int) -> None:
        self.bytes += count
        if self.bytes > self.max_bytes:
            _refuse(f"the archive unpacks to over {self.max_bytes} bytes")

    def add_read(self, count: int) -> None:
        self.read += count
        if self.read > self.max_bytes:
            _refuse(f"the archive unpacks to over {self.max_bytes} bytes (headers included)")


class _Counted:
    """The decompressed tar stream, every byte of it counted against the cap."""

    def __init__(self, source: gzip.GzipFile, limits: Limits) -> None:
        self.source, self.limits = source, limits

    def read(self, size: int = COPY_CHUNK, /) -> bytes:
        data = self.source.read(size if size >= 0 else COPY_CHUNK)
        self.limits.add_read(len(data))
        return data

    def write(self, b: bytes, /) -> object:
        raise OSError("read-only")

    def tell(self) -> int:
        return self.limits.read

    def seek(self, pos: int, /) -> object:
        raise OSError("a stream")

    def close(self) -> object:
        return None


class _CheckedTarInfo(tarfile.TarInfo):
    # tarfile.py: "_proc_member() ... can be overridden in a subclass"; it runs on each header
    # before any processing method reads what follows it.
    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        assert isinstance(archive, _CheckedTarFile)
        if self.type in _EXTENDED_HEADERS:
            archive.extended_run += 1
            if self.size > MAX_HEADER_BYTES:
                _refuse(f"a tar extended header of {self.size} bytes (at most {MAX_HEADER_BYTES})")
            if archive.extended_run > MAX_HEADER_RUN:
                _refuse(f"over {MAX_HEADER_RUN} tar extended headers before one member")
        elif self.type == tarfile.GNUTYPE_SPARSE:
            _refuse("a sparse tar member")
        else:
            archive.extended_run = 0
        member: tarfile.TarInfo = tarfile.TarInfo._proc_member(self, archive)  # type: ignore[attr-defined]
        return member


class _CheckedTarFile(tarfile.TarFile):
    tarinfo = _CheckedTarInfo
    extended_run = 0  # extended headers read since the last member


def member_path(name: str, dest: Path, *, folder: bool = False) -> Path:
    """Where a member goes under ``dest``. A folder named ``.`` (or ``./``) is ``dest`` itself:
    ``tar czf model.tar.gz -C folder .`` writes it first, and every path after it starts ``./``."""
    parts = [part for part in PurePosixPath(name.replace("\\", "/")).parts if part != "."]
    if folder and not parts and name.replace("\\", "/").rstrip("/") == ".":
        return dest
    if name.startswith(("/", "\\")) or not parts or ".." in parts or ":" in parts[0]:
        _refuse(f"unsafe path in the archive: {name[:300]!r}")
    if parts[-1].lower().endswith(PICKLE_SUFFIXES):
        _refuse(f"{parts[-1]!r} is a pickle checkpoint (it can run code); send safetensors weights")
    return dest.joinpath(*parts)


def _copy(source: IO[bytes], name: str, dest: Path, limits: Limits) -> None:
    target = member_path(name, dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        out = target.open("xb")
    except (FileExistsError, IsADirectoryError):
        _refuse(f"{name[:300]!r} is in the archive twice (or is also a folder)")
    with out:
        while chunk := source.read(COPY_CHUNK):
            limits.add_bytes(len(chunk))
            out.write(chunk)


def unpack_tar(archive: Path, dest: Path, limits: Limits) -> None:
    with gzip.open(archive, "rb") as unzipped:
        stream = _Counted(unzipped, limits)
        with _CheckedTarFile.open(fileobj=stream, mode="r|") as tar:  # one pass, in order
            for member in tar:
                limits.add_entry()
                if member.isdir():
                    member_path(member.name, dest, folder=True).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile() or member.sparse is not None:  # a link, device, fifo
                    _refuse(f"{member.name[:300]!r} is not a regular file")
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                _copy(source, member.name, dest, limits)


def unpack_zip(archive: Path, dest: Path, limits: Limits) -> None:
    _check_central_directory(archive, limits)
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():  # the record's count may lie: counted again here
            limits.add_entry()
            mode = info.external_attr >> 16
            if info.is_dir():
                member_path(info.filename, dest, folder=True).mkdir(parents=True, exist_ok=True)
                continue
            if mode and not stat.S_ISREG(mode):  # a symlink stored by Unix zip, a device
                _refuse(f"{info.filename[:300]!r} is not a regular file")
            with zipped.open(info) as source:
                _copy(source, info.filename, dest, limits)


_END = struct.Struct("<4s4H2LH")  # end of central directory: entries (total), size, offset
_LOCATOR = struct.Struct("<4sLQL")  # zip64 end-of-central-directory locator
_END64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory


def _check_central_directory(archive: Path, limits: Limits) -> None:
    """Refuse a zip whose central directory declares more entries, or more bytes, than the caps
    allow, before ``zipfile`` parses it. Finds the record as ``zipfile._EndRecData`` does."""
    with archive.open("rb") as source:
        size = source.seek(0, 2)
        tail_start = max(size - (1 << 16) - _END.size, 0)
        source.seek(tail_start)
        tail = source.read()
        at = len(tail) - _END.size
        if at < 0 or not (tail[at:].startswith(b"PK\x05\x06") and tail.endswith(b"\0\0")):
            at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < _END.size:
            raise zipfile.BadZipFile("File is not a zip file")
        _, _, _, _, entries, directory_bytes, _, _ = _END.unpack_from(tail, at)
        end_at = tail_start + at
        if end_at >= _LOCATOR.size + _END64.size:
            source.seek(end_at - _LOCATOR.size)
            locator = source.read(_LOCATOR.size)
            if locator[:4] == b"PK\x06\x07":
                source.seek(end_at - _LOCATOR.size - _END64.size)
                record = source.read(_END64.size)
                if record[:4] == b"PK\x06\x06":
                    entries, directory_bytes = _END64.unpack(record)[7:9]
    if entries > limits.max_files:
        _refuse(f"the archive holds over {limits.max_files} files and folders ({entries})")
    if directory_bytes > limits.max_files * CENTRAL_RECORD_BYTES:
        _refuse(
            f"the zip's central directory is over {limits.max_files * CENTRAL_RECORD_BYTES} bytes"
        )


def refusal(exc: BaseException, fmt: str) -> InvalidRequest:
    """What a reader's or the file system's error says to the client: the archive's own problem
    in its words, an OS error in fixed words (its text holds the server's paths: logged)."""
    if isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile):
        log.warning("unpacking a %s upload failed: %r", fmt, exc)
        message = f"cannot unpack the {fmt} archive: a member could not be written"
        return InvalidRequest(message, param="file")
    if isinstance(exc, zlib.error):
        exc = ValueError(f"corrupt compressed data ({exc})")
    return InvalidRequest(f"cannot unpack the {fmt} archive: {exc}", param="file")


_UNPACK_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error)


def unpack_model(
    archive: Path, fmt: str, dest: Path, *, max_bytes: int, max_files: int
) -> dict[str, Any]:
    """Unpack into ``dest`` (a new folder) and check it is a save_pretrained directory with
    safetensors weights; ``dest`` is removed on any refusal."""
    limits = Limits(max_bytes, max_files)
    dest.mkdir()
    try:
        unpack = unpack_tar if fmt == "tar.gz" else unpack_zip
        unpack(archive, dest, limits)
        _hoist_single_folder(dest)
        found = _check_model_dir(dest)
        return {"format": fmt, "files": limits.files, "unpacked_bytes": limits.bytes} | found
    except _UNPACK_ERRORS as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise refusal(exc, fmt) from exc
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
