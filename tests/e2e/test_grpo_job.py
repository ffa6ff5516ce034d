"""Method grpo end to end on PostgreSQL and Redis: a prompt file uploaded, a grpo job posted to
/v1/jobs, trained by a real Celery worker's training child on builtin:tiny-chat with a
string_check grader as the reward, 2 windows; its step metrics carry the rewards, the second
window's with an evaluation of the validation prompts. A second job, held after its first window
by the hold failpoint, is cancelled there."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import pytest
from fastapi.testclient import TestClient

from gradacc.settings import Settings
from tests.e2e.conftest import StartWorker
from tests.support import Hold, event_kinds, wait_final

pytestmark = pytest.mark.integration

PROMPTS = [
    {"messages": [{"role": "user", "content": f"what is {a} plus {a}?"}],
     "answer": str(2 * a), "sentinel": "never said"}
    for a in range(4)
]  # fmt: skip
# Scores 1 unless the answer is the row's own sentinel: every reward is 1 if, and only if, the
# grader reads each completion with its row as item (a missing item.sentinel scores 0).
NOT_SENTINEL = {"type": "string_check", "name": "not_sentinel", "operation": "ne",
                "input": "{{ sample.output_text }}", "reference": "{{ item.sentinel }}"}  # fmt: skip


def grpo_spec(dataset: str) -> dict[str, Any]:
    return {"model": "builtin:tiny-chat", "task": "causal-lm", "method": "grpo",
            "dataset": dataset, "per_device_train_batch_size": 2, "effective_batch_size": 4,
            "max_steps": 2, "learning_rate": 1e-3, "max_seq_length": 64,
            "grpo": {"group_size": 2, "max_completion_length": 6, "grader": NOT_SENTINEL}}  # fmt: skip


def test_a_grpo_job_trains_with_its_grader_and_cancels_between_windows(
    api: TestClient, start_worker: StartWorker, pg_redis_settings: Settings
) -> None:
    polled = cast(httpx.Client, api)  # tests.support polls any httpx-style client
    data = "".join(json.dumps(row) + "\n" for row in PROMPTS).encode()
    upload = api.post("/v1/files", files={"file": ("prompts.jsonl", data)})
    assert upload.status_code == 201, upload.text
    hold = Hold(pg_redis_settings.home / "grpo-hold", 1)
    worker = start_worker("grpo", hold.env())
    held = api.post("/v1/jobs", json=grpo_spec(upload.json()["id"])).json()["id"]
    hold.held()
    assert api.post(f"/v1/jobs/{held}/cancel").status_code == 200
    assert wait_final(polled, held, timeout=120)["status"] == "cancelled", worker.log()
    hold.release()

    evaluated = grpo_spec(upload.json()["id"])  # and evaluated after window 2, on 2 prompts
    evaluated["grpo"] |= {"eval_interval": 2, "eval_samples": 2}
    evaluated["eval_dataset"] = upload.json()["id"]
    job_id = api.post("/v1/jobs", json=evaluated).json()["id"]
    job = wait_final(polled, job_id, timeout=240)
    assert job["status"] == "succeeded", (job, worker.log())
    assert job["progress"]["step"] == job["progress"]["total_steps"] == 2
    steps = api.get(f"/v1/jobs/{job_id}/metrics?granularity=step").json()["data"]
    assert [s["step"] for s in steps] == [1, 2], steps
    for record in steps:
        assert record["reward_mean"] == 1.0 and record["reward_std"] == 0.0, record
        assert 1 <= record["completion_length"] <= 6, record
    assert "eval_reward_mean" not in steps[0] and steps[1]["eval_reward_mean"] == 1.0, steps
    assert "training" in event_kinds(polled, job_id)
    assert (pg_redis_settings.jobs_dir / job_id / "model").is_dir()
