"""A reinforcement job graded by this server's own fine-tuned model, through the official
``openai`` SDK against a live ``gradacc serve`` (embedded stack, one worker and its predict
server, API keys). Alice fine-tunes a judge (``builtin:tiny-chat`` taught to answer "1" to
"Score the answer: …"), then runs a ``method: reinforcement`` job whose ``score_model`` grader
names that ``ft:`` model: the training child asks the worker's predict server as alice, while
the worker trains. The job succeeds with no grader error, and each sample its evaluations record
(step 0 and its last step) scored what ``graders.run`` scores on the same sample and item. Bob,
for whom alice's model does not exist, gets a 400 naming the grader's ``model`` from the job's
POST, ``graders.validate`` and ``graders.run`` alike.

The judge answers "1" to whatever it reads (a tiny model taught a discrimination in a test's
seconds does not learn one), so the rewards are 1, and only its answer makes them so: a judge
that was not asked scores 0 with a ``model_grader_server_error``, the base model's babble 0 with
a ``model_grader_parse_error``."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import serve_with_keys
from tests.e2e.test_openai_sdk import wait_status

pytestmark = pytest.mark.integration
WORDS = ("the", "a", "cat", "dog", "plus", "is", "what", "answer", "number", *"123456789")
ASK = "Score the answer: {{ sample.output_text }}"


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def judge_rows() -> list[dict[str, Any]]:
    pick = random.Random(0)
    answers = [" ".join(pick.choices(WORDS, k=pick.randint(1, 6))) for _ in range(32)]
    return [{"messages": [{"role": "user", "content": ASK.replace("{{ sample.output_text }}", a)},
                          {"role": "assistant", "content": "1"}]} for a in answers]  # fmt: skip


def prompts(start: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"What is {i} plus 1?"}],
             "answer": str(i + 1)} for i in range(start, start + 2)]  # fmt: skip


def judged_by(model: str) -> Any:
    return {"type": "score_model", "name": "judge", "model": model,
            "input": [{"role": "user", "content": ASK}],
            "sampling_params": {"temperature": 0, "max_completions_tokens": 3}}  # fmt: skip


@pytest.fixture(scope="module", params=["embedded"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    home = tmp_path_factory.mktemp("judges")
    with serve_with_keys(request, home, {"GRADACC_PREDICT_SERVER": "true"}) as (_, url, keys):
        yield url, keys


def sdk(served: tuple[str, dict[str, str]], tenant: str) -> openai.OpenAI:
    url, keys = served
    return openai.OpenAI(base_url=f"{url}/v1", api_key=keys[tenant], max_retries=0, timeout=60)


def upload(client: openai.OpenAI, name: str, rows: list[dict[str, Any]]) -> str:
    return client.files.create(file=(name, jsonl(rows)), purpose="fine-tune").id


def reinforce(client: openai.OpenAI, grader: Any) -> Any:
    train = upload(client, "train.jsonl", prompts(0))
    valid = upload(client, "valid.jsonl", prompts(10))
    method: Any = {"type": "reinforcement", "reinforcement": {"grader": grader,
                   "hyperparameters": {"batch_size": 1, "compute_multiplier": 0.25,
                                       "n_epochs": 1, "eval_samples": 2}}}  # fmt: skip
    return client.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=train, validation_file=valid, seed=7,
        method=method, extra_body={"gradacc": {"grpo": {"max_completion_length": 6}}},
    )  # fmt: skip


@pytest.fixture(scope="module")
def judge(served: tuple[str, dict[str, str]]) -> str:
    """Alice's ``ft:`` judge: 8 epochs of 32 rows, as a client trains one."""
    alice = sdk(served, "alice")
    method: Any = {"type": "supervised",
                   "supervised": {"hyperparameters": {"n_epochs": 8, "batch_size": 8}}}  # fmt: skip
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=upload(alice, "judge.jsonl", judge_rows()),
        method=method, extra_body={"gradacc": {"learning_rate": 1e-2}},
    )  # fmt: skip
    done = wait_status(alice, job.id, "succeeded", timeout=300)
    assert done.fine_tuned_model
    return str(done.fine_tuned_model)


def test_a_job_graded_by_an_own_model_scores_as_graders_run(
    served: tuple[str, dict[str, str]], judge: str
) -> None:
    alice = sdk(served, "alice")
    grader = judged_by(judge)
    job = wait_status(alice, reinforce(alice, grader).id, "succeeded", timeout=300)
    events = list(alice.fine_tuning.jobs.list_events(job.id, limit=100))
    metrics: list[Any] = [e.data for e in events if e.type == "metrics"]
    assert [m["step"] for m in metrics] == [2, 1]
    for data in metrics:  # every answer was graded by the judge, none failed
        assert (data["train_grader_errors"], data["train_reward_mean"]) == (0, 1.0), data
    url, keys = served
    reports = httpx.get(f"{url}/v1/jobs/{job.id}/metrics", params={"granularity": "evaluation"},
                        headers={"Authorization": f"Bearer {keys['alice']}"}).json()["data"]  # fmt: skip
    assert [r["step"] for r in reports] == [2, 0]
    items = {row["messages"][0]["content"]: {"answer": row["answer"]} for row in prompts(10)}
    graded = [sample for report in reports for sample in report["samples"]]
    assert len(graded) == 4
    for sample in graded:
        (item,) = [item for asked, item in items.items() if asked in sample["prompt"]]
        ran: Any = alice.fine_tuning.alpha.graders.run(
            grader=grader, model_sample=sample["output"], item=item
        ).to_dict()
        failed = sorted(kind for kind, hit in ran["metadata"]["errors"].items() if hit is True)
        assert (ran["reward"], failed) == (sample["reward"], sorted(sample["errors"])), sample
        assert ran["model_grader_token_usage_per_model"][judge]["completion_tokens"] >= 1
    assert {sample["reward"] for sample in graded} == {1.0}  # the judge's answer, every time
    # The base model, asked the same, does not answer with a score: the 1s are the judge's.
    base = alice.fine_tuning.alpha.graders.run(
        grader=judged_by("builtin:tiny-chat"), model_sample=graded[0]["output"]
    )
    assert base.reward == 0.0 and base.metadata.errors.api_model_grader_parse_error


def test_another_tenants_model_is_refused_at_every_door(
    served: tuple[str, dict[str, str]], judge: str
) -> None:
    bob = sdk(served, "bob")
    grader = judged_by(judge)
    graders = bob.fine_tuning.alpha.graders
    calls: list[tuple[Callable[[], Any], str]] = [
        (lambda: reinforce(bob, grader), "method.reinforcement.grader.model"),
        (lambda: graders.validate(grader=grader), "grader.model"),
        (lambda: graders.run(grader=grader, model_sample="1"), "grader.model"),
    ]
    for call, param in calls:
        with pytest.raises(openai.BadRequestError) as refused:
            call()
        assert refused.value.param == param and judge in str(refused.value.message)
