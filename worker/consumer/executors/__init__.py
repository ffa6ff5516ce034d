"""What runs a claimed job on the Celery side: the executor ``GRADACC_EXECUTOR`` names
(``gradacc.executors.protocol``; docs/distributed.md, Executors).

``executor_for(settings, app)``: ``local`` (``local.LocalExecutor``), or the module of another
executor, imported only when chosen (its ``executor(settings, app)``): Ray's needs the ``ray``
package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from celery import Celery

from gradacc.executors.protocol import Executor
from gradacc.executors.select import executor_name
from gradacc.settings import Settings
from worker.consumer.executors.local import LocalExecutor

# The executors other than local, by name: the module that defines ``executor(settings, app)``.
MODULES = {"ray": "worker.consumer.executors.ray_executor"}


def executor_for(settings: Settings, app: Celery) -> Executor:
    """The chosen executor (``UnknownExecutor`` for a name that is none)."""
    name = executor_name(settings)
    if name not in MODULES:
        return LocalExecutor(settings, app)
    module = importlib.import_module(MODULES[name])
    build = cast(Callable[[Settings, Celery], Executor], module.executor)
    return build(settings, app)


__all__ = ["MODULES", "LocalExecutor", "executor_for"]
