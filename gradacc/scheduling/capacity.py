"""Does a live worker have the devices a job asks for? Asked at POST for multi-process jobs.

A job over M machines (gang scheduling, ``gradacc.scheduling.gang``) needs num_processes / M devices on each
of M machines; whether M distinct machines are live is not asked here: such a job waits queued
(its gang gathers and is released in turn) until they are.

Workers advertise their device count through the queues they consume (``gradacc.scheduling.queue``: a worker
with D devices consumes ``<queue>.devices-n`` for every n <= D), and Celery's remote control tells
who is live and consumes what (``inspect().active_queues()``, a broadcast answered within
``INSPECT_TIMEOUT_S``). The answer is cached per process for ``CACHE_S``, and a one-process job
is never checked: any worker holds it, and its POST pays nothing.

``largest_live_device_set`` is the one seam to a worker registry. The ``workers`` table lists each
live worker's device nodes but not its ``GRADACC_DEVICES`` (the gloo processes of a CPU worker);
with that number in a column, this function can read the table instead of the broadcast.
"""

from __future__ import annotations

import threading
import time

from celery import Celery

from gradacc.errors import InvalidRequest
from gradacc.scheduling.queue import DEVICES_SUFFIX
from gradacc.settings import Settings
from trainer_core.spec.job import JobSpec

INSPECT_TIMEOUT_S = 1.0
CACHE_S = 10.0
_lock = threading.Lock()
_cached: tuple[float, int] | None = None


def _devices_of(queue_names: list[str], settings: Settings) -> int:
    prefix = settings.queue + DEVICES_SUFFIX
    counts = [int(n[len(prefix) :]) for n in queue_names if n.startswith(prefix)]
    counts += [1 for n in queue_names if n == settings.queue]
    return max(counts, default=0)


def largest_live_device_set(celery: Celery, settings: Settings) -> int | None:
    """The most devices any live worker has (0: no worker answered; None: the broker did not)."""
    global _cached
    with _lock:
        if _cached is not None and time.monotonic() - _cached[0] < CACHE_S:
            return _cached[1]
        try:
            replies = celery.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}
        except Exception:  # the broker is down: unknown, and the job waits queued like any other
            return None
        largest = max(
            (_devices_of([q["name"] for q in queues], settings) for queues in replies.values()),
            default=0,
        )
        _cached = (time.monotonic(), largest)
        return largest


def check_devices(spec: JobSpec, celery: Celery, settings: Settings) -> None:
    """Refuse (422, ``num_processes``/``num_machines``) a job no live worker can hold."""
    needed = spec.processes_per_machine  # a gang job holds that many on each machine
    if needed <= 1 and spec.num_machines == 1:
        return
    largest = largest_live_device_set(celery, settings)
    if largest is not None and needed > largest:
        if spec.num_machines > 1:
            raise InvalidRequest(
                f"no live worker has the {needed} devices a machine of this job needs "
                f"(num_processes / num_machines; the largest has {largest})",
                param="num_machines",
            )
        raise InvalidRequest(
            f"no live worker has {spec.num_processes} devices (the largest has {largest})",
            param="num_processes",
        )
