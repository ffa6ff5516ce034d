"""Jobs over two machines (gang scheduling, ``gradacc.gang``) with real workers on PostgreSQL +
Redis: two workers that declare different machines (``GRADACC_MACHINE``, loopback addresses), one
device each (two on m1 where a one-machine run of W=2 is the reference). A gang job W=2, M=2 ends equal to one process at 2K and to W=2 on one machine; two
competing gang jobs both finish; a gang job with one machine live releases its slot after the
bounded wait and runs once the second machine's worker is up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradacc import capacity
from gradacc.db import session_scope
from gradacc.models import GangSlot, Job, JobEvent, Worker
from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker, WorkerProcess
from tests.e2e.test_multi_process import all_gone, post_when_accepted, rank_processes
from tests.support import Hold, event_kinds, wait_final, wait_until
from tests.trainer_core.helpers import final_weights, initial_weights, max_abs_diff, tolerance
from trainer_core.spec.job import JobSpec

pytestmark = pytest.mark.integration

# b=4, K=2 on each of 2 processes over 2 machines: the effective batch is 16, as one process
# with b=4 and K=4 (2K), and as W=2 on one machine.
GANG = {**TINY, "num_processes": 2, "num_machines": 2, "per_device_train_batch_size": 4}
ONE_MACHINE = {**GANG, "num_machines": 1}
REFERENCE = {**TINY, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
LONG = {**GANG, "num_train_epochs": 3}  # held at step 1, then cancelled
WAIT_S = "8"  # GRADACC_GANG_WAIT_S: short, so that the test sees a release


@pytest.fixture(autouse=True)
def fresh_capacity() -> Iterator[None]:
    capacity._cached = None
    yield
    capacity._cached = None


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


def test_a_gang_job_over_two_machines_equals_one_process_at_2k(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    settings = pg_redis_settings
    # m1 has 2 devices for the one-machine run; the gang job takes 1 on each machine.
    workers = [machine(start_worker, "m1", devices=2), machine(start_worker, "m2")]
    registered(settings, *workers)
    gang = post_when_accepted(api, GANG)
    succeeded(api, gang, *workers)
    (started,) = messages(settings, gang, "started")
    assert started.endswith("a gang of 2 machines: m1, m2") or started.endswith(": m2, m1")
    metrics = api.get(f"/v1/jobs/{gang}/metrics").json()["data"]
    assert metrics[0]["train_samples"] == 64  # both machines' rows, each once
    no_slot_held(settings)
    reference = post_when_accepted(api, REFERENCE)
    succeeded(api, reference, *workers)
    one_machine = post_when_accepted(api, ONE_MACHINE)
    succeeded(api, one_machine, *workers)
    weights = {job_id: final_weights(settings.jobs_dir / job_id)
               for job_id in (gang, reference, one_machine)}  # fmt: skip
    bound = tolerance(initial_weights(JobSpec.model_validate(REFERENCE)), weights[reference])
    assert max_abs_diff(weights[gang], weights[reference]) <= bound
    assert max_abs_diff(weights[gang], weights[one_machine]) <= bound


def test_two_competing_gang_jobs_both_finish(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    """Both posted at once to two free one-device machines: each machine's worker may claim one
    of them as node 0. Neither holds the other's machine for ever: the older gang wins it."""
    settings = pg_redis_settings
    workers = [machine(start_worker, "m1"), machine(start_worker, "m2")]
    registered(settings, *workers)
    jobs = [post_when_accepted(api, {**GANG, "seed": seed}) for seed in (1, 2)]
    for job_id in jobs:
        succeeded(api, job_id, *workers)
        assert event_kinds(api, job_id).count("started") == 1
    no_slot_held(settings)


