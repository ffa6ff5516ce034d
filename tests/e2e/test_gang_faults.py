"""Gang jobs (``gradacc.scheduling.gang``) that are stopped or lose a part, over two workers on machines m1
and m2 (PostgreSQL + Redis), every run parked at the hold failpoint: a cancel stops a gathering
gang (its second machine busy with a held job) and every rank of a running one (a lost node: ``test_gang_lost_node.py``); kill -9 of one rank, then a rank out of memory, restart the job from its
checkpoint (every node stops, a gang gathers again) to a clean result. No slot is left held."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import GangSlot
from tests.conftest import TINY
from tests.e2e.conftest import WorkerProcess
from tests.e2e.test_gang import GANG, REFERENCE, WAIT_S, messages, no_slot_held, registered
from tests.e2e.test_multi_process import (
    all_gone,
    clean_reference,
    post_when_accepted,
    rank_processes,
)
from tests.support import Hold, checkpoint_at, event_kinds, wait_final, wait_until
from tests.trainer_core.helpers import final_weights, max_abs_diff
from trainer_core.testing.failpoints import OOM_ABOVE, OOM_RANK

pytestmark = pytest.mark.integration

LONG = {**GANG, "num_train_epochs": 3}  # 4 steps an epoch; held, then stopped
LONG_REFERENCE = {**REFERENCE, "num_train_epochs": 3}  # one process at 2K
LONG_ONE = {**TINY, "num_train_epochs": 3}  # one process, 12 steps: a machine kept busy
HELD_AT = 6  # in epoch 2, after epoch 1's checkpoint (step 4)


def slot_of(settings: Settings, job_id: str) -> bool:
    with session_scope(settings) as session:
        return session.get(GangSlot, (job_id, 0)) is not None


@dataclass
class Machines:
    """m1 and m2, one device each, started once for the module: every run on them parks at
    step 6 while ``hold`` is armed, and rank 1 runs out of memory above the micro-batch written
    in ``oom_limit`` (no file: never)."""

    workers: list[WorkerProcess]
    hold: Hold
    oom_limit: Path


@pytest.fixture(scope="module")
def machines(
    pg_redis_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Machines]:
    folder = tmp_path_factory.mktemp("gang-faults")
    hold, oom_limit = Hold(folder / "hold", HELD_AT, armed=False), folder / "oom-above"
    env = {**hold.env(), OOM_ABOVE: f"@{oom_limit}", OOM_RANK: "1"}
    workers = [WorkerProcess(pg_redis_settings, name, {
        "GRADACC_MACHINE": name, "GRADACC_ADVERTISE_HOST": "127.0.0.1",
        "GRADACC_DEVICES": "1", "GRADACC_GANG_WAIT_S": WAIT_S, **env,
    }) for name in ("m1", "m2")]  # fmt: skip
    try:
        registered(pg_redis_settings, *workers)
        yield Machines(workers, hold, oom_limit)
    finally:
        for worker in workers:
            worker.stop()


def test_cancel_stops_a_gathering_and_a_running_gang_on_every_node(
    api: TestClient, pg_redis_settings: Settings, machines: Machines
) -> None:
    settings, hold = pg_redis_settings, machines.hold
    # One machine trains another job (held there): the gang job gathers on the other one.
    hold.arm()
    busy = api.post("/v1/jobs", json=LONG_ONE).json()["id"]
    hold.held(timeout=180)
    gathering = post_when_accepted(api, LONG)
    wait_until(lambda: slot_of(settings, gathering), timeout=60, what="node 0's slot")
    for job_id in (gathering, busy):
        assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert wait_final(api, job_id, timeout=60)["status"] == "cancelled"
    no_slot_held(settings)

    hold.arm()  # the next run to reach the step parks there
    running = post_when_accepted(api, LONG)
    hold.held(timeout=180)
    ranks = rank_processes(running)
    assert len(ranks) == 4, ranks  # a torchrun agent and a rank on each machine
    assert api.post(f"/v1/jobs/{running}/cancel").status_code == 200
    assert all_gone(ranks, timeout=30), "a rank outlived its cancelled gang job"
    assert wait_final(api, running, timeout=60)["status"] == "cancelled"
    no_slot_held(settings)
    hold.release()


def test_a_killed_rank_and_a_rank_out_of_memory_restart_the_gang_to_a_clean_result(
    api: TestClient, pg_redis_settings: Settings, machines: Machines
) -> None:
    """kill -9 of one rank mid-epoch 2: the other machine's rank fails in its next collective,
    every rank and agent stops, node 0 records one restart (naming the killed rank) and hands
    the job on; a gang gathers again and resumes from epoch 1's checkpoint. There rank 1 runs
    out of memory: node 0 records the re-plan, and the next gang resumes at half the micro-batch
    and twice K. The job ends with the weights of an uninterrupted one-process run at 2K."""
    settings, workers, hold = pg_redis_settings, machines.workers, machines.hold
    logs = lambda: [w.log() for w in workers]  # noqa: E731
    _, reference, bound = clean_reference(api, settings, LONG_REFERENCE, logs)
    hold.arm()
    job_id = post_when_accepted(api, LONG)
    hold.held(timeout=180)
    checkpoint_at(settings.jobs_dir / job_id, 4)
    processes = rank_processes(job_id)
    agents = ("worker.child.ranks.agent", "torch.distributed.run")
    ranks = [p for p in processes if not any(a in p.cmdline() for a in agents)]
    assert len(ranks) == 2, processes
    killed = ranks[0].environ()["RANK"]
    machines.oom_limit.write_text("2")  # and from now on rank 1 runs out of memory at micro-batch 4
    ranks[0].kill()
    assert all_gone(processes, timeout=60), "a rank or agent outlived the killed rank"
    hold.release()
    job = wait_final(api, job_id, timeout=240)
    # The error and the events first: pytest cuts a long message, and the job object is long.
    why = (job.get("error"), job.get("attempts"), event_kinds(api, job_id))
    assert job["status"] == "succeeded", (why, [w.log()[-4000:] for w in workers])
    restarts = messages(settings, job_id, "restarted")
    assert restarts == [
        f"restart 1 of 3: rank {killed} of 2 killed by SIGKILL; resumes from step 4"
    ], restarts
    replans = messages(settings, job_id, "replanned")
    assert replans == [
        "a rank ran out of memory at micro-batch 4: every rank starts again at micro-batch 2 x K 4;"
        " resumes from step 4"
    ], replans
    assert (job["micro_batch_size"], job["gradient_accumulation_steps"]) == (2, 4)
    assert job["attempts"] == 3 and event_kinds(api, job_id).count("started") == 3
    diff = max_abs_diff(final_weights(settings.jobs_dir / job_id), reference)
    assert diff <= bound, (diff, bound)
    no_slot_held(settings)
    print(f"gang restart and re-plan: max |dW| vs one process at 2K {diff:.2e} (bound {bound:.2e})")
