"""A LoRA job without ``merge_lora`` gives a model like any other, over real HTTP against
``gradacc serve``: its ``fine_tuned_model`` predicts what its merged twin (the same job with
``merge_lora``) predicts, greedy text exactly, and so does one of its checkpoints; a job trained
from it starts from its weights (its step losses are those of the same job trained from the
merged twin, and not those of a start from the base); that job's own adapters, on a chain of two
adapters, predict what the twin's chain predicts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import embedded_serve
from tests.support import wait_final

pytestmark = pytest.mark.integration
CHAT = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
        "max_train_samples": 32, "max_eval_samples": 4, "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1, "learning_rate": 5e-3, "logging_steps": 1,
        "lora": {"r": 4, "alpha": 8}, "seed": 11}  # fmt: skip
MESSAGES = [{"role": "user", "content": "what is 2 plus 3?"}]


def _train(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    reply = client.post("/v1/jobs", json={**CHAT, **fields})
    assert reply.status_code == 201, reply.text
    job = wait_final(client, reply.json()["id"], timeout=240)
    assert job["status"] == "succeeded", job
    return job


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, dict[str, Any]]]:
    """The twins (LoRA, merged or not), then a LoRA job again from each."""
    with (
        embedded_serve(tmp_path_factory.mktemp("lora")) as (url, _),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        found = {"plain": _train(client, num_train_epochs=2),
                 "merged": _train(client, num_train_epochs=2, merge_lora=True)}  # fmt: skip
        for name in ("plain", "merged"):
            model = found[name]["fine_tuned_model"]
            found[f"again_{name}"] = _train(client, model=model, num_train_epochs=1, seed=5)
        yield client, found


def _say(client: httpx.Client, job_id: str, **extra: Any) -> str:
    body = {"messages": MESSAGES, "max_new_tokens": 12, **extra}
    reply = client.post(f"/v1/jobs/{job_id}/predict", json=body)
    assert reply.status_code == 200, reply.text
    text: str = reply.json()["text"]
    return text


def _losses(client: httpx.Client, job_id: str) -> list[float]:
    reply = client.get(f"/v1/jobs/{job_id}/metrics", params={"granularity": "step"})
    assert reply.status_code == 200, reply.text
    return [record["train_loss"] for record in reply.json()["data"]]


def test_an_unmerged_lora_model_predicts_what_its_merged_twin_does(jobs: Any) -> None:
    client, found = jobs
    plain, merged = found["plain"], found["merged"]
    assert plain["fine_tuned_model"].endswith(plain["id"])
    assert _say(client, plain["id"]) == _say(client, merged["id"])
    # A checkpoint of the unmerged job answers too, as its merged twin's checkpoint does.
    steps = [
        c["step_number"] for c in client.get(f"/v1/jobs/{plain['id']}/checkpoints").json()["data"]
    ]
    assert steps
    assert _say(client, plain["id"], checkpoint=steps[-1]) == _say(
        client, merged["id"], checkpoint=steps[-1]
    )


def test_a_job_from_a_lora_model_starts_from_its_weights(jobs: Any) -> None:
    client, found = jobs
    from_plain = _losses(client, found["again_plain"]["id"])
    from_merged = _losses(client, found["again_merged"]["id"])
    from_base = _losses(client, found["plain"]["id"])
    assert len(from_plain) == len(from_merged) > 0
    assert from_plain == pytest.approx(from_merged, rel=1e-4)
    assert abs(from_plain[0] - from_base[0]) > 0.05  # negative control: the base starts elsewhere


def test_adapters_on_adapters_predict_like_adapters_on_the_merged_model(jobs: Any) -> None:
    client, found = jobs
    assert _say(client, found["again_plain"]["id"]) == _say(client, found["again_merged"]["id"])
