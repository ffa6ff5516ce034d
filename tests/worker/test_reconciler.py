"""The reconciler on both databases: lost jobs are enqueued again, hopeless ones fail."""

from __future__ import annotations

from datetime import timedelta

from gradacc.scheduling.queue import create_celery_app, enqueue_job
from gradacc.settings import Settings
from gradacc.tables import JobStatus, utcnow
from tests.support import make_job, status_of
from worker.consumer.reconciler import reconcile_jobs


def test_the_reconciler_requeues_lost_jobs_and_fails_hopeless_ones(db_settings: Settings) -> None:
    old = utcnow() - timedelta(hours=1)
    fresh_queued = make_job(db_settings)
    lost_queued = make_job(db_settings, enqueued_at=old)
    never_sent = make_job(db_settings, enqueued_at=None)
    orphaned = make_job(
        db_settings, status=JobStatus.RUNNING, heartbeat_at=old, enqueued_at=old, attempts=1
    )
    hopeless = make_job(db_settings, status=JobStatus.RUNNING, heartbeat_at=old, attempts=3)
    beating = make_job(db_settings, status=JobStatus.RUNNING, heartbeat_at=utcnow(), attempts=1)
    celery = create_celery_app(db_settings)
    sent: list[str] = []

    def enqueue(job_id: str) -> None:
        enqueue_job(celery, db_settings, job_id)
        sent.append(job_id)

    report = reconcile_jobs(db_settings, enqueue=enqueue)
    assert sorted(report.requeued) == sorted([lost_queued, never_sent, orphaned])
    assert report.failed == [hopeless]
    assert status_of(db_settings, hopeless) == "failed"
    assert fresh_queued not in sent and beating not in sent
    queued_messages = list((db_settings.broker_dir / "queue").iterdir())
    assert len(queued_messages) == 3
    # Re-enqueued jobs got a fresh enqueue time: a second pass right after sends nothing.
    assert reconcile_jobs(db_settings, enqueue=enqueue).requeued == []


def test_a_gang_released_short_of_machines_is_sent_again_after_its_back_off(
    db_settings: Settings,
) -> None:
    wait = db_settings.gang_wait_s
    released = utcnow() - timedelta(seconds=wait * 1.5)  # past one wait, before two
    once = make_job(db_settings, enqueued_at=None, gang_releases=1, released_at=released)
    twice = make_job(db_settings, enqueued_at=None, gang_releases=2, released_at=released)
    sent: list[str] = []
    report = reconcile_jobs(db_settings, enqueue=sent.append)
    assert report.requeued == sent == [once]
    assert twice not in sent  # released twice: it waits two gang waits
