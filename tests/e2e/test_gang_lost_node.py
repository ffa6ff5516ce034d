"""A gang job that loses a node (kill -9 of node 0's worker, a warm stop of node 1's) is handed on
and resumes from its checkpoint once a machine is back. In a file of its own, apart from
``test_gang_faults.py``, so that the suite's processes run the two halves side by side."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from tests.e2e.conftest import StartWorker, WorkerProcess
from tests.e2e.test_gang import machine, messages, no_slot_held, registered
from tests.e2e.test_gang_faults import LONG
from tests.e2e.test_multi_process import (
    all_gone,
    post_when_accepted,
    rank_processes,
)
from tests.support import Hold, event_kinds, wait_final

pytestmark = pytest.mark.integration


def lose_a_node(
    api: TestClient, settings: Settings, hold: Hold, workers: list[WorkerProcess], lost: str
) -> tuple[str, WorkerProcess]:
    """A gang job held at step 1 over ``workers`` loses one node ("node 0 killed": kill -9 of
    its worker; "node 1 stopped": a warm stop): every rank on both machines stops and no slot
    is left held. The job and the worker that lived on; the hold is released."""
    hold.arm()
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
    assert all_gone(ranks, timeout=60), f"a rank outlived the lost node ({lost})"
    no_slot_held(settings)
    hold.release()
    return job_id, node1 if lost == "node 0 killed" else node0


def resumed_once(
    api: TestClient, settings: Settings, job_id: str, workers: list[WorkerProcess]
) -> None:
    """The job succeeded on its second attempt, resumed from its checkpoint."""
    job = wait_final(api, job_id, timeout=240)
    assert job["status"] == "succeeded", (job, [w.log() for w in workers])
    assert job["attempts"] == 2 and event_kinds(api, job_id).count("started") == 2
    assert any("resumed at step" in m for m in messages(settings, job_id, "training"))


def test_a_lost_node_hands_the_job_on_and_it_resumes_when_a_machine_is_back(
    api: TestClient, pg_redis_settings: Settings, start_worker: StartWorker
) -> None:
    """kill -9 of node 0's worker mid-run, then (a second job, on the machines then live) a warm
    stop of node 1's: that node's launcher asks rank 0 (through the shared job directory) to
    checkpoint, every rank on both machines stops, no slot is left held, and the job is handed
    on (node 0 lost: its heartbeat goes stale; node 1 stopped: node 0 releases it at once), and
    resumes from the checkpoint once a second machine is back. One run of both cases: four
    workers instead of six."""
    settings, hold = pg_redis_settings, Hold(pg_redis_settings.home / "lost-hold", 1)
    workers = [machine(start_worker, name, env=hold.env()) for name in ("m1", "m2")]
    registered(settings, *workers)
    killed, survivor = lose_a_node(api, settings, hold, workers, "node 0 killed")
    workers = [survivor, machine(start_worker, "m3", env=hold.env())]
    resumed_once(api, settings, killed, workers)

    stopped, _ = lose_a_node(api, settings, hold, workers, "node 1 stopped")
    workers.append(machine(start_worker, "m4"))
    resumed_once(api, settings, stopped, workers)
