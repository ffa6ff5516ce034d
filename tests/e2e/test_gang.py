"""Jobs over two machines (gang scheduling, ``gradacc.scheduling.gang``) with real workers on
PostgreSQL + Redis: two workers that declare different machines (``GRADACC_MACHINE``, loopback
addresses), one device each (two on m1 where a one-machine run of W=2 is the reference), started
once for the module. A gang job whose second machine is busy (a held job) releases its slot after
the bounded wait and runs once that machine is free; two competing gang jobs both finish, and a
gang job W=2, M=2 ends equal to one process at 2K and to W=2 on one machine. Cancels and lost
nodes: ``test_gang_faults.py``, ``test_gang_lost_node.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import GangSlot, Job, JobEvent, Worker
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker, WorkerProcess
from tests.e2e.test_multi_process import post_when_accepted
from tests.support import Hold, event_kinds, wait_final, wait_until
from tests.trainer_core.helpers import final_weights, initial_weights, max_abs_diff, tolerance
from trainer_core.spec.job import JobSpec

pytestmark = pytest.mark.integration

# b=4, K=2 on each of 2 processes over 2 machines: the effective batch is 16, as one process
# with b=4 and K=4 (2K), and as W=2 on one machine.
GANG = {**TINY, "num_processes": 2, "num_machines": 2, "per_device_train_batch_size": 4}
ONE_MACHINE = {**GANG, "num_machines": 1}
REFERENCE = {**TINY, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
WAIT_S = "8"  # GRADACC_GANG_WAIT_S: short, so that the test sees a release


def machine(
    start_worker: StartWorker, name: str, devices: int = 1, env: dict[str, str] | None = None
) -> WorkerProcess:
    return start_worker(name, {
        "GRADACC_MACHINE": name, "GRADACC_ADVERTISE_HOST": "127.0.0.1",
        "GRADACC_DEVICES": str(devices), "GRADACC_GANG_WAIT_S": WAIT_S, **(env or {}),
    })  # fmt: skip


def registered(settings: Settings, *workers: WorkerProcess) -> None:
    """Each worker is ready (its registry row is written last of its start-up hooks)."""
    pids = {worker.process.pid for worker in workers}

    def ready() -> bool:
        with session_scope(settings) as session:
            return pids <= set(session.scalars(select(Worker.pid)))

    wait_until(ready, timeout=120, what="the workers registered")


def messages(settings: Settings, job_id: str, kind: str) -> list[str]:
    with session_scope(settings) as session:
        query = select(JobEvent.message).where(JobEvent.job_id == job_id, JobEvent.kind == kind)
        return list(session.scalars(query))


def succeeded(api: TestClient, job_id: str, *workers: WorkerProcess) -> None:
    job = wait_final(api, job_id, timeout=240)
    assert job["status"] == "succeeded", (job, [w.log() for w in workers])


def no_slot_held(settings: Settings) -> None:
    """Once each node's worker let go of the job (after its final status is written)."""

    def none() -> bool:
        with session_scope(settings) as session:
            return not session.scalars(select(GangSlot)).all()

    wait_until(none, timeout=60, what="every gang slot released")


@pytest.fixture(scope="module")
def two_machines(
    pg_redis_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[WorkerProcess], Hold]]:
    """m1 (2 devices, for the one-machine run; a gang job takes 1 on each machine, and a worker
    runs one job at a time) and m2, started once for the module, with a hold at step 1 that
    is armed only where a test needs a busy machine: the pair and the hold."""
    hold = Hold(tmp_path_factory.mktemp("gang") / "busy", 1, armed=False)
    env = {"GRADACC_ADVERTISE_HOST": "127.0.0.1", "GRADACC_GANG_WAIT_S": WAIT_S, **hold.env()}
    workers = [
        WorkerProcess(
            pg_redis_settings, "m1", {**env, "GRADACC_MACHINE": "m1", "GRADACC_DEVICES": "2"}
        ),
        WorkerProcess(
            pg_redis_settings, "m2", {**env, "GRADACC_MACHINE": "m2", "GRADACC_DEVICES": "1"}
        ),
    ]
    try:
        registered(pg_redis_settings, *workers)
        yield workers, hold
    finally:
        for worker in workers:
            worker.stop()


def test_a_gang_waits_for_its_second_machine(
    api: TestClient, pg_redis_settings: Settings, two_machines: tuple[list[WorkerProcess], Hold]
) -> None:
    """Both machines are live, one of them busy with another job (held): the gang job is accepted
    (POST refuses more machines than are live), its slot is released after the bounded wait
    without counting against it (enough machines are live: it waits its turn), and it runs once
    the busy machine is free."""
    settings, (first, second), hold = pg_redis_settings, *two_machines
    hold.arm()  # whichever machine takes `busy` parks
    busy = api.post("/v1/jobs", json=TINY).json()["id"]
    hold.held(timeout=180)
    job_id = post_when_accepted(api, GANG)
    wait_until(lambda: messages(settings, job_id, "gang_released"), timeout=120,
               what="the gang released after its wait")  # fmt: skip
    released = messages(settings, job_id, "gang_released")[0]
    assert "1 of 2 machines held" in released and "m1" not in released and "m2" not in released
    assert "started" not in event_kinds(api, job_id)
    hold.release()  # `busy` ends; its machine joins the gang (which runs past the hold now)
    succeeded(api, busy, first, second)
    succeeded(api, job_id, first, second)
    assert event_kinds(api, job_id).count("started") == 1
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["attempts"] == 1  # the waits count no attempt
    with session_scope(settings) as session:
        assert session.get_one(Job, job_id).gang_releases == 0  # nor a release: both were live
    no_slot_held(settings)


def test_two_competing_gang_jobs_both_finish_equal_to_one_process_at_2k(
    api: TestClient, pg_redis_settings: Settings, two_machines: tuple[list[WorkerProcess], Hold]
) -> None:
    """Two gang jobs posted at once to two free machines: each machine's worker may claim one of
    them as node 0. Neither holds the other's machine for ever: the older gang wins it. Both
    finish, each started once; the first (the reference's seed) ends equal to one process at 2K
    and to W=2 on one machine (one job proves both claims: rank start-ups are the suite's time)."""
    settings, (workers, _) = pg_redis_settings, two_machines
    jobs = [post_when_accepted(api, spec) for spec in (GANG, {**GANG, "seed": 2})]
    for job_id in jobs:
        succeeded(api, job_id, *workers)
        assert event_kinds(api, job_id).count("started") == 1
    no_slot_held(settings)
    gang = jobs[0]
    (started,) = messages(settings, gang, "started")
    assert started.endswith("a gang of 2 machines")  # their names are the operator's: logged
    metrics = api.get(f"/v1/jobs/{gang}/metrics").json()["data"]
    assert metrics[0]["train_samples"] == 64  # both machines' rows, each once
    reference = post_when_accepted(api, REFERENCE)
    succeeded(api, reference, *workers)
    one_machine = post_when_accepted(api, ONE_MACHINE)
    succeeded(api, one_machine, *workers)
    weights = {job_id: final_weights(settings.jobs_dir / job_id)
               for job_id in (gang, reference, one_machine)}  # fmt: skip
    bound = tolerance(initial_weights(JobSpec.model_validate(REFERENCE)), weights[reference])
    diffs = [max_abs_diff(weights[gang], weights[other]) for other in (reference, one_machine)]
    print(f"gang vs one process at 2K, vs W=2 on one machine: {diffs} (bound {bound:.2e})")
    assert max(diffs) <= bound
