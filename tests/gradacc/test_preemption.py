"""Preemption by priority on both databases: which running job a waiting one stops, only when no
free worker can take it, one at a time, and the victim queued again by its own worker."""

from __future__ import annotations

from sqlalchemy import delete, select

from gradacc.db import session_scope
from gradacc.scheduling.preemption import preempt_for_waiting, requeue_preempted
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, JobStatus, Worker
from gradacc.workers import register_worker
from tests.gradacc.test_scheduling import add_jobs


def workers(settings: Settings, *names: str) -> None:
    with session_scope(settings) as session:
        session.execute(delete(Worker))
        session.commit()
        for name in names:
            register_worker(session, name=name, pid=1, devices=["cpu"])


def preempt(settings: Settings) -> tuple[str, str] | None:
    with session_scope(settings) as session:
        asked = preempt_for_waiting(session, settings=settings)
    return None if asked is None else (asked.victim, asked.preemptor)


def test_a_waiting_job_stops_the_lowest_priority_running_one(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"preempt": True})
    workers(settings, "w1", "w2")
    running = {"status": JobStatus.RUNNING}
    add_jobs(settings, "a", 1, priority=3, worker="w1", **running)
    lowest = add_jobs(settings, "b", 1, priority=1, worker="w2", **running)
    add_jobs(settings, "c", 1, priority=1)
    assert preempt(settings) is None  # equal priority never preempts
    urgent = add_jobs(settings, "c", 1, priority=5)
    assert preempt(settings) == (lowest[0], urgent[0])
    assert preempt(settings) is None  # one preemption in flight at a time
    with session_scope(settings) as session:
        event = session.scalars(select(JobEvent).where(JobEvent.job_id == lowest[0])).one()
        assert event.kind == "preempting" and "a higher-priority job" in event.message
        assert requeue_preempted(session, job_id=lowest[0], worker="w1") is None  # not its own
        assert requeue_preempted(session, job_id=lowest[0], worker="w2") == urgent[0]
        session.commit()
        # b's events never name c's job (nor its priority): another tenant's to know
        events = session.scalars(select(JobEvent.message).where(JobEvent.job_id == lowest[0]))
        assert [m for m in events if urgent[0] in m or "priority 5" in m] == []
        victim = session.get_one(Job, lowest[0])
        session.refresh(victim)
        assert (victim.status, victim.preempted_by) == ("queued", None)


def test_no_preemption_while_a_free_worker_can_take_it(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"preempt": True})
    workers(settings, "w1", "idle")
    add_jobs(settings, "a", 1, priority=0, status=JobStatus.RUNNING, worker="w1")
    add_jobs(settings, "b", 1, priority=5)
    assert preempt(settings) is None
    workers(settings, "w1")  # the idle worker is gone: now it preempts
    assert preempt(settings) is not None


def test_a_preemption_within_one_tenant_names_the_job(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"preempt": True})
    workers(settings, "w1")
    (low,) = add_jobs(settings, "a", 1, priority=0, status=JobStatus.RUNNING, worker="w1")
    (urgent,) = add_jobs(settings, "a", 1, priority=5)
    assert preempt(settings) == (low, urgent)
    with session_scope(settings) as session:
        assert requeue_preempted(session, job_id=low, worker="w1") == urgent
        session.commit()
        query = select(JobEvent.message).where(JobEvent.job_id == low).order_by(JobEvent.id)
        events = list(session.scalars(query))
    assert f"preempted by {urgent} (priority 5 > 0)" in events[0]
    assert f"after preemption by {urgent}" in events[1]
