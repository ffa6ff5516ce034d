"""Gang admission on both databases (``db_settings``): a gang job fits workers with W/M devices,
its slots are one per machine, it is complete only with M of them, a release queues it again
with a message to send and no attempt counted, and an older gathering gang wins a machine."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from gradacc.db import session_scope
from gradacc.scheduling.claim import claim_next
from gradacc.scheduling.gang import (
    gang_state,
    join_gang,
    leave_gang,
    node_of,
    older_gathering,
    open_gang,
    release_gang,
    retry_at,
)
from gradacc.settings import Settings
from gradacc.tables import GangSlot, Job, JobEvent, utcnow
from gradacc.workers import register_worker
from tests.gradacc.test_scheduling import add_jobs

GANG = {"num_processes": 2, "num_machines": 2}
WAIT = 60.0


def claimed_gang(settings: Settings, worker: str, machine: str) -> str:
    with session_scope(settings) as session:
        claimed = claim_next(session, worker=worker, settings=settings)
        assert claimed is not None and claimed.node_processes == 1
        open_gang(session, job_id=claimed.job_id, worker=worker, machine=machine,
                  host="127.0.0.1", port=29400)  # fmt: skip
    return claimed.job_id


def join(settings: Settings, job_id: str, worker: str, machine: str) -> str:
    with session_scope(settings) as session:
        return join_gang(session, job_id=job_id, worker=worker, machine=machine,
                         host="127.0.0.2", wait_s=WAIT)  # fmt: skip


def state(settings: Settings, job_id: str, worker: str) -> str:
    with session_scope(settings) as session:
        return gang_state(session, job_id=job_id, worker=worker)


def test_a_gang_fits_one_device_per_machine_and_completes_on_distinct_machines(
    db_settings: Settings,
) -> None:
    (job_id,) = add_jobs(db_settings, "t", **GANG)
    assert claimed_gang(db_settings, "w1", "m1") == job_id  # a worker with 1 device takes it
    assert state(db_settings, job_id, "w1") == "gathering"
    assert join(db_settings, job_id, "w1b", "m1") == "here"  # same machine: hand it on
    assert join(db_settings, job_id, "w2", "m2") == "joined"
    assert join(db_settings, job_id, "w3", "m3") == "closed"  # complete: nothing to join
    assert state(db_settings, job_id, "w1") == state(db_settings, job_id, "w2") == "complete"
    with session_scope(db_settings) as session:
        node0, node1 = (node_of(session, job_id=job_id, machine=m) for m in ("m1", "m2"))
        assert (
            release_gang(session, job_id=job_id, worker="w1", why="test", settings=db_settings)
            == "complete"
        )
        assert leave_gang(session, job_id=job_id, worker="w2") is False
    assert node0 is not None and node1 is not None
    assert (node0.node_rank, node1.node_rank, node1.endpoint_host, node1.port) == (0, 1,
            "127.0.0.1", 29400)  # fmt: skip
    assert node1.host == "127.0.0.2" and node0.num_machines == 2


def live(settings: Settings, *machines: str) -> None:
    """A live worker with one device on each machine (the workers table)."""
    with session_scope(settings) as session:
        for machine in machines:
            register_worker(session, name=f"w-{machine}", pid=1, devices=["cpu"], machine=machine)


def test_a_released_gang_is_queued_again_with_its_message_and_no_attempt(
    db_settings: Settings,
) -> None:
    live(db_settings, "m1", "m2")  # enough machines are live: the release counts nothing
    (job_id,) = add_jobs(db_settings, "t", **GANG)
    claimed_gang(db_settings, "w1", "m1")
    with session_scope(db_settings) as session:
        assert (
            release_gang(session, job_id=job_id, worker="w2", why="not mine", settings=db_settings)
            == "gone"
        )
        assert (
            release_gang(
                session, job_id=job_id, worker="w1", why="not complete", settings=db_settings
            )
            == "released"
        )
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.attempts, job.enqueued_at is not None) == ("queued", 0, True)
        assert session.scalars(select(GangSlot)).all() == []
        events = session.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id))
        messages = list(events)
        assert any("1 of 2 machines held" in m for m in messages)
        assert not any("m1" in m for m in messages)  # machine names are the operator's
    assert join(db_settings, job_id, "w2", "m2") == "closed"
    assert claimed_gang(db_settings, "w2", "m2") == job_id  # claimed again, by anyone
    with session_scope(db_settings) as session:
        assert (
            release_gang(session, job_id=job_id, worker="w2", why="again", settings=db_settings)
            == "released"
        )
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id))
        assert list(kinds).count("gang_released") == 1  # one event per wait, not per round


def test_a_gang_past_its_wait_takes_no_one(db_settings: Settings) -> None:
    (job_id,) = add_jobs(db_settings, "t", **GANG)
    claimed_gang(db_settings, "w1", "m1")
    with session_scope(db_settings) as session:
        old = utcnow() - timedelta(seconds=WAIT + 1)
        session.execute(update(GangSlot).where(GangSlot.job_id == job_id).values(held_at=old))
        session.commit()
    assert join(db_settings, job_id, "w2", "m2") == "closed"


def test_the_older_gathering_gang_wins_the_machine(db_settings: Settings) -> None:
    live(db_settings, "m1", "m2")
    older, younger = add_jobs(db_settings, "t", 2, **GANG)
    assert claimed_gang(db_settings, "w1", "m1") == older
    assert claimed_gang(db_settings, "w2", "m2") == younger
    with session_scope(db_settings) as session:
        # w2 (m2) waits for the younger one: the older one lacks m2 and takes it.
        assert older_gathering(session, job_id=younger, machine="m2", devices=1,
                               wait_s=WAIT) == older  # fmt: skip
        # w1 (m1) waits for the older one: nothing is older than it.
        assert older_gathering(session, job_id=older, machine="m1", devices=1, wait_s=WAIT) is None
        assert (
            release_gang(session, job_id=younger, worker="w2", why="yield", settings=db_settings)
            == "released"
        )
    assert join(db_settings, older, "w2", "m2") == "joined"
    assert state(db_settings, older, "w1") == "complete"
    with session_scope(db_settings) as session:
        assert older_gathering(session, job_id=younger, machine="m2", devices=1,
                               wait_s=WAIT) is None  # fmt: skip


def test_a_gang_job_fits_workers_with_its_devices_per_machine(db_settings: Settings) -> None:
    (job_id,) = add_jobs(db_settings, "t", num_processes=4, num_machines=2)  # 2 per machine
    with session_scope(db_settings) as session:
        assert claim_next(session, worker="w", settings=db_settings) is None  # 1 device
        two = db_settings.model_copy(update={"devices": 2})
        claimed = claim_next(session, worker="w", settings=two)
        assert claimed is not None and (claimed.job_id, claimed.node_processes) == (job_id, 2)


def test_a_gang_released_short_of_machines_backs_off_then_fails(db_settings: Settings) -> None:
    """Only m1 is live (m2's worker went away after the POST): each release is counted and
    waits longer for its next message; the gang_max_releases-th fails the job."""
    settings = db_settings.model_copy(update={"gang_max_releases": 3})
    live(settings, "m1")
    (job_id,) = add_jobs(settings, "t", **GANG)
    outcomes, backoffs = [], []
    for _ in range(3):
        claimed_gang(settings, "w1", "m1")
        with session_scope(settings) as session:
            outcome = release_gang(session, job_id=job_id, worker="w1", why="not complete",
                                   settings=settings)  # fmt: skip
            outcomes.append(outcome)
            job = session.get(Job, job_id)
            assert job is not None
            if outcome == "backoff":  # no message now: the reconciler sends it at retry_at
                assert (job.status, job.enqueued_at, job.attempts) == ("queued", None, 0)
                backoffs.append(retry_at(job.gang_releases, job.released_at, wait_s=WAIT)
                                - job.released_at)  # fmt: skip
    assert outcomes == ["backoff", "backoff", "failed"]
    assert backoffs == [timedelta(seconds=WAIT), timedelta(seconds=2 * WAIT)]
    with session_scope(settings) as session:
        job = session.get(Job, job_id)
        assert job is not None and (job.status, job.error_code) == ("failed", "gang_unsatisfiable")
        assert job.error_message is not None and "GRADACC_GANG_MAX_RELEASES" in job.error_message
        assert session.scalars(select(GangSlot)).all() == []
        query = select(JobEvent.kind).where(JobEvent.job_id == job_id)
        assert list(session.scalars(query)).count("gang_released") == 2  # one per counted release
