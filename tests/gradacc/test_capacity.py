"""Device queues and the capacity rule, without a broker: which queues a worker consumes, where a
job goes, and how a worker's queue names read back as its device count."""

from __future__ import annotations

import pytest
from celery import Celery

from gradacc.errors import InvalidRequest
from gradacc.scheduling import capacity
from gradacc.scheduling.queue import job_queue, worker_queues
from gradacc.settings import Settings
from trainer_core.spec.job import JobSpec

SPEC = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}


def test_a_worker_consumes_every_job_size_it_holds() -> None:
    settings = Settings(queue="q", devices=3)
    assert worker_queues(settings) == ["q", "q.devices-2", "q.devices-3"]
    assert job_queue(settings, 1) == "q" and job_queue(settings, 4) == "q.devices-4"
    assert capacity._devices_of(worker_queues(settings), settings) == 3
    assert capacity._devices_of(["other.devices-8", "q"], settings) == 1  # not our queue


def test_refusal_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(queue="q")
    live: int | None = 2
    monkeypatch.setattr(capacity, "largest_live_device_set", lambda celery, s: live)
    app = Celery("unused")
    capacity.check_devices(JobSpec(**SPEC, num_processes=2), app, settings)  # fits
    with pytest.raises(InvalidRequest) as caught:
        capacity.check_devices(JobSpec(**SPEC, num_processes=4), app, settings)
    assert caught.value.param == "num_processes"
    # A gang job needs num_processes / num_machines devices on each machine (gradacc.scheduling.gang).
    capacity.check_devices(JobSpec(**SPEC, num_processes=4, num_machines=2), app, settings)
    with pytest.raises(InvalidRequest) as caught:
        capacity.check_devices(JobSpec(**SPEC, num_processes=6, num_machines=2), app, settings)
    assert caught.value.param == "num_machines"
    live = None  # the broker did not answer: accepted, it waits queued
    capacity.check_devices(JobSpec(**SPEC, num_processes=4), app, settings)
    capacity.check_devices(JobSpec(**SPEC, num_processes=6, num_machines=2), app, settings)
