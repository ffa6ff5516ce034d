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
