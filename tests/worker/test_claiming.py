"""What a worker takes for a message, on both databases: the job it names when that one lost its
worker (a take-over, ahead of any queued job), else the best queued job, whichever job the
message named; and a message for a job that is gone or final claims the next best."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gradacc.scheduling.claim import claim_next
from gradacc.settings import Settings
from gradacc.tables import JobStatus, utcnow
from tests.support import make_job
from worker.consumer import claiming
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


def test_a_job_queued_while_a_spare_message_claims_is_taken(
    db_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The POST of a job commits after a spare message's claim found nothing and before that
    message is settled (tests/e2e/test_pg_redis.py's redelivery test, one run in several): the
    message claims it on a second look, with no "throttled" event; its own message is then the
    spare one, which claims nothing."""
    failed = make_job(db_settings, status=JobStatus.FAILED)
    late: list[str] = []

    def claim_then_post(session: Any, **kwargs: Any) -> Any:
        claimed = claim_next(session, **kwargs)
        if not late:
            late.append(make_job(db_settings))  # committed just after the first claim looked
        return claimed

    monkeypatch.setattr(claiming, "claim_next", claim_then_post)
    sent: list[str] = []
    assert take_for_message(db_settings, named=failed, worker="w", send=sent.append) == Taken(
        late[0]
    )
    assert take_for_message(db_settings, named=late[0], worker="w", send=sent.append) == Taken(None)
    assert sent == []
