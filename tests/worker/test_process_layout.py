"""The training child is a process apart from the Celery worker: importing its entry points (the
cold one and the fork server's) loads neither Celery nor the queue; the API and the Celery
worker load no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

_LOADED = "import sys, {module}; print(sorted(m for m in {names} if m in sys.modules))"


def _loaded(module: str, names: tuple[str, ...]) -> str:
    code = _LOADED.format(module=module, names=names)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return result.stdout.strip()


@pytest.mark.parametrize("entry", ["worker.child.entry", "worker.fork_server.child"])
def test_the_training_child_never_imports_celery(entry: str) -> None:
    assert (
        _loaded(entry, ("celery", "kombu", "gradacc.scheduling.queue", "worker.consumer")) == "[]"
    )


def test_the_celery_side_does_import_celery() -> None:
    """The control: the probe sees Celery where it is loaded."""
    assert _loaded("worker.consumer.tasks", ("celery",)) == "['celery']"


def test_the_api_loads_no_torch() -> None:
    assert _loaded("api.main", ("torch", "transformers", "worker")) == "[]"


def test_the_celery_worker_and_the_launcher_load_no_torch() -> None:
    """torch lives in the fork server, the training processes and the predict server's own import
    thread: a Celery worker imported it (4.5 s of CPU at every start) through the launcher's
    re-plan file reader; the predict server's loop module does not need it to start polling."""
    for module in ("worker.consumer.tasks", "worker.predict.server", "worker.child.ranks.launcher"):
        assert _loaded(module, ("torch", "transformers")) == "[]", module


def test_the_training_side_does_load_torch() -> None:
    """The control: the probe sees torch where it is loaded."""
    assert _loaded("worker.fork_server.warmup", ("torch",)) == "['torch']"
