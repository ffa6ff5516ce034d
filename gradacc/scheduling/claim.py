"""Which queued job a free worker starts next: the database decides, in one transaction.

The order (docs/scheduling.md):

1. higher ``priority`` first;
2. among equal priority, the tenant with the fewest devices in use (its running jobs'
   ``num_processes``);
3. then the tenant whose last turn came longest ago (``tenant_turns``; never started: first);
4. then that tenant's oldest job (ids sort by creation time).

Candidates are queued jobs that fit the worker (``num_processes / num_machines`` <= its devices) of tenants
under ``max_running_per_tenant`` (the query: ``gradacc.scheduling.order``). A Celery message names a job, but the worker that gets it
claims the best candidate instead (``claim_next``), so the order cannot depend on the order in
which the broker hands out messages; ``gradacc.scheduling.messages`` keeps every queued job's
message accounted for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import ScalarSelect
from sqlalchemy.orm import Session, aliased

from gradacc.db import upsert
from gradacc.jobs.states import claim_statement, lock_tenant
from gradacc.scheduling.order import ordered, running_count
from gradacc.settings import Settings
from gradacc.tables import Job, TenantTurn, processes_per_machine, utcnow

MAX_TRIES = 32  # tenants found at their limit only after the claim (a concurrent claim won)


@dataclass(frozen=True)
class Claimed:
    """A job this worker now holds, and whether a message of its own was in flight then."""

    job_id: str
    tenant: str
    num_processes: int
    had_message: bool
    num_machines: int = 1

    @property
    def node_processes(self) -> int:
        """The devices it takes on each machine: its queue's (``gradacc.scheduling.queue.job_queue``)."""
        return processes_per_machine(self.num_processes, self.num_machines)


@lru_cache(maxsize=64)
def _best(*, devices: int, max_running: int, skip_tenants: frozenset[str]) -> ScalarSelect[Any]:
    """The best candidate's id, row-locked (PostgreSQL: another worker's claim skips it and takes
    the next one, never waits; SQLite has one writer at a time and ignores the lock). Built once
    per arguments: building it costs more than running it (~8 ms of SQLAlchemy here)."""
    job = aliased(Job, name="candidate")
    query = ordered(job, devices=devices, max_running=max_running, skip_tenants=skip_tenants)
    query = query.with_only_columns(job.id).limit(1).with_for_update(of=job, skip_locked=True)
    return query.scalar_subquery()  # type: ignore[no-any-return]


def claim_next(session: Session, *, worker: str, settings: Settings) -> Claimed | None:
    """Claim the best eligible queued job for a worker with ``settings.devices``; None when
    there is none. Commits.

    One UPDATE takes the job (``WHERE id = (best candidate)``), so two workers never claim one
    job. The tenant's running limit is then counted again under the tenant's lock: a claim that
    raced another for the same tenant's last slot is rolled back and that tenant skipped.
    """
    skip: frozenset[str] = frozenset()
    for _ in range(MAX_TRIES):
        now = utcnow()
        best = _best(
            devices=settings.devices,
            max_running=settings.max_running_per_tenant,
            skip_tenants=skip,
        )
        stmt = (
            claim_statement(worker, now)
            .where(Job.id == best)
            .returning(Job.id, Job.tenant, Job.num_processes, Job.enqueued_at, Job.num_machines)
            .execution_options(synchronize_session=False)
        )
        row = session.execute(stmt).one_or_none()
        if row is None:
            session.commit()
            return None
        if _runs(session, tenant=row.tenant) > settings.max_running_per_tenant:
            session.rollback()
            skip = skip | {row.tenant}
            continue
        _record_turn(session, tenant=row.tenant, at=now)
        session.commit()
        had_message = row.enqueued_at is not None
        return Claimed(row.id, row.tenant, row.num_processes, had_message, row.num_machines)
    session.rollback()
    return None


def _runs(session: Session, *, tenant: str) -> int:
    """The tenant's running jobs, counted under its lock (``lock_tenant``), this claim's too."""
    lock_tenant(session, tenant=tenant)
    return int(session.scalar(running_count(tenant)) or 0)


def _record_turn(session: Session, *, tenant: str, at: datetime) -> None:
    row = {"tenant": tenant, "last_started_at": at}
    upsert(session, TenantTurn, row, keys=["tenant"], update=["last_started_at"])
