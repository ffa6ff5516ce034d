"""The training child is a process apart from the Celery worker: importing its entry points (the
cold one and the fork server's) loads neither Celery nor the queue; the API loads no torch."""

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