def test_a_gang_waits_for_its_second_machine(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    settings = pg_redis_settings
    first = machine(start_worker, "m1")
    registered(settings, first)
    job_id = post_when_accepted(api, GANG)
    wait_until(lambda: messages(settings, job_id, "gang_released"), timeout=120,
               what="the gang released after its wait")  # fmt: skip
    assert "1 of 2 machines held (m1)" in messages(settings, job_id, "gang_released")[0]
    assert "started" not in event_kinds(api, job_id)
    second = machine(start_worker, "m2")
    succeeded(api, job_id, first, second)
    assert event_kinds(api, job_id).count("started") == 1
    assert api.get(f"/v1/jobs/{job_id}").json()["attempts"] == 1  # the waits count no attempt
    no_slot_held(settings)


def slot_of(settings: Settings, job_id: str) -> bool:
    with session_scope(settings) as session:
        return session.get(GangSlot, (job_id, 0)) is not None


def test_cancel_stops_a_gathering_and_a_running_gang_on_every_node(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    settings = pg_redis_settings
    hold = Hold(settings.home / "gang-hold", 1)
    first = machine(start_worker, "m1", env=hold.env())
    registered(settings, first)
    gathering = post_when_accepted(api, LONG)
    wait_until(lambda: slot_of(settings, gathering), timeout=60, what="node 0's slot")
    assert api.post(f"/v1/jobs/{gathering}/cancel").status_code == 200
    assert wait_final(api, gathering, timeout=60)["status"] == "cancelled"
    no_slot_held(settings)

    second = machine(start_worker, "m2", env=hold.env())
    registered(settings, second)
    running = post_when_accepted(api, LONG)
    hold.held(timeout=180)
    ranks = rank_processes(running)
    assert len(ranks) == 4, ranks  # a torchrun agent and a rank on each machine
    assert api.post(f"/v1/jobs/{running}/cancel").status_code == 200
    assert all_gone(ranks, timeout=30), "a rank outlived its cancelled gang job"
    assert wait_final(api, running, timeout=60)["status"] == "cancelled"
    no_slot_held(settings)
    hold.release()


def test_a_lost_node_0_hands_the_job_on_and_it_resumes_when_the_machine_is_back(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    """kill -9 of node 0's worker mid-run: its launcher asks rank 0 (through the shared job
    directory) to checkpoint, every rank on both machines stops, no slot is left held, and the
    job, still running with a stale heartbeat, is taken over by the other machine's worker and
    resumes from the checkpoint once a second machine is back."""
    settings = pg_redis_settings
    hold = Hold(settings.home / "lost-hold", 1)
    workers = [machine(start_worker, "m1", env=hold.env()), machine(start_worker, "m2",
               env=hold.env())]  # fmt: skip
    registered(settings, *workers)
    job_id = post_when_accepted(api, LONG)
    hold.held(timeout=180)
    ranks = rank_processes(job_id)
    with session_scope(settings) as session:
        owner = str(session.scalar(select(Job.worker).where(Job.id == job_id)))
    (node0,) = [w for w in workers if owner.endswith(f":{w.process.pid}")]
    (other,) = [w for w in workers if w is not node0]
    node0.kill()
    assert all_gone(ranks, timeout=60), "a rank outlived the lost node"
    no_slot_held(settings)
    hold.release()
    machine(start_worker, "m3")
    job = wait_final(api, job_id, timeout=240)
    assert job["status"] == "succeeded", (job, other.log())
    assert job["attempts"] == 2 and event_kinds(api, job_id).count("started") == 2
    assert any("resumed at step" in m for m in messages(settings, job_id, "training"))


def test_a_killed_rank_fails_the_gang_job_cleanly_on_every_node(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    """kill -9 of one rank: the other machine's rank fails in its next collective, the job
    fails (restarts are not coordinated across machines yet), no process or slot is left."""
    settings = pg_redis_settings
    hold = Hold(settings.home / "rank-hold", 1)
    workers = [machine(start_worker, "m1", env=hold.env()), machine(start_worker, "m2",
               env=hold.env())]  # fmt: skip
    registered(settings, *workers)
    job_id = post_when_accepted(api, LONG)
    hold.held(timeout=180)
    processes = rank_processes(job_id)
    agents = ("worker.child.rank_agent", "torch.distributed.run")
    ranks = [p for p in processes if not any(a in p.cmdline() for a in agents)]
    assert len(ranks) == 2, processes
    ranks[0].kill()
    hold.release()
    job = wait_final(api, job_id, timeout=120)
    assert job["status"] == "failed", (job, [w.log() for w in workers])
    assert all_gone(processes, timeout=60), "a rank or agent outlived the failed gang job"
    no_slot_held(settings)
