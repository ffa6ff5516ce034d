"""A queue position costs a bounded read on both databases: at most ``queue_position_limit``
queued jobs are fetched and replayed per read, whatever priority the polled jobs ask for (a job
at priority -1000 used to replay the whole queue), and a job behind them is at the limit plus
one. Positions within a small queue are the scheduler's order (tests/gradacc/test_scheduling.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import FrozenResult
from sqlalchemy.orm import Session

from gradacc.db import session_scope
from gradacc.scheduling.position import queue_spots
from gradacc.settings import Settings
from gradacc.tables import Job
from tests.gradacc.test_scheduling import add_jobs

LIMIT = 10


class CountingReader:
    """A session that counts the rows its statements hand back."""

    def __init__(self, session: Session) -> None:
        self.session, self.rows = session, 0

    def execute(self, statement: Any) -> Any:
        frozen: FrozenResult[Any] = self.session.execute(statement).freeze()
        self.rows += len(frozen.data)
        return frozen()


def read_positions(
    settings: Settings, job_ids: list[str], *, limit: int
) -> tuple[dict[str, int], int]:
    """(positions, rows fetched of the jobs table)."""
    bounded = settings.model_copy(update={"queue_position_limit": limit})
    with session_scope(settings) as session:
        reader = CountingReader(session)
        spots = queue_spots(reader, job_ids, settings=bounded)
        return {k: v.position for k, v in spots.items()}, reader.rows


def test_a_long_queue_is_read_only_up_to_the_limit(db_settings: Settings) -> None:
    urgent = add_jobs(db_settings, "alice", 3, priority=5)
    crowd = add_jobs(db_settings, "alice", 20) + add_jobs(db_settings, "bob", 20)
    bottom = add_jobs(db_settings, "mallory", 1, priority=-1000)
    everyone = [*urgent, *crowd, *bottom]
    exact, _ = read_positions(db_settings, everyone, limit=1000)
    assert sorted(exact.values()) == list(range(1, len(everyone) + 1))
    assert exact[bottom[0]] == len(everyone)
    shown, rows = read_positions(db_settings, everyone, limit=LIMIT)
    # The wanted ids, the first LIMIT + 1 of the queue, and a few rows of aggregates: never the
    # 44 queued jobs that the -1000 job's floor reaches.
    assert rows <= len(everyone) + (LIMIT + 1) + 5
    # Within the limit, the same places (alice's 20 are older than bob's 20, and still the
    # read takes their turns in rounds); behind it, "more than LIMIT ahead".
    assert shown == {k: exact[k] if exact[k] <= LIMIT else LIMIT + 1 for k in everyone}
    just_bottom, bottom_rows = read_positions(db_settings, bottom, limit=LIMIT)
    assert just_bottom == {bottom[0]: LIMIT + 1}
    assert bottom_rows <= 1 + (LIMIT + 1) + 5
    with session_scope(db_settings) as session:  # the jobs are as they were: only read
        assert session.get_one(Job, bottom[0]).status == "queued"
