"""Gang jobs (``gradacc.gang``) that are stopped or lose a part, over two workers on machines m1
and m2 (PostgreSQL + Redis), every run parked at the hold failpoint: a cancel stops a gathering
gang and every rank of a running one; kill -9 of node 0's worker hands the job on and it resumes
from its checkpoint; kill -9 of one rank fails the job on every node. No slot is left held."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradacc import capacity
from gradacc.db import session_scope
from gradacc.models import GangSlot, Job
from gradacc.settings import Settings
from tests.e2e.conftest import StartWorker
from tests.e2e.test_gang import GANG, machine, messages, no_slot_held, registered
from tests.e2e.test_multi_process import all_gone, post_when_accepted, rank_processes
from tests.support import Hold, event_kinds, wait_final, wait_until

pytestmark = pytest.mark.integration

LONG = {**GANG, "num_train_epochs": 3}  # held at step 1, then stopped


@pytest.fixture(autouse=True)
def fresh_capacity() -> Iterator[None]:
    capacity._cached = None
    yield
    capacity._cached = None


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


@pytest.mark.parametrize("lost", ["node 0 killed", "node 1 stopped"])
def test_a_lost_node_hands_the_job_on_and_it_resumes_when_a_machine_is_back(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker, lost: str
) -> None:
    """kill -9 of node 0's worker mid-run, or a warm stop of node 1's: that node's launcher asks
    rank 0 (through the shared job directory) to checkpoint, every rank on both machines stops,
    no slot is left held, and the job is handed on (node 0 lost: its heartbeat goes stale; node
    1 stopped: node 0 releases it at once), and resumes from the checkpoint once a second
    machine is back."""
    settings = pg_redis_settings
    hold = Hold(settings.home / f"lost-hold-{lost[5]}", 1)
    workers = [machine(start_worker, "m1", env=hold.env()), machine(start_worker, "m2",
               env=hold.env())]  # fmt: skip
    registered(settings, *workers)
    job_id = post_when_accepted(api, LONG)
    hold.held(timeout=180)
    ranks = rank_processes(job_id)
    with session_scope(settings) as session:
        owner = str(session.scalar(select(Job.worker).where(Job.id == job_id)))
    (node0,) = [w for w in workers if owner.endswith(f":{w.process.pid}")]
    (node1,) = [w for w in workers if w is not node0]
    if lost == "node 0 killed":
        node0.kill()
    else:
        node1.stop()
    assert all_gone(ranks, timeout=60), "a rank outlived the lost node"
    no_slot_held(settings)
    hold.release()
    machine(start_worker, "m3")
    job = wait_final(api, job_id, timeout=240)
    assert job["status"] == "succeeded", (job, [w.log() for w in workers])
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
