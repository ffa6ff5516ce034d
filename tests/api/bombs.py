"""Small uploads that cost the server far more than their size, and a way to measure that cost.

Shared by tests/api/test_upload_bombs.py and bench/upload_bombs.py. Each builder writes to disk
in chunks, so building a bomb costs the test process little.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

CONFIG = b'{"model_type": "bert"}'
_ZEROS = b"\0" * (1 << 20)


def _write_zeros(out: io.BufferedIOBase | gzip.GzipFile, count: int) -> None:
    for _ in range(count >> 20):
        out.write(_ZEROS)
    out.write(b"\0" * (count & ((1 << 20) - 1)))


def _header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.GNU_FORMAT)


def _regular(name: str, data: bytes) -> bytes:
    padding = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    return _header(name, tarfile.REGTYPE, len(data)) + data + padding


def header_bomb(path: Path, kind: bytes, header_bytes: int) -> Path:
    """A .tar.gz whose first header is an extended one (GNU long name ``L``, pax ``x`` or ``g``)
    declaring ``header_bytes`` of zeros, then a plausible model: ~1 KB per MiB declared."""
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(_header("././@LongLink", kind, header_bytes))
        _write_zeros(out, header_bytes + (-header_bytes % tarfile.BLOCKSIZE))
        out.write(_regular("config.json", CONFIG))
        out.write(_regular("model.safetensors", b"x" * 64))
        out.write(b"\0" * 2 * tarfile.BLOCKSIZE)
    return path


def directories_tar(path: Path, count: int) -> Path:
    """A plausible model plus ``count`` empty directories (~5 bytes each compressed)."""
    with gzip.open(path, "wb") as out:
        out.write(_regular("config.json", CONFIG))
        out.write(_regular("model.safetensors", b"x" * 64))
        for number in range(count):
            out.write(_header(f"d{number}/", tarfile.DIRTYPE, 0))
        out.write(b"\0" * 2 * tarfile.BLOCKSIZE)
    return path


_CENTRAL = struct.Struct("<4s6H3L5H2L")  # a central directory record, before its name


def zip_of_entries(path: Path, count: int, claimed: int | None = None) -> Path:
    """A valid zip64 of ``count`` empty stored entries whose central records all point at one
    local header (~60 bytes on the wire each; every ZipInfo costs ~600 B of RAM when parsed).
    Its end records say it holds ``claimed`` entries (``count`` unless given)."""
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, 1, 0) + b"a"
    with path.open("wb") as out:
        out.write(local)
        start = out.tell()
        for number in range(count):
            name = b"%07d" % number
            fields = (20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, 0)
            out.write(_CENTRAL.pack(b"PK\x01\x02", *fields) + name)
        end = out.tell()
        said = count if claimed is None else claimed
        zip64 = (44, 45, 45, 0, 0, said, said, end - start, start)
        out.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", *zip64))
        out.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, end, 1))
        out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                              0xFFFFFFFF, 0))  # fmt: skip
    return path


def json_array(path: Path, target_bytes: int) -> Path:
    """One JSON array of small objects, ``target_bytes`` long (the review's was ~28 MiB)."""
    row = json.dumps({"text": "a short review", "label": 1}).encode()
    count = max(1, target_bytes // (len(row) + 1))
    with path.open("wb") as out:
        out.write(b"[")
        out.write(b",".join([row] * count))
        out.write(b"]")
    return path


MEASURE = """
import json, resource, sys
from pathlib import Path
def peak():  # VmHWM: this process's own high-water mark (ru_maxrss counts the forking parent's)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
{setup}
before = peak()
try:
    {call}
    outcome = "accepted"
except Exception as exc:
    outcome = f"{{type(exc).__name__}}: {{exc}}"[:300]
print(json.dumps({{"before": before, "after": peak(), "outcome": outcome}}))
"""


def peak_rss(setup: str, call: str, *, cwd: Path) -> dict[str, object]:
    """Run ``call`` in a fresh Python after ``setup`` (imports): its peak RSS in bytes before and
    after, and what happened (``accepted`` or the exception). A fresh process, so that nothing
    the test process did before raises the peak (Linux: read from /proc/self/status)."""
    code = MEASURE.format(setup=setup, call=call)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
