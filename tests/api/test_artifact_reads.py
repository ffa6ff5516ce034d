"""A job's log tail and evaluation pages read a bounded part of the file's end, whatever its
size or shape, and the routes that touch the disk run beside the event loop."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from api.routes import artifacts as routes
from api.services import artifacts


@pytest.mark.parametrize("ending", [b"", b"\n"])
@pytest.mark.parametrize("wanted", [1, 2, 7, 1000, 5000])
def test_tail_is_the_last_lines(tmp_path: Path, ending: bytes, wanted: int) -> None:
    log = tmp_path / "train.log"
    lines = [f"line {i} ".encode() * (i % 50) for i in range(3000)]
    log.write_bytes(b"\n".join(lines) + ending)
    expected = lines[-wanted:]
    assert artifacts.tail(log, wanted) == b"\n".join(expected) + b"\n"


def test_tail_of_a_missing_or_empty_log(tmp_path: Path) -> None:
    assert artifacts.tail(tmp_path / "none.log", 5) == b""
    (tmp_path / "empty.log").write_bytes(b"")
    assert artifacts.tail(tmp_path / "empty.log", 5) == b""


def test_a_huge_log_without_newlines_is_read_only_to_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"x" * (8 * 1024 * 1024) + b"\nlast\n")
    read: list[int] = []
    real_open = Path.open

    def counting_open(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        handle = real_open(self, *args, **kwargs)  # type: ignore[call-overload]
        real_read = handle.read

        def read_counted(size: int = -1) -> bytes:
            data: bytes = real_read(size)
            read.append(len(data))
            return data

        handle.read = read_counted
        return handle

    monkeypatch.setattr(Path, "open", counting_open)
    monkeypatch.setattr(artifacts, "TAIL_MAX_BYTES", 1024 * 1024)
    assert artifacts.tail(log, 1) == b"last\n"
    assert artifacts.tail(log, 3) == b"last\n"  # the 8 MiB line is cut by the bound: left out
    assert sum(read) <= 2 * (1024 * 1024 + artifacts.BLOCK_BYTES)  # two calls, each bounded


def test_evaluations_are_newest_first_a_page_at_a_time(tmp_path: Path) -> None:
    reports = [{"step": step, "samples": ["y" * 100]} for step in range(10, 510, 10)]
    text = "".join(json.dumps(r) + "\n" for r in reports) + '{"step": 510, "sam'  # being written
    (tmp_path / "evaluations.jsonl").write_text(text)
    page, more = artifacts.evaluations(tmp_path, limit=3)
    assert [r["step"] for r in page] == [500, 490, 480] and more
    everything, more = artifacts.evaluations(tmp_path, limit=1000)
    assert [r["step"] for r in everything] == [r["step"] for r in reversed(reports)]
    assert not more
    assert artifacts.evaluations(tmp_path / "none", limit=5) == ([], False)


def test_routes_that_read_a_jobs_folder_run_in_the_thread_pool() -> None:
    # An ``async def`` route runs on the event loop: its disk reads would stall every request
    # of the process. A plain ``def`` runs in FastAPI's thread pool.
    disk_routes = [
        routes.list_artifacts,
        routes.get_artifact,
        routes.list_checkpoints,
        routes.get_logs,
    ]
    assert not [f.__name__ for f in disk_routes if inspect.iscoroutinefunction(f)]
