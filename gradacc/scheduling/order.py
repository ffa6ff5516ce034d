"""The scheduler's order as SQL (``gradacc.scheduling.claim`` claims with it; docs/scheduling.md).

For one tenant, the devices it has in use and its last turn are the same for all its jobs, so
its best job is its head: its highest priority, then its oldest job. The best job overall is
the best of the heads. So the query walks the queue index once per tenant (a loose index scan:
the next tenant name after the last one), takes each tenant's head in two index lookups, and
orders those few rows: its cost follows the number of tenants with queued jobs, not the length
of the queue or of the history.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, func, literal_column, select
from sqlalchemy.orm import aliased

from gradacc.tables import Job, JobStatus, TenantTurn


def is_queued(job: Any) -> ColumnElement[bool]:
    """Inline, not a bound parameter: a prepared statement's generic plan must still see that
    the partial index of queued rows applies."""
    return job.status == literal_column(f"'{JobStatus.QUEUED}'")  # type: ignore[no-any-return]


def usage_by_tenant() -> Any:
    """Per tenant with running jobs: ``in_use`` (devices) and ``runs`` (jobs). A subquery."""
    running = aliased(Job, name="running_job")
    return (
        select(
            running.tenant.label("tenant"),
            func.sum(running.num_processes).label("in_use"),
            func.count().label("runs"),
        )
        .where(running.status == JobStatus.RUNNING)
        .group_by(running.tenant)
        .subquery("tenant_usage")
    )


def _queued_tenants() -> Any:
    """Every tenant with a queued job, one index probe each (a recursive CTE)."""
    first, step = aliased(Job, name="first_queued"), aliased(Job, name="next_queued")
    lowest = select(func.min(first.tenant)).where(is_queued(first)).scalar_subquery()
    walk = select(lowest.label("tenant")).cte("queued_tenants", recursive=True)
    following = select(func.min(step.tenant)).where(is_queued(step), step.tenant > walk.c.tenant)
    return walk.union_all(select(following.scalar_subquery()).where(walk.c.tenant.is_not(None)))


def _heads(*, devices: int) -> Any:
    """Each tenant's head among the jobs that fit ``devices``: (tenant, id)."""
    tenants = _queued_tenants()
    top, oldest = aliased(Job, name="top_job"), aliased(Job, name="oldest_job")

    def fits(job: Any) -> Any:
        # num_processes / num_machines on each machine (a gang job: gradacc.scheduling.gang)
        here = job.num_processes <= job.num_machines * devices
        return is_queued(job) & (job.tenant == tenants.c.tenant) & here

    # Both correlate to the walk's tenant (the inner one two levels down).
    best = select(func.max(top.priority)).where(fits(top)).correlate(tenants).scalar_subquery()
    head = select(func.min(oldest.id)).where(fits(oldest), oldest.priority == best)
    return (
        select(tenants.c.tenant, head.correlate(tenants).scalar_subquery().label("id"))
        .where(tenants.c.tenant.is_not(None))
        .subquery("heads")
    )


def ordered(job: Any, *, devices: int, max_running: int, skip_tenants: frozenset[str]) -> Any:
    """The heads of tenants under ``max_running``, best first: (id, priority, num_processes) of
    ``job`` (an alias of ``Job``)."""
    usage, heads = usage_by_tenant(), _heads(devices=devices)
    query = (
        select(job.id, job.priority, job.num_processes)
        .join(heads, heads.c.id == job.id)
        .outerjoin(usage, usage.c.tenant == job.tenant)
        .outerjoin(TenantTurn, TenantTurn.tenant == job.tenant)
        .where(func.coalesce(usage.c.runs, 0) < max_running)
        .order_by(
            job.priority.desc(),
            func.coalesce(usage.c.in_use, 0),
            TenantTurn.last_started_at.asc().nulls_first(),
            job.id,
        )
    )
    if skip_tenants:
        query = query.where(job.tenant.not_in(sorted(skip_tenants)))
    return query


def candidates(
    *, devices: int, max_running: int, skip_tenants: frozenset[str] = frozenset()
) -> Select[Any]:
    """Each eligible tenant's head, best first: (id, priority, num_processes)."""
    job = aliased(Job, name="candidate")
    query: Select[Any] = ordered(
        job, devices=devices, max_running=max_running, skip_tenants=skip_tenants
    )
    return query


def running_count(tenant: Any) -> Select[int]:
    """How many jobs ``tenant`` (a name, or a column expression) runs now: its running limit's
    count, for the claim, the throttle and the message accounting alike."""
    return select(func.count()).where(Job.tenant == tenant, Job.status == JobStatus.RUNNING)
