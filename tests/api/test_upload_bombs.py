"""Uploads built to cost the server far more than their size (issue 30: H2, H3): each is refused,
or checked, with the memory of the process doing it measured in a fresh Python and bounded.

Bounds are generous (tens of MiB) against growths of hundreds of MiB before the fixes: a GNU long
name or pax header of 200 MiB took ~400 MiB, a 200k-entry zip ~50-120 MiB, a 28 MiB JSON array
~330 MiB (parsed whole). Builders: tests/api/bombs.py; numbers: bench/upload_bombs.py.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from gradacc.settings import Settings
from tests.api.bombs import directories_tar, header_bomb, json_array, peak_rss, zip_of_entries

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
UNPACK = "from api.uploads.archives import unpack_model\nimport shutil"
DEFAULTS = Settings()  # the caps a server runs with unless told otherwise


def _unpack(archive: Path, fmt: str, dest: Path, *, max_files: int | None = None) -> str:
    files = max_files or DEFAULTS.max_model_files
    return (
        f"unpack_model(Path({str(archive)!r}), {fmt!r}, Path({str(dest)!r}), "
        f"max_bytes={DEFAULTS.max_model_unpacked_bytes}, max_files={files})"
    )


def _growth(result: dict[str, object]) -> int:
    after, before = result["after"], result["before"]
    assert isinstance(after, int) and isinstance(before, int)
    return after - before


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE, tarfile.XGLTYPE])
def test_a_huge_tar_extended_header_is_refused_before_it_is_read(
    tmp_path: Path, kind: bytes
) -> None:
    """~204 KB on the wire, a 200 MiB header: tarfile would read it whole into memory."""
    bomb = header_bomb(tmp_path / "bomb.tar.gz", kind, 200 * MiB)
    assert bomb.stat().st_size < 400_000
    result = peak_rss(UNPACK, _unpack(bomb, "tar.gz", tmp_path / "out"), cwd=ROOT)
    assert "InvalidRequest" in str(result["outcome"]), result
    assert "extended header" in str(result["outcome"]), result
    assert _growth(result) < 32 * MiB, result
    assert not (tmp_path / "out").exists()


def test_directories_count_against_the_file_cap(tmp_path: Path) -> None:
    """23 KB of tar made 5,000 directories that counted as no files."""
    archive = directories_tar(tmp_path / "dirs.tar.gz", 5000)
    result = peak_rss(UNPACK, _unpack(archive, "tar.gz", tmp_path / "out"), cwd=ROOT)
    assert f"over {DEFAULTS.max_model_files} files and folders" in str(result["outcome"]), result
    assert not (tmp_path / "out").exists()


def test_a_zip_of_200k_entries_is_refused_before_its_directory_is_parsed(tmp_path: Path) -> None:
    archive = zip_of_entries(tmp_path / "many.zip", 200_000)
    result = peak_rss(UNPACK, _unpack(archive, "zip", tmp_path / "out"), cwd=ROOT)
    outcome = str(result["outcome"])
    assert f"over {DEFAULTS.max_model_files} files and folders (200000)" in outcome, result
    assert _growth(result) < 16 * MiB, result


def test_a_zip_that_understates_its_entries_is_refused_by_its_directory_size(
    tmp_path: Path,
) -> None:
    archive = zip_of_entries(tmp_path / "liar.zip", 200_000, claimed=5)
    result = peak_rss(UNPACK, _unpack(archive, "zip", tmp_path / "out"), cwd=ROOT)
    assert "central directory is over" in str(result["outcome"]), result
    assert _growth(result) < 16 * MiB, result


CHECK = (
    "from api.services.files import check_dataset\n"
    # Warm up on a small array: pyarrow's compute kernels cost ~40 MiB once, whatever the size.
    "check_dataset(Path({small!r}), 'json')"
)


def test_a_28_mib_json_array_is_checked_in_bounded_memory(tmp_path: Path) -> None:
    big = json_array(tmp_path / "big.json", 28 * MiB)
    small = json_array(tmp_path / "small.json", 2000)
    setup = CHECK.format(small=str(small))
    result = peak_rss(setup, f"check_dataset(Path({str(big)!r}), 'json')", cwd=ROOT)
    assert result["outcome"] == "accepted", result
    assert _growth(result) < 48 * MiB, result


def test_arrays_nested_deep_or_long_rows_are_refused_naming_the_row(tmp_path: Path) -> None:
    row = json.dumps({"text": "fine", "label": 1})
    cases = {
        "deep.json": f'[{row}, {{"text": {"[" * 100_000}{"]" * 100_000}}}]',
        "long.json": f'[{row}, {row}, {{"text": "{"x" * (9 * MiB)}", "label": 1}}]',
    }
    from api.services.files import check_dataset
    from gradacc.errors import InvalidRequest

    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(InvalidRequest, match=r"row [23] of the array") as refused:
            check_dataset(tmp_path / name, "json")
        assert refused.value.param == "file"
