"""Where a queued job stands: its place in the scheduler's order (``queue_position``, 1 = next)
and when it may start (``estimated_start``). Read by the API for the job object.

Positions replay the scheduler's order (``gradacc.scheduling.claim``) on the queue as it is now, as
if nothing new arrived and nothing running ended: higher priority first; among equal priority,
each pick goes to the tenant with the fewest devices in use (the picks before it counted as
started), then to the tenant whose turn came longest ago, then to its oldest job. Position 1 is
the job the next claim takes. Device sizes and running limits are left out: a job that needs
more devices than a free worker has, or whose tenant is at its limit, may be passed. A read
fetches and replays at most ``queue_position_limit`` jobs, the first in that order as SQL can
sort it (priority, then the devices the tenant will have in use by then): a job behind them
reads as that limit plus one, so a poll costs the same however long the queue is.

The start estimate: D is the median run time of the last ``RECENT`` succeeded jobs. Each live
worker is a slot, free now, or when its running job ends (its latest ETA, else D minus its time
so far); each job ahead takes D on the slot that frees first. Null when no worker is alive, or
when a duration is needed and no job has succeeded yet.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from sqlalchemy import func, select

from gradacc.scheduling.order import is_queued, usage_by_tenant
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, TenantTurn, Worker, utcnow

RECENT = 20  # succeeded jobs whose run times make D
Reader = Any  # a Connection or a Session: both execute Core statements


@dataclass(frozen=True)
class QueueSpot:
    position: int
    estimated_start: datetime | None


def queue_spots(
    reader: Reader, job_ids: list[str], *, settings: Settings, now: datetime | None = None
) -> dict[str, QueueSpot]:
    """The spot of each of ``job_ids`` that is queued (the others are left out)."""
    queued = Job.status == JobStatus.QUEUED
    wanted = dict(
        reader.execute(select(Job.id, Job.priority).where(Job.id.in_(job_ids), queued)).all()
    )
    if not wanted:
        return {}
    moment = now or utcnow()
    positions = replay_order(
        reader, wanted=set(wanted), floor=min(wanted.values()), limit=settings.queue_position_limit
    )
    if not positions:  # claimed in the meantime
        return {}
    starts = _start_offsets(reader, settings=settings, now=moment, last=max(positions.values()))
    return {job_id: QueueSpot(p, _at(moment, starts[p - 1])) for job_id, p in positions.items()}


def _at(moment: datetime, offset: float) -> datetime | None:
    return None if math.isinf(offset) else moment + timedelta(seconds=offset)


def replay_order(
    reader: Reader, *, wanted: set[str], floor: int, limit: int | None = None
) -> dict[str, int]:
    """Positions (1 = next) of ``wanted``, all queued with priority >= ``floor``. With ``limit``:
    only the first ``limit`` jobs of the queue are read and replayed, and a wanted job past them
    is at ``limit + 1`` ("more than ``limit`` ahead")."""
    # In the order the replay will pick them, near enough (so a limit keeps the right ones): by
    # priority, then by the devices the job's tenant will have in use when its turn comes (its
    # running jobs' and its queued jobs' ahead of this one); the replay settles the ties.
    usage = usage_by_tenant()
    ahead = func.sum(Job.num_processes).over(
        partition_by=Job.tenant, order_by=(Job.priority.desc(), Job.id), rows=(None, -1)
    )
    queue = (
        select(Job.priority, Job.tenant, Job.id, Job.num_processes, ahead.label("ahead"))
        .where(is_queued(Job), Job.priority >= floor)
        .subquery()
    )
    in_use_then = func.coalesce(queue.c.ahead, 0) + func.coalesce(usage.c.in_use, 0)
    rows = reader.execute(
        select(queue.c.priority, queue.c.tenant, queue.c.id, queue.c.num_processes)
        .outerjoin(usage, usage.c.tenant == queue.c.tenant)
        .order_by(queue.c.priority.desc(), in_use_then, queue.c.id)
        .limit(None if limit is None else limit + 1)
    ).all()
    if limit is not None and len(rows) > limit:
        found = _replay(reader, rows[:limit], wanted)
        return {job_id: found.get(job_id, limit + 1) for job_id in wanted}
    return _replay(reader, rows, wanted)


def _replay(reader: Reader, rows: list[Any], wanted: set[str]) -> dict[str, int]:
    usage = usage_by_tenant()
    in_use = {t: int(n) for t, n in reader.execute(select(usage.c.tenant, usage.c.in_use))}
    turns: dict[str, Any] = {
        t: (1, at)
        for t, at in reader.execute(select(TenantTurn.tenant, TenantTurn.last_started_at))
    }
    found: dict[str, int] = {}
    replay = _Replay(in_use, turns)
    for _, level in itertools.groupby(rows, key=itemgetter(0)):
        by_tenant: dict[str, deque[tuple[str, int]]] = {}
        for _, tenant, job_id, devices in level:
            by_tenant.setdefault(tenant, deque()).append((job_id, devices))
        for job_id, position in replay.level(by_tenant):
            if job_id in wanted:
                found[job_id] = position
                if len(found) == len(wanted):
                    return found
    return found


class _Replay:
    """Picks as the claim would make them, each counted as started (its devices in use, its
    tenant's turn the latest)."""

    def __init__(self, in_use: dict[str, int], turns: dict[str, Any]) -> None:
        self.in_use, self.turns, self.position = in_use, turns, 0

    def level(self, by_tenant: dict[str, deque[tuple[str, int]]]) -> Iterator[tuple[str, int]]:
        """(job id, position) of one priority's jobs, in the order they would start."""
        heap = [
            (self.in_use.get(t, 0), self.turns.get(t, (0, 0)), q[0][0], t)
            for t, q in by_tenant.items()
        ]
        heapq.heapify(heap)
        while heap:
            tenant = heapq.heappop(heap)[3]
            jobs = by_tenant[tenant]
            if not heap:  # the last tenant of this priority: the rest of its jobs in order
                for job_id, devices in jobs:
                    self.position += 1
                    self.in_use[tenant] = self.in_use.get(tenant, 0) + devices
                    yield job_id, self.position
                self.turns[tenant] = (2, self.position)
                return
            job_id, devices = jobs.popleft()
            self.position += 1
            yield job_id, self.position
            self.in_use[tenant] = self.in_use.get(tenant, 0) + devices
            self.turns[tenant] = (2, self.position)  # after every real turn and earlier pick
            if jobs:
                heapq.heappush(heap, (self.in_use[tenant], self.turns[tenant], jobs[0][0], tenant))


def typical_duration(reader: Reader) -> float | None:
    """The median run time, in seconds, of the last ``RECENT`` succeeded jobs; None if none."""
    done = (Job.status == JobStatus.SUCCEEDED) & Job.started_at.is_not(None)
    rows = reader.execute(
        select(Job.started_at, Job.finished_at)
        .where(done, Job.finished_at.is_not(None))
        .order_by(Job.id.desc())
        .limit(RECENT)
    ).all()
    times = [(end - start).total_seconds() for start, end in rows]
    return statistics.median(times) if times else None


def _start_offsets(reader: Reader, *, settings: Settings, now: datetime, last: int) -> list[float]:
    """Seconds from now until positions 1..``last`` start (``math.inf``: cannot be estimated)."""
    since = now - timedelta(seconds=settings.worker_alive_s)
    workers = int(
        reader.execute(select(func.count()).where(Worker.heartbeat_at >= since)).scalar() or 0
    )
    if workers == 0:
        return [math.inf] * last
    duration = typical_duration(reader)
    running = reader.execute(
        select(Job.started_at, Job.live_progress).where(Job.status == JobStatus.RUNNING)
    ).all()
    busy = sorted(_remaining(started, live, duration, now) for started, live in running)[:workers]
    slots = busy + [0.0] * (workers - len(busy))
    heapq.heapify(slots)
    starts: list[float] = []
    for _ in range(last):
        free_at = heapq.heappop(slots)
        starts.append(free_at)
        heapq.heappush(slots, math.inf if duration is None else free_at + duration)
    return starts


def _remaining(
    started: datetime | None, live: dict[str, Any] | None, duration: float | None, now: datetime
) -> float:
    eta = (live or {}).get("eta_seconds")
    if isinstance(eta, int | float):
        return max(0.0, float(eta))
    if duration is None or started is None:
        return math.inf
    return max(0.0, duration - (now - started).total_seconds())
