"""What a worker takes for a message, on both databases: the job it names when that one lost its
worker (a take-over, ahead of any queued job), else the best queued job, whichever job the
message named; and a message for a job that is gone or final claims the next best."""

from __future__ import annotations

from datetime import timedelta

from gradacc.settings import Settings
from gradacc.tables import JobStatus, utcnow
from tests.support import make_job
from worker.consumer.claiming import Taken, take_for_message


def test_a_message_takes_over_its_stale_job_else_claims_the_best(db_settings: Settings) -> None:
    old = utcnow() - timedelta(hours=1)
    stale = make_job(db_settings, status=JobStatus.RUNNING, heartbeat_at=old, attempts=1)
    urgent = make_job(db_settings, priority=5)
    sent: list[str] = []

    def take(named: str) -> Taken:
        return take_for_message(db_settings, named=named, worker="w", send=sent.append)

    assert take(stale) == Taken(stale)  # started already: it goes on first
    plain = make_job(db_settings)
    assert take(plain) == Taken(urgent)  # urgent's own message now stands for plain
    assert take(urgent) == Taken(plain)  # a spare message claims the next best
    assert take(plain) == Taken(None)  # nothing queued
    assert sent == []  # every claimed job had a message of its own in the same queue
    unsent = make_job(db_settings, priority=9, enqueued_at=None)
    named = make_job(db_settings)
    assert take(named) == Taken(unsent) and sent == [named]  # unsent had none: named gets one
