"""The executor by setting (``GRADACC_EXECUTOR``): its name checked, and its cluster's capacity.

The run side (``Executor``) is the worker's (``worker.consumer.executors.executor_for``); what
the API may ask, which machines the cluster has, is here. An executor's modules are imported only
when it is chosen: Ray's need the ``ray`` package (the ``.[ray]`` extra), ``local`` needs none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from sqlalchemy.orm import Session

from gradacc.executors.protocol import Capacity
from gradacc.settings import Settings
from gradacc.workers import live_machines

EXECUTORS = ("local", "ray")
# Each executor's capacity, for the executors other than local (module, function).
CAPACITY_MODULES = {"ray": "gradacc.executors.ray_cluster"}


class UnknownExecutor(ValueError):
    """``GRADACC_EXECUTOR`` names no executor (settings refuse it; this guards a built one)."""

    def __init__(self, name: str) -> None:
        choices = ", ".join(EXECUTORS)
        super().__init__(f"GRADACC_EXECUTOR={name!r} is not an executor; choose one of {choices}")
        self.name = name


def executor_name(settings: Settings) -> str:
    """The chosen executor's name; ``UnknownExecutor`` for any other."""
    name = str(settings.executor)
    if name not in EXECUTORS:
        raise UnknownExecutor(name)
    return name


def cluster_capacity(settings: Settings, *, session: Session) -> Capacity:
    """The machines the chosen executor's cluster has now (busy ones too), by devices. Local:
    the live workers of the API's queue, a machine's largest; others: their cluster's answer."""
    name = executor_name(settings)
    if name in CAPACITY_MODULES:
        module = importlib.import_module(CAPACITY_MODULES[name])
        ask = cast(Callable[[Settings], Capacity], module.capacity)
        return ask(settings)
    machines = live_machines(session, alive_s=settings.worker_alive_s, queue=settings.queue)
    return Capacity(tuple(machines.values()))
