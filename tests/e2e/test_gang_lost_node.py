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
from tests.e2e.conftest import StartWorker
from tests.e2e.test_gang import machine, messages, no_slot_held, registered
from tests.e2e.test_gang_faults import LONG
from tests.e2e.test_multi_process import (
    all_gone,
    post_when_accepted,
    rank_processes,
)
from tests.support import Hold, event_kinds, wait_final

pytestmark = pytest.mark.integration


# The warm stop of node 1 is make test-heavy's (33 s here): the kill -9 is the harder case.
@pytest.mark.parametrize(
    "lost", ["node 0 killed", pytest.param("node 1 stopped", marks=pytest.mark.heavy)]
)
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
