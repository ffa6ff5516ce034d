"""One message per queued job, on both databases: after a message claimed whichever job was best,
the queue's count of messages still covers its queued jobs (``gradacc.scheduling.messages``)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from gradacc.db import session_scope
from gradacc.scheduling.claim import claim_next
from gradacc.scheduling.messages import Settled, settle_message
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent, utcnow
from tests.gradacc.test_scheduling import add_jobs, sent_at


def test_a_claim_for_another_job_keeps_the_count(db_settings: Settings) -> None:
    settings, before = db_settings, utcnow() - timedelta(minutes=1)
    named = add_jobs(settings, "a", 1, enqueued_at=before)[0]
    better = add_jobs(settings, "a", 1, priority=1)[0]
    with session_scope(settings) as session:
        taken = claim_next(session, worker="w", settings=settings)
        assert taken is not None and taken.job_id == better and taken.had_message
        # The better job's message, still in the queue, now stands for the named one.
        assert settle_message(session, named=named, claimed=taken, settings=settings) == Settled(
            "inherited"
        )
        assert sent_at(session, named) == before
        unsent = add_jobs(settings, "a", 1, enqueued_at=None, priority=2)[0]
        taken = claim_next(session, worker="w", settings=settings)
        assert taken is not None and taken.job_id == unsent and not taken.had_message
        settled = settle_message(session, named=named, claimed=taken, settings=settings)
        assert settled == Settled("resend", named)  # the caller sends it one
        assert sent_at(session, named) > before  # type: ignore[operator]
        wide = add_jobs(settings, "a", 1, num_processes=2, priority=3)[0]
        two = settings.model_copy(update={"devices": 2})
        taken = claim_next(session, worker="w", settings=two)
        assert taken is not None and taken.job_id == wide  # its message is in another queue
        assert settle_message(session, named=named, claimed=taken, settings=two) == Settled(
            "resend", named
        )


def test_nothing_to_claim_leaves_a_job_for_the_reconciler(db_settings: Settings) -> None:
    """Also when the message named a job that is gone: it stood in for one that still waits."""
    settings = db_settings.model_copy(update={"max_running_per_tenant": 1})
    add_jobs(settings, "a", 1, status="running")
    waiting = add_jobs(settings, "a", 1)[0]  # its tenant is at its limit
    finished = add_jobs(settings, "b", 1, status="succeeded")[0]
    with session_scope(settings) as session:
        assert claim_next(session, worker="w", settings=settings) is None
        assert settle_message(session, named=finished, claimed=None, settings=settings) == (
            Settled("waiting", waiting)
        )
        assert sent_at(session, waiting) is None  # the reconciler's next pass sends it
        for _ in range(2):  # its own message, redelivered: still one event
            assert settle_message(session, named=waiting, claimed=None, settings=settings) == (
                Settled("waiting", None)
            )
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == waiting)).all()
        assert list(kinds) == ["throttled"]
        session.execute(update(Job).where(Job.id == waiting).values(status="cancelled"))
        session.commit()
        assert settle_message(session, named=finished, claimed=None, settings=settings) == (
            Settled("settled", None)
        )


def test_a_job_queued_after_the_claim_looked_is_claimed_not_throttled(
    db_settings: Settings,
) -> None:
    """A spare message (its job failed) claims nothing; a job POSTed just after that claim's
    query, before the message is settled, was not throttled (its tenant runs nothing): it is
    claimed again, not charged with the spare message (cleared, with a false "throttled" event,
    while its own message is in flight). Found by tests/e2e/test_pg_redis.py's redelivery test:
    the spare message logged "waits: its tenant is at its running-job limit", and no message
    was left to log "not claimable"."""
    settings = db_settings
    failed = add_jobs(settings, "a", 1, status="failed")[0]
    with session_scope(settings) as session:
        assert claim_next(session, worker="w", settings=settings) is None
        late = add_jobs(settings, "a", 1)[0]  # committed between the claim and the settling
        settled = settle_message(
            session, named=failed, claimed=None, settings=settings, may_retry=True
        )
        assert settled == Settled("retry", late)
        assert sent_at(session, late) is not None  # still counted: its own message is sent
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == late)).all()
        assert "throttled" not in kinds
        taken = claim_next(session, worker="w", settings=settings)  # the retry
        assert taken is not None and taken.job_id == late and taken.had_message
        assert settle_message(session, named=failed, claimed=taken, settings=settings) == (
            Settled("inherited")
        )


def test_a_job_claimed_meanwhile_passes_the_count_to_the_next(db_settings: Settings) -> None:
    """A message that claimed nothing takes one job off the count; if the job it picked was
    claimed by another worker in between (that claim took it off already), the next job counting
    on a message is taken instead, or one queued job would wait without one (found by
    tests/e2e/test_concurrent_posts.py: one of 130 jobs left queued, both workers idle)."""
    from gradacc.scheduling.messages import _clear_one

    settings, before = db_settings, utcnow() - timedelta(minutes=1)
    picked, other = add_jobs(settings, "a", 2, enqueued_at=before)
    with session_scope(settings) as session:
        session.execute(update(Job).where(Job.id == picked).values(status="running"))
        cleared = _clear_one(session, first=picked, settings=settings, queue=settings.queue)
        session.commit()
        assert cleared == other and sent_at(session, other) is None
        assert _clear_one(session, first=other, settings=settings, queue=settings.queue) is None


def test_a_gang_job_is_counted_in_the_queue_of_its_devices_per_machine(
    db_settings: Settings,
) -> None:
    """W=2 over M=2 machines takes 1 device on each: its message is in the plain queue, where a
    one-process job's claim inherits it and its own claim stands for a one-process job's."""
    settings, before = db_settings, utcnow() - timedelta(minutes=1)
    gang = add_jobs(settings, "a", 1, num_processes=2, num_machines=2, enqueued_at=before)[0]
    single = add_jobs(settings, "a", 1, enqueued_at=before, priority=1)[0]
    with session_scope(settings) as session:
        taken = claim_next(session, worker="w", settings=settings)  # one device
        assert taken is not None and taken.job_id == single
        assert settle_message(session, named=gang, claimed=taken, settings=settings) == Settled(
            "inherited"
        )
        other = add_jobs(settings, "a", 1, enqueued_at=before)[0]
        taken = claim_next(session, worker="w", settings=settings)
        assert taken is not None and taken.job_id == gang and taken.node_processes == 1
        assert settle_message(session, named=other, claimed=taken, settings=settings) == Settled(
            "inherited"
        )
        from gradacc.scheduling.messages import _counting_on_one

        assert _counting_on_one(session, settings=settings, queue=settings.queue) == other
