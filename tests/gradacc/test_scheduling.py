"""The scheduler on both databases (``db_settings``): the claim's order (priority, then tenants'
turns), devices and running limits, two claimers racing, queue positions that agree with the
claim, and the start estimate."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gradacc.db import session_scope
from gradacc.scheduling.claim import claim_next
from gradacc.scheduling.position import queue_spots
from gradacc.settings import Settings
from gradacc.tables import Job, JobStatus, Worker, utcnow
from gradacc.workers import register_worker
from tests.support import JOB_SPEC

# Ids in creation order within one millisecond too (real ids of one millisecond are unordered).
_MS = int(time.time() * 1000)
_SEQ = itertools.count()


def add_jobs(settings: Settings, tenant: str, count: int = 1, **values: Any) -> list[str]:
    ids = [f"job_{_MS:012x}{next(_SEQ):08x}" for _ in range(count)]
    with session_scope(settings) as session:
        for job_id in ids:
            fields = {"status": JobStatus.QUEUED, "enqueued_at": utcnow(), "spec": JOB_SPEC}
            session.add(Job(id=job_id, tenant=tenant, effective_batch_size=8, **fields | values))
        session.commit()
    return ids


def finish(settings: Settings, job_id: str) -> None:
    with session_scope(settings) as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="succeeded"))
        session.commit()


def claim(settings: Settings, worker: str = "w") -> str | None:
    with session_scope(settings) as session:
        claimed = claim_next(session, worker=worker, settings=settings)
    return None if claimed is None else claimed.job_id


def one_device_order(settings: Settings) -> list[str]:
    """Claims one at a time, each job ending before the next claim (a server of one device)."""
    order = []
    while (job_id := claim(settings)) is not None:
        order.append(job_id)
        finish(settings, job_id)
    return order


def positions(settings: Settings, job_ids: list[str]) -> dict[str, int]:
    with session_scope(settings) as session:
        return {k: v.position for k, v in queue_spots(session, job_ids, settings=settings).items()}


def test_priority_first_then_tenants_take_turns(db_settings: Settings) -> None:
    burst = add_jobs(db_settings, "alice", 10)
    bobs = add_jobs(db_settings, "bob", 2)
    urgent = add_jobs(db_settings, "carol", 1, priority=5)
    low = add_jobs(db_settings, "carol", 1, priority=-1)
    expected = [*urgent, burst[0], bobs[0], burst[1], bobs[1], *burst[2:], *low]
    shown = positions(db_settings, expected)
    assert [shown[job_id] for job_id in expected] == list(range(1, len(expected) + 1))
    order = one_device_order(db_settings)
    assert order == expected
    assert order.index(bobs[0]) < order.index(burst[2]), "bob's first waited for alice's third"


def test_the_tenant_with_fewest_devices_in_use_goes_first(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"devices": 4})
    add_jobs(settings, "big", 1, status=JobStatus.RUNNING, num_processes=3)
    add_jobs(settings, "small", 1, status=JobStatus.RUNNING, num_processes=1)
    big_waiting = add_jobs(settings, "big", 1)  # older than small's
    small_waiting = add_jobs(settings, "small", 2, num_processes=2)
    assert positions(settings, small_waiting + big_waiting) == {
        small_waiting[0]: 1,  # small: 1 device in use, big: 3
        big_waiting[0]: 2,  # then small has 3 in use too, and the most recent turn
        small_waiting[1]: 3,
    }
    expected = [small_waiting[0], big_waiting[0], small_waiting[1], None]
    assert [claim(settings) for _ in range(4)] == expected  # the replay's order


def test_only_jobs_that_fit_and_tenants_under_their_limit(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"max_running_per_tenant": 1})
    add_jobs(settings, "busy", 1, status=JobStatus.RUNNING)
    urgent = add_jobs(settings, "busy", 1, priority=9)  # its tenant is at its limit
    wide = add_jobs(settings, "idle", 1, priority=5, num_processes=2)  # needs 2 devices
    plain = add_jobs(settings, "idle", 1)
    assert claim(settings) == plain[0]
    assert claim(settings) is None  # idle is at its limit now; the wide job fits no device
    roomier = settings.model_copy(update={"devices": 2, "max_running_per_tenant": 2})
    assert [claim(roomier) for _ in range(3)] == [urgent[0], wide[0], None]


def test_two_claimers_racing_never_take_one_job(db_settings: Settings) -> None:
    """Two claimers at once, on two threads (two connections): every job is claimed once; with
    a running limit of one per tenant, no tenant ever has two running."""
    jobs = [job for t in ("t1", "t2", "t3") for job in add_jobs(db_settings, t, 20)]
    claimed: list[str] = []
    lock = threading.Lock()

    def drain(name: str) -> None:
        while (job_id := claim(db_settings, worker=name)) is not None:
            with lock:
                claimed.append(job_id)
            finish(db_settings, job_id)

    race(drain)
    assert sorted(claimed) == sorted(jobs)  # each once: no double claim, none left behind
    limited = db_settings.model_copy(update={"max_running_per_tenant": 1})
    waiting = [add_jobs(limited, t, 5)[0] for t in ("u1", "u2", "u3")]
    held: list[str] = []

    def take(name: str) -> None:
        while (job_id := claim(limited, worker=name)) is not None:  # never finished
            with lock:
                held.append(job_id)

    race(take)
    assert sorted(held) == sorted(waiting)  # one per tenant: each tenant's oldest


def race(target: Any) -> None:
    threads = [threading.Thread(target=target, args=(f"w{n}",)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


def sent_at(session: Session, job_id: str) -> datetime | None:
    return session.scalar(select(Job.enqueued_at).where(Job.id == job_id))


def test_the_start_estimate_follows_recent_run_times(db_settings: Settings) -> None:
    settings, now = db_settings, utcnow()
    waiting = add_jobs(settings, "a", 3)
    with session_scope(settings) as session:
        session.execute(delete(Worker))  # no worker alive: nothing can be estimated
        session.commit()
        spots = queue_spots(session, waiting, settings=settings, now=now)
        assert [spots[j].estimated_start for j in waiting] == [None] * 3
        register_worker(session, name="w1", pid=1, devices=["cpu"])  # one worker, alive
    add_jobs(settings, "a", 1, status=JobStatus.RUNNING, live_progress={"eta_seconds": 5})
    with session_scope(settings) as session:
        spots = queue_spots(session, waiting, settings=settings, now=now)
        # No job has succeeded yet: only the first can be estimated (the running job's ETA).
        first = now + timedelta(seconds=5)
        assert [spots[j].estimated_start for j in waiting] == [first, None, None]
    for seconds in (10, 30, 20):  # median 20
        start = now - timedelta(hours=1)
        add_jobs(settings, "b", 1, status=JobStatus.SUCCEEDED, started_at=start,
                 finished_at=start + timedelta(seconds=seconds))  # fmt: skip
    with session_scope(settings) as session:
        spots = queue_spots(session, waiting, settings=settings, now=now)
    assert [spots[j].position for j in waiting] == [1, 2, 3]
    offsets = [(spots[j].estimated_start or now) - now for j in waiting]
    assert [offset.total_seconds() for offset in offsets] == [5, 25, 45]
