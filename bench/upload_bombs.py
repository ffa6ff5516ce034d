"""Peak memory of checking the uploads built as bombs (issue 30 H2, H3), each in a fresh Python.

    .venv/bin/python bench/upload_bombs.py

Prints, per upload: its size, the peak RSS of the process before and after the check (VmHWM),
and what the check answered. Before the fixes (the same builders on the previous code): the
200 MiB GNU long name and pax headers took 63 -> 482 MiB (and the pax one was accepted), 5,000
directories were accepted with a cap of 1,000 files, the 200k-entry zip took 63 -> 155 MiB
before its refusal, a 28 MiB JSON array 156 -> 470 MiB (parsed whole). The review measured
101 -> 520 MiB, +116 MiB and 153 -> 1009 MiB (``[{},…]``) on its own builds.
Builders: tests/api/bombs.py.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.bombs import (  # noqa: E402
    directories_tar,
    header_bomb,
    json_array,
    peak_rss,
    zip_of_entries,
)

MiB = 1 << 20
UNPACK = "from api.uploads.archives import unpack_model"
CHECK = "from api.services.files import check_dataset\ncheck_dataset(Path({small!r}), 'json')"


def _unpack(archive: Path, fmt: str, dest: Path) -> str:
    return (
        f"unpack_model(Path({str(archive)!r}), {fmt!r}, Path({str(dest)!r}), "
        f"max_bytes={32 << 30}, max_files=1000)"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        small = json_array(tmp / "small.json", 2000)
        cases = {
            "tar.gz, 200 MiB GNU long name": (
                header_bomb(tmp / "l.tar.gz", tarfile.GNUTYPE_LONGNAME, 200 * MiB),
                UNPACK,
                "tar.gz",
            ),
            "tar.gz, 200 MiB pax header": (
                header_bomb(tmp / "x.tar.gz", tarfile.XHDTYPE, 200 * MiB),
                UNPACK,
                "tar.gz",
            ),
            "tar.gz, 5,000 directories": (
                directories_tar(tmp / "d.tar.gz", 5000),
                UNPACK,
                "tar.gz",
            ),
            "zip, 200k entries": (zip_of_entries(tmp / "z.zip", 200_000), UNPACK, "zip"),
            "json, 28 MiB array": (json_array(tmp / "a.json", 28 * MiB), CHECK, "json"),
        }
        print(f"{'upload':32} {'bytes':>10} {'before MiB':>10} {'after MiB':>10}  answer")
        for name, (path, setup, fmt) in cases.items():
            if fmt == "json":
                call = f"check_dataset(Path({str(path)!r}), 'json')"
            else:
                call = _unpack(path, fmt, tmp / f"out-{path.name}")
            result = peak_rss(setup.format(small=str(small)), call, cwd=ROOT)
            before, after = int(str(result["before"])) / MiB, int(str(result["after"])) / MiB
            size = path.stat().st_size
            print(f"{name:32} {size:>10} {before:>10.0f} {after:>10.0f}  {result['outcome']}")


if __name__ == "__main__":
    main()
