"""The python grader's sandbox contains what a grader may try: a socket, a read of the server's
files, an endless loop, an unbounded allocation, a sleep past the wall clock. Each is counted
by OpenAI's kind and scores 0; a good grader still scores. Limits are small so the file costs
seconds (the CPU limit is 1 s, the wall clock 3 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer_core.graders import Grading, SandboxLimits, run_grader
from trainer_core.spec.graders import parse_grader

REPO_FILE = Path(__file__).resolve().parents[2] / "pyproject.toml"
LIMITS = SandboxLimits(wall_s=3.0, cpu_s=1, memory_bytes=512 << 20, disk_bytes=4 << 20)


def grade(
    body: str, sample: str = '{"answer": 4}', item: object = None
) -> tuple[float, list[str], dict[str, str]]:
    source = "import os, socket, time\n\ndef grade(sample, item):\n" + body
    grader = parse_grader({"type": "python", "name": "p", "source": source})
    result = run_grader(grader, sample, item, Grading(limits=LIMITS))
    return result.reward, result.failed_kinds, result.details


def test_a_grader_scores_from_the_sample_and_the_item() -> None:
    body = "    return 1.0 if sample['output_json']['answer'] == item['x'] else 0.25\n"
    assert grade(body, item={"x": 4}) == (1.0, [], {})
    assert grade(body, item={"x": 5}) == (0.25, [], {})
    assert grade("    return len(sample['output_text'])\n", sample="abc")[0] == 3.0


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    return 1\n", "OSError"),
        ("    return len(open('/etc/passwd').read())\n", "FileNotFoundError"),
        (f"    return len(open({str(REPO_FILE)!r}).read())\n", "FileNotFoundError"),
        ("    return len(os.listdir('/proc'))\n", "FileNotFoundError"),
        ("    return len(os.listdir('/home'))\n", "FileNotFoundError"),
        ("    x = []\n    while True:\n        x.append(' ' * 10**7)\n", "MemoryError"),
        ("    return 1 / 0\n", "ZeroDivisionError"),
        ("    return 'high'\n", "TypeError: grade() returned str"),
        ("    return float('nan')\n", "grade() returned nan"),
    ],
    ids=[
        "socket",
        "etc-passwd",
        "repo-file",
        "proc",
        "home",
        "allocation",
        "raises",
        "text",
        "nan",
    ],
)
def test_what_a_grader_may_not_do_is_a_runtime_error(body: str, detail: str) -> None:
    reward, kinds, details = grade(body)
    assert (reward, kinds) == (0.0, ["python_grader_runtime_error"])
    assert detail in details["python_grader_runtime_error_details"]


@pytest.mark.parametrize(
    "body", ["    while True:\n        pass\n", "    time.sleep(60)\n"], ids=["cpu", "wall"]
)
def test_a_grader_that_does_not_answer_is_unresponsive(body: str) -> None:
    assert grade(body)[:2] == (0.0, ["unresponsive_reward_error"])


def test_the_sandbox_sees_only_its_scratch_dir_and_python() -> None:
    """Its root holds the read-only Python tree and a scratch dir it may write (and nothing
    written there outlives the run)."""
    body = ("    open('note', 'w').write('x')\n"
            "    assert not os.path.exists('/etc') and not os.path.exists('/work/main/api')\n"
            "    try:\n        open('/usr/lib/x', 'w')\n    except OSError:\n        return 1\n"
            "    return 0\n")  # fmt: skip
    assert grade(body) == (1.0, [], {})


def test_without_namespaces_the_grader_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: no ``unshare`` on the PATH, no unconfined run."""
    monkeypatch.setenv("PATH", "/nonexistent")
    reward, kinds, details = grade("    return 1\n")
    assert (reward, kinds) == (0.0, ["python_grader_server_error"])
    assert details["python_grader_server_error_type"].startswith("sandbox_unavailable")


def test_the_namespace_root_cannot_remount_python_writable() -> None:
    """Its capabilities are gone: mount(2) fails, so the read-only binds stay read-only."""
    body = ("    import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
            "    flags = 32 | 4096  # MS_REMOUNT | MS_BIND, without MS_RDONLY\n"
            "    failed = libc.mount(None, b'/usr', None, flags, None) != 0\n"
            "    return 1 if failed and ctypes.get_errno() == 1 else 0  # EPERM\n")  # fmt: skip
    assert grade(body) == (1.0, [], {})
