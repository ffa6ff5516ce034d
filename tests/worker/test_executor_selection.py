"""The Celery side's executor by setting (``worker.consumer.executors.executor_for``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from gradacc.executors import UnknownExecutor
from gradacc.scheduling.queue import create_celery_app
from gradacc.settings import Settings
from worker.consumer.executors import LocalExecutor, executor_for


def test_local_by_default_and_ray_only_when_chosen(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    app = create_celery_app(settings)
    local = executor_for(settings, app)
    assert isinstance(local, LocalExecutor) and local.name == "local"
    pytest.importorskip("worker.consumer.executors.ray_executor")  # the .[ray] extra
    ray = executor_for(Settings(home=tmp_path, executor="ray"), app)
    assert ray.name == "ray" and not isinstance(ray, LocalExecutor)


def test_an_unknown_executor_is_refused_before_anything_runs(tmp_path: Path) -> None:
    settings = Settings.model_construct(home=tmp_path, executor=cast(Any, "k8s"))
    with pytest.raises(UnknownExecutor, match="GRADACC_EXECUTOR='k8s'"):
        executor_for(settings, create_celery_app(Settings(home=tmp_path)))


def test_a_ray_jobs_nodes_get_the_drivers_settings_not_its_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``node_environment``: the driver's GRADACC_* and HF_* variables, its home absolute (a Ray
    worker's directory is not the driver's), and nothing that names the driver's own machine."""
    ray_executor = pytest.importorskip("worker.consumer.executors.ray_executor")
    for name, value in {"GRADACC_DATABASE_URL": "postgresql://db/gradacc", "HF_HUB_OFFLINE": "1",
                        "GRADACC_MACHINE": "driver-host", "GRADACC_DEVICES": "8",
                        "GRADACC_ADVERTISE_HOST": "10.0.0.1", "GRADACC_WORKER_PID": "123",
                        "UNRELATED": "x"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    env = ray_executor.node_environment(Settings(home=Path("var")))
    assert env["GRADACC_DATABASE_URL"] == "postgresql://db/gradacc"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["GRADACC_HOME"] == str(tmp_path / "var")
    passed = {"GRADACC_MACHINE", "GRADACC_DEVICES", "GRADACC_ADVERTISE_HOST", "GRADACC_WORKER_PID",
              "UNRELATED"} & set(env)  # fmt: skip
    assert not passed, passed
