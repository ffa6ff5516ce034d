"""A 2-process job on a real worker (PostgreSQL + Redis, torchrun, 2 gloo ranks) loses nothing
when one rank goes wrong in the middle of epoch 2:

- kill -9 of rank 1: torchrun stops rank 0, every rank starts again from epoch 1's checkpoint
  (a ``restarted`` event names the rank and the signal), and the job ends with the weights of an
  uninterrupted run;
- rank 1 alone runs out of memory (rank 0 waits for it in the window's all-reduce): every rank
  starts again with the micro-batch halved and K doubled (a ``replanned`` event), and the job
  ends with the weights of the clean run at the first micro-batch, within float tolerance.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psutil
import pytest
from fastapi.testclient import TestClient

from gradacc.settings import Settings
from tests.e2e.test_multi_process import (
    LONG,
    post_when_accepted,
    rank_processes,
    two_device_worker,  # noqa: F401 - the fixture
)
from tests.support import Hold, checkpoint_at, wait_final
from tests.trainer_core.helpers import final_weights, initial_weights, max_abs_diff, tolerance
from trainer_core.spec.job import JobSpec
from trainer_core.testing.failpoints import OOM_ABOVE, OOM_RANK

pytestmark = pytest.mark.integration

SPEC = {**LONG, "seed": 3}  # 3 epochs of 4 steps (micro-batch 4 x K 2 x 2 ranks)
HELD_AT = 6  # in epoch 2, after epoch 1's checkpoint (step 4)


def rank_one(job_id: str) -> psutil.Process:
    for process in rank_processes(job_id):
        if process.environ().get("RANK") == "1" and "worker.child.rank_main" in process.cmdline():
            return process
    raise AssertionError(f"no rank 1 of {job_id} among {rank_processes(job_id)}")


def events_of(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    return list(api.get(f"/v1/jobs/{job_id}/events").json()["data"])


def test_a_killed_rank_and_a_rank_out_of_memory_restart_every_rank_to_a_clean_result(
    api: TestClient,
    pg_redis_settings: Settings,
    two_device_worker: Any,  # noqa: F811
) -> None:
    settings = pg_redis_settings
    hold = Hold(settings.home / "ranks", HELD_AT, armed=False)
    oom_limit = settings.home / "oom-above"
    env = {**hold.env(), OOM_ABOVE: f"@{oom_limit}", OOM_RANK: "1"}
    worker = two_device_worker("gpus2r", env)
    clean = wait_final(api, post_when_accepted(api, SPEC), timeout=240)
    assert clean["status"] == "succeeded", worker.log()
    reference = final_weights(settings.jobs_dir / clean["id"])
    bound = tolerance(initial_weights(JobSpec.model_validate(SPEC)), reference)

    # 1. kill -9 of rank 1, held mid-epoch 2.
    hold.arm()
    killed = post_when_accepted(api, SPEC)
    hold.held(timeout=240)
    checkpoint_at(settings.jobs_dir / killed, 4)
    os.kill(rank_one(killed).pid, signal.SIGKILL)
    hold.release()
    job = wait_final(api, killed, timeout=240)
    events = events_of(api, killed)
    assert job["status"] == "succeeded", (events, worker.log())
    restarts = [e["message"] for e in events if e["kind"] == "restarted"]
    assert restarts == ["restart 1 of 3: rank 1 of 2 killed by SIGKILL; resumes from step 4"]
    assert job["attempts"] == 1  # restarted in place, on the devices the job held
    diff = max_abs_diff(final_weights(settings.jobs_dir / killed), reference)
    assert diff <= bound, (diff, bound)
    print(f"kill -9: max |dW| {diff:.2e} (bound {bound:.2e})")

    # 2. Rank 1 runs out of memory at micro-batch 4 from step 7 on.
    hold.arm()
    short = post_when_accepted(api, SPEC)
    hold.held(timeout=240)
    checkpoint_at(settings.jobs_dir / short, 4)
    oom_limit.write_text("2")
    hold.release()
    job = wait_final(api, short, timeout=240)
    events = events_of(api, short)
    assert job["status"] == "succeeded", (events, worker.log())
    replans = [e["message"] for e in events if e["kind"] == "replanned"]
    assert replans == [
        "a rank ran out of memory at micro-batch 4: every rank starts again at micro-batch 2 x K 4;"
        " resumes from step 4"
    ], events
    assert not [e for e in events if e["kind"] == "restarted"]  # a re-plan is not a restart
    assert (job["micro_batch_size"], job["gradient_accumulation_steps"]) == (2, 4)
    metrics = api.get(f"/v1/jobs/{short}/metrics").json()["data"]
    assert [m["optimizer_steps"] for m in metrics] == [4, 8, 12]  # cumulative
    diff = max_abs_diff(final_weights(settings.jobs_dir / short), reference)
    assert diff <= bound, (diff, bound)
    print(f"out of memory: max |dW| {diff:.2e} (bound {bound:.2e})")
