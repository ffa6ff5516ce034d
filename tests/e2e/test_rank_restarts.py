"""A 2-process job on a real worker (PostgreSQL + Redis, torchrun, 2 gloo ranks) loses nothing
when one rank goes wrong in the middle of epoch 2, twice in one job (one job: the suite's time):

- kill -9 of rank 1: torchrun stops rank 0, and every rank starts again from epoch 1's
  checkpoint (a ``restarted`` event names the rank and the signal);
- then rank 1 alone runs out of memory (rank 0 waits for it in the window's all-reduce): every
  rank starts again with the micro-batch halved and K doubled (a ``replanned`` event).

The job ends with the weights and losses of an uninterrupted run, within float tolerance.
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
    clean_reference,
    post_when_accepted,
    rank_processes,
    two_device_worker,  # noqa: F401 - the fixture
)
from tests.support import Hold, checkpoint_at, wait_final
from tests.trainer_core.helpers import final_weights, max_abs_diff
from trainer_core.testing.failpoints import OOM_ABOVE, OOM_RANK

pytestmark = pytest.mark.integration

SPEC = {**LONG, "seed": 3}  # 3 epochs of 4 steps (micro-batch 4 x K 2 x 2 ranks)
HELD_AT = 6  # in epoch 2, after epoch 1's checkpoint (step 4)


def rank_one(job_id: str) -> psutil.Process:
    for process in rank_processes(job_id):
        if process.environ().get("RANK") == "1" and "worker.child.ranks.main" in process.cmdline():
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
    clean, reference, bound = clean_reference(api, settings, SPEC, lambda: [worker.log()])

    # Held mid-epoch 2: kill -9 of rank 1, and from then on rank 1 runs out of memory at
    # micro-batch 4. The restart resumes from step 4, rank 1 runs out, and the re-plan resumes
    # from step 4 again at micro-batch 2.
    hold.arm()
    job_id = post_when_accepted(api, SPEC)
    hold.held(timeout=240)
    checkpoint_at(settings.jobs_dir / job_id, 4)
    oom_limit.write_text("2")
    os.kill(rank_one(job_id).pid, signal.SIGKILL)
    hold.release()
    job = wait_final(api, job_id, timeout=240)
    events = events_of(api, job_id)
    assert job["status"] == "succeeded", (events, worker.log())
    assert job["attempts"] == 1  # restarted in place, on the devices the job held
    restarts = [e["message"] for e in events if e["kind"] == "restarted"]
    assert restarts == ["restart 1 of 3: rank 1 of 2 killed by SIGKILL; resumes from step 4"]
    replans = [e["message"] for e in events if e["kind"] == "replanned"]
    assert replans == [  # not counted as a restart
        "a rank ran out of memory at micro-batch 4: every rank starts again at micro-batch 2 x K 4;"
        " resumes from step 4"
    ], events
    assert (job["micro_batch_size"], job["gradient_accumulation_steps"]) == (2, 4)
    metrics = api.get(f"/v1/jobs/{job_id}/metrics").json()["data"]
    assert [m["optimizer_steps"] for m in metrics] == [4, 8, 12]  # cumulative
    clean_metrics = api.get(f"/v1/jobs/{clean['id']}/metrics").json()["data"]
    for a, b in zip(metrics, clean_metrics, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
    diff = max_abs_diff(final_weights(settings.jobs_dir / job_id), reference)
    assert diff <= bound, (diff, bound)
    print(f"kill -9, then out of memory: max |dW| {diff:.2e} (bound {bound:.2e})")
