"""The executor seam (``protocol``): what runs a claimed job, and what a cluster holds.

Public names: ``Executor``, ``Execution``, ``Placement``, ``Admission``, ``JobShape``,
``Capacity`` (``protocol``); ``executor_name``, ``cluster_capacity``, ``UnknownExecutor``,
``EXECUTORS`` (``select``).
"""

from gradacc.executors.protocol import (
    Admission,
    Capacity,
    Execution,
    Executor,
    JobShape,
    Placement,
)
from gradacc.executors.select import EXECUTORS, UnknownExecutor, cluster_capacity, executor_name

__all__ = [
    "EXECUTORS",
    "Admission",
    "Capacity",
    "Execution",
    "Executor",
    "JobShape",
    "Placement",
    "UnknownExecutor",
    "cluster_capacity",
    "executor_name",
]
