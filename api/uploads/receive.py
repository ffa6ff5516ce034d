"""Stream a ``multipart/form-data`` upload to disk, hashing as it goes, in constant memory.

Starlette's ``request.form()`` would spool the file into the system temporary folder and leave
the hashing for a second pass; here the ``python-multipart`` streaming parser hands each piece of
the ``file`` part straight to a temporary file beside its final place (so the final move is a
rename) and to sha256. Chunks are gathered to ~1 MiB and parsed in a worker thread while the next
MiB arrives: disk writes and hashing (which release the GIL) never block the event loop, and at
most two batches are held. Only the parts the route names are taken (``file`` and ``purpose``;
an import's ``file``, ``format`` and ``bad_rows``), each once: any other part is refused when its
headers arrive. The body's size limit is the ``BodySizeLimit`` middleware's, raised inside
``request.stream()``; any failure removes the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from gradacc.errors import InvalidRequest

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

BATCH_BYTES = 1 << 20
MAX_FIELD_BYTES = 1024  # form fields other than the file: "purpose"
PARTS = ("file", "purpose")  # POST /v1/files; a route may name others


@dataclass
class Upload:
    path: Path  # a temporary file; the caller moves or removes it
    filename: str
    bytes: int
    sha256: str
    fields: dict[str, str]


@dataclass
class _Receiver:
    """The parser's callbacks: headers of each part, the file part to disk, small fields kept."""

    folder: Path
    parts: tuple[str, ...] = PARTS
    part_name: str | None = None
    part_filename: str | None = None
    header: bytearray = field(default_factory=bytearray)
    value: bytearray = field(default_factory=bytearray)
    headers: dict[str, bytes] = field(default_factory=dict)
    fields: dict[str, bytearray] = field(default_factory=dict)
    out: BinaryIO | None = None
    path: Path | None = None
    filename: str | None = None
    size: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def on_part_begin(self) -> None:
        self.headers, self.part_name, self.part_filename = {}, None, None

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self.header.decode("latin-1").lower()] = bytes(self.value)
        self.header, self.value = bytearray(), bytearray()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get("content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        self.part_name = _known_part(name, self.parts)
        raw = options.get(b"filename")
        if self.part_name == "file":
            if self.out is not None:
                raise InvalidRequest("send one file per upload", param="file")
            self.filename = _safe_filename(raw.decode("utf-8", "replace") if raw else "")
            self.path = self.folder / f".upload-{secrets.token_hex(8)}"
            self.out = self.path.open("xb")
        elif self.part_name in self.fields:
            raise InvalidRequest("send it once", param=self.part_name)
        else:
            self.fields[self.part_name] = bytearray()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.part_name == "file" and self.out is not None:
            piece = data[start:end]
            self.out.write(piece)
            self.digest.update(piece)
            self.size += end - start
        elif self.part_name in self.fields:
            value = self.fields[self.part_name]
            if len(value) + end - start > MAX_FIELD_BYTES:
                raise InvalidRequest(f"at most {MAX_FIELD_BYTES} bytes", param=self.part_name)
            value += data[start:end]

    def on_part_end(self) -> None:
        self.part_name = None

    def close(self) -> None:
        if self.out is not None:
            self.out.close()

    def discard(self) -> None:
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _known_part(name: str, parts: tuple[str, ...]) -> str:
    """Only the parts the route reads: anything else is refused before its body is read, so a
    flood of fields is never kept (each part is at most once)."""
    if name not in parts:
        shown = "".join(ch for ch in name if ch.isprintable())[:64]
        quoted = [f"'{p}'" for p in parts]
        known = " and ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
        raise InvalidRequest(f"unknown part {shown!r}: send {known} only", param=shown)
    return name


def _safe_filename(name: str) -> str:
    """The client's name for the file, for display: its last component, printable, bounded."""
    base = PurePosixPath(name.replace("\\", "/")).name
    return "".join(ch for ch in base if ch.isprintable())[:255] or "upload"


def _boundary(request: Request) -> bytes:
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise InvalidRequest("send multipart/form-data with a 'file' field", param="file")
    return boundary


async def receive_upload(
    request: Request, *, folder: Path, parts: tuple[str, ...] = PARTS
) -> Upload:
    """Write the ``file`` field to a new file in ``folder``; the other ``parts`` come back as
    text."""
    boundary = _boundary(request)
    folder.mkdir(parents=True, exist_ok=True)
    receiver = _Receiver(folder, parts)
    parser = MultipartParser(boundary, _callbacks(receiver))
    writing: asyncio.Future[int] | None = None  # the previous batch, written while this arrives
    batch = bytearray()
    try:
        async for chunk in request.stream():
            batch += chunk
            if len(batch) >= BATCH_BYTES:
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(run_in_threadpool(parser.write, bytes(batch)))
                batch.clear()
        if writing is not None:
            await writing
        await run_in_threadpool(parser.write, bytes(batch))
        parser.finalize()
        receiver.close()
    except BaseException as exc:
        if writing is not None:  # let the thread finish before its file is removed
            await asyncio.gather(writing, return_exceptions=True)
        receiver.discard()
        if isinstance(exc, MultipartParseError):
            raise InvalidRequest(f"malformed multipart body: {exc}", param="file") from exc
        raise
    if receiver.path is None or receiver.filename is None:
        raise InvalidRequest("the upload has no 'file' field", param="file")
    fields = {k: v.decode("utf-8", "replace") for k, v in receiver.fields.items()}
    return Upload(
        receiver.path, receiver.filename, receiver.size, receiver.digest.hexdigest(), fields
    )


def _callbacks(receiver: _Receiver) -> MultipartCallbacks:
    return {
        "on_part_begin": receiver.on_part_begin,
        "on_header_field": receiver.on_header_field,
        "on_header_value": receiver.on_header_value,
        "on_header_end": receiver.on_header_end,
        "on_headers_finished": receiver.on_headers_finished,
        "on_part_data": receiver.on_part_data,
        "on_part_end": receiver.on_part_end,
    }


def discard(upload: Upload) -> None:
    if upload.path.exists():
        os.unlink(upload.path)
