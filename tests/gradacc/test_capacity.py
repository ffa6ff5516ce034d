"""Device queues, and the capacity rule on both databases (``db_settings``): which queues a worker
consumes, where a job goes, and what the workers table (live rows, their devices and machines)
lets a job POSTed now ask for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from gradacc.db import session_scope
from gradacc.errors import InvalidRequest
from gradacc.scheduling import capacity
from gradacc.scheduling.queue import job_queue, worker_queues
from gradacc.settings import Settings
from gradacc.tables import Worker, utcnow
from gradacc.workers import register_worker, set_current_job
from trainer_core.spec.job import JobSpec

SPEC = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}


def test_a_worker_consumes_every_job_size_it_holds() -> None:
    settings = Settings(queue="q", devices=3)
    assert worker_queues(settings) == ["q", "q.devices-2", "q.devices-3"]
    assert job_queue(settings, 1) == "q" and job_queue(settings, 4) == "q.devices-4"


def worker(
    settings: Settings, name: str, machine: str, devices: int, queue: str | None = None
) -> None:
    with session_scope(settings) as session:
        register_worker(session, name=name, pid=1, devices=["cpu"], num_devices=devices,
                        machine=machine, queue=queue or settings.queue)  # fmt: skip


def refusal(settings: Settings, **fields: int) -> str | None:
    """The field a POST of ``fields`` is refused on; None when it is accepted."""
    with session_scope(settings) as session:
        try:
            capacity.check_devices(JobSpec(**SPEC, **fields), session=session, settings=settings)
        except InvalidRequest as refused:
            return refused.param
    return None


def test_no_live_worker_refuses_multi_device_jobs_only(db_settings: Settings) -> None:
    assert refusal(db_settings) is None  # one process: any worker, even one not up yet
    assert refusal(db_settings, num_processes=2) == "num_processes"
    assert refusal(db_settings, num_processes=2, num_machines=2) == "num_machines"


def test_a_busy_worker_counts_with_its_devices(db_settings: Settings) -> None:
    """The worker trains a job (its row names it): a job needing its 2 devices is accepted,
    one needing more is refused naming the field."""
    worker(db_settings, "w1", "m1", devices=2)
    with session_scope(db_settings) as session:
        set_current_job(session, name="w1", job_id="job_busy")
    assert refusal(db_settings, num_processes=2) is None
    assert refusal(db_settings, num_processes=4) == "num_processes"
    assert refusal(db_settings, num_processes=4, num_machines=2) == "num_machines"  # 2 on each


def test_a_gang_needs_that_many_distinct_live_machines(db_settings: Settings) -> None:
    for name, machine, devices in [("w1", "m1", 2), ("w1b", "m1", 2), ("w2", "m2", 1)]:
        worker(db_settings, name, machine, devices)
    worker(db_settings, "w9", "m9", 8, queue="another-deployment")  # takes none of our jobs
    assert refusal(db_settings, num_processes=2, num_machines=2) is None  # 1 on m1, 1 on m2
    # two workers of one machine are one machine; m2's worker has 1 device, not 2
    assert refusal(db_settings, num_processes=4, num_machines=2) == "num_machines"
    assert refusal(db_settings, num_processes=3, num_machines=3) == "num_machines"
    assert refusal(db_settings, num_processes=128, num_machines=128) == "num_machines"
    with session_scope(db_settings) as session:  # m2's worker stopped beating: not live
        old = utcnow() - timedelta(seconds=db_settings.worker_alive_s + 1)
        session.execute(update(Worker).where(Worker.name == "w2").values(heartbeat_at=old))
        session.commit()
    assert refusal(db_settings, num_processes=2, num_machines=2) == "num_machines"
    with session_scope(db_settings) as session:
        assert capacity.machines_that_fit(session, devices=1, settings=db_settings) == 1


def test_the_refusal_names_numbers_not_machines(db_settings: Settings) -> None:
    worker(db_settings, "w1", "secret-host-1", devices=1)
    with session_scope(db_settings) as session, pytest.raises(InvalidRequest) as refused:
        spec = JobSpec(**SPEC, num_processes=128, num_machines=128)
        capacity.check_devices(spec, session=session, settings=db_settings)
    assert "128 machines" in refused.value.message and "secret-host" not in refused.value.message
