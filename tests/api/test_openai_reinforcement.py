"""OpenAI's ``method: reinforcement`` in-process through the official SDK (one embedded app for
the module, no worker): the body becomes a ``grpo`` spec, each "auto" resolves by the rules of
docs/openai.md, the job object echoes the grader and every resolved value; each refusal is a 400
naming OpenAI's field. A reinforcement job's step records under OpenAI's names (events, results
file). The trained job with a live worker is tests/e2e/test_openai_reinforcement.py."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.services.fine_tuning_create import auto_epochs
from api.services.fine_tuning_reinforcement import group_size_for
from gradacc.jobs.records import _message
from gradacc.openai.names import openai_metrics, openai_param
from gradacc.openai.results import results_csv
from gradacc.settings import Settings
from tests.api.test_chat_data import GOOD, jsonl
from tests.conftest import migrate

EXACT = {"type": "string_check", "name": "exact", "operation": "eq",
         "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}  # fmt: skip
SHORT = {"type": "python", "name": "short",
         "source": "def grade(sample, item):\n    return float(len(sample['output_text']) < 9)\n"}  # fmt: skip
MULTI = {"type": "multi", "name": "score", "graders": {"exact": EXACT, "short": SHORT},
         "calculate_output": "0.5 * exact + 0.5 * short"}  # fmt: skip
JUDGE = {"type": "score_model", "name": "judge", "model": "builtin:tiny-chat",
         "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}]}  # fmt: skip
TRAIN_ROWS, VALID_ROWS = 6, 4


def prompts(rows: int) -> bytes:
    return jsonl([{"messages": [{"role": "user", "content": f"{i} plus 1?"}], "answer": str(i + 1)}
                  for i in range(rows)])  # fmt: skip


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    settings = Settings(home=tmp_path_factory.mktemp("rft") / "home")
    settings.home.mkdir(parents=True)
    migrate(settings.resolved_database_url())
    with TestClient(create_app(settings), raise_server_exceptions=False) as app:
        yield openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=app,
                            max_retries=0)  # fmt: skip


@pytest.fixture(scope="module")
def files(client: openai.OpenAI) -> dict[str, str]:
    def upload(name: str, data: bytes) -> str:
        return client.files.create(file=(name, data), purpose="fine-tune").id

    return {"train": upload("train.jsonl", prompts(TRAIN_ROWS)),
            "valid": upload("valid.jsonl", prompts(VALID_ROWS)),
            "chat": upload("chat.jsonl", jsonl(GOOD * 3))}  # fmt: skip


def reinforcement(grader: Any = MULTI, **hyperparameters: Any) -> Any:
    return {"type": "reinforcement",
            "reinforcement": {"grader": grader, "hyperparameters": hyperparameters}}  # fmt: skip


def spec_of(client: openai.OpenAI, job_id: str) -> dict[str, Any]:
    return client.get(f"/jobs/{job_id}", cast_to=object)["spec"]  # type: ignore[index,no-any-return]


def test_the_group_size_is_the_base_group_scaled() -> None:
    assert [group_size_for(m) for m in (0.1, 0.25, 0.3, 0.5, 1.0, 2.5, 10.0)] == [
        2, 2, 2, 4, 8, 20, 80,
    ]  # fmt: skip


def test_a_reinforcement_body_becomes_a_grpo_spec_and_echoes_its_resolved_values(
    client: openai.OpenAI, files: dict[str, str]
) -> None:
    job = client.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=files["train"], validation_file=files["valid"],
        method=reinforcement(batch_size=2, compute_multiplier=0.5, reasoning_effort="high"),
        extra_body={"gradacc": {"grpo": {"max_completion_length": 8, "loss_type": "grpo"}}},
    )  # fmt: skip
    assert job.method is not None and job.method.type == "reinforcement"
    method = job.method.reinforcement
    assert method is not None and method.hyperparameters is not None
    echoed = method.hyperparameters.to_dict()
    # as given: the SDK's MultiGrader types one sub-grader, OpenAI's guide (and this) a map
    assert method.to_dict(warnings=False)["grader"] == MULTI
    # 6 prompts: OpenAI's epochs rule on prompts; one evaluation an epoch (6 // 2 steps); the
    # whole validation file (4 prompts, under 64).
    assert echoed == {"batch_size": 2, "compute_multiplier": 0.5, "n_epochs": auto_epochs(6),
                      "eval_interval": 3, "eval_samples": 4, "learning_rate_multiplier": 1.0,
                      "reasoning_effort": "high"}  # fmt: skip
    assert method.grader.type == "multi" and job.validation_file == files["valid"]
    assert job.hyperparameters is not None and job.hyperparameters.batch_size == 2
    spec = spec_of(client, job.id)
    grpo = spec["grpo"]
    assert (spec["method"], spec["task"], spec["eval_dataset"]) == ("grpo", "causal-lm",
                                                                   files["valid"])  # fmt: skip
    # batch_size counts prompts; the spec's effective batch counts completions (2 x group 4)
    assert (spec["effective_batch_size"], grpo["group_size"]) == (8, 4)
    assert (grpo["eval_interval"], grpo["eval_samples"]) == (3, 4)
    assert (grpo["max_completion_length"], grpo["loss_type"]) == (8, "grpo")  # gradacc.grpo's
    assert grpo["grader"]["graders"]["short"]["source"] == SHORT["source"]
    assert spec["num_train_epochs"] == auto_epochs(6)
    again = client.fine_tuning.jobs.retrieve(job.id)
    assert again.method is not None
    assert again.method.to_dict(warnings=False) == job.method.to_dict(warnings=False)


def test_every_auto_of_a_reinforcement_job(client: openai.OpenAI, files: dict[str, str]) -> None:
    job = client.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=files["train"], validation_file=files["valid"],
        method=reinforcement(EXACT),
    )  # fmt: skip
    assert job.method is not None and job.method.reinforcement is not None
    resolved = job.method.reinforcement.hyperparameters
    assert resolved is not None
    assert (resolved.batch_size, resolved.compute_multiplier) == (1, 1.0)  # round(0.012) -> 1
    assert (resolved.eval_interval, resolved.eval_samples) == (6, 4)
    assert resolved.reasoning_effort == "default"
    spec = spec_of(client, job.id)
    assert (spec["grpo"]["group_size"], spec["effective_batch_size"]) == (8, 8)


def _refused(client: openai.OpenAI, **body: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as refused:
        client.fine_tuning.jobs.create(model="builtin:tiny-chat", **body)
    return refused.value


def test_each_wrong_reinforcement_body_is_a_400_naming_its_field(
    client: openai.OpenAI, files: dict[str, str]
) -> None:
    both = {"training_file": files["train"], "validation_file": files["valid"]}
    bad_operation = {**EXACT, "operation": "equals"}
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"training_file": files["train"], "method": reinforcement()},
         "validation_file", "needs a validation file"),
        ({**both, "method": {"type": "reinforcement"}},
         "method.reinforcement", "needs reinforcement.grader"),
        ({**both, "method": reinforcement(bad_operation)},
         "method.reinforcement.grader.operation", "'eq', 'ne', 'like' or 'ilike'"),
        ({**both, "method": reinforcement({**MULTI, "graders": {"exact": bad_operation}})},
         "method.reinforcement.grader.graders.exact.operation", "'eq'"),
        ({**both, "method": reinforcement({**MULTI, "calculate_output": "exact + other"})},
         "method.reinforcement.grader", "calculate_output names 'other', not a grader"),
        ({**both, "method": reinforcement({**JUDGE, "model": "no-such-model"})},
         "method.reinforcement.grader.model", "no-such-model"),
        ({**both, "training_file": files["chat"], "method": reinforcement()},
         "training_file", "method reinforcement trains prompts"),
        ({**both, "method": reinforcement(compute_multiplier=0)},
         "method.reinforcement.hyperparameters.compute_multiplier",
         "compute_multiplier must be 'auto' or a number above 0 and at most 10 (got 0)"),
        ({**both, "method": reinforcement(batch_size=7)},
         "method.reinforcement.hyperparameters.batch_size", "the training file holds 6"),
        ({**both, "method": reinforcement(eval_samples=5)},
         "method.reinforcement.hyperparameters.eval_samples", "the validation file holds 4"),
        ({**both, "method": reinforcement(eval_interval=0)},
         "method.reinforcement.hyperparameters.eval_interval", "an integer from 1 to 10000"),
        ({**both, "method": reinforcement(reasoning_effort="max")},
         "method.reinforcement.hyperparameters.reasoning_effort", "'default', 'low'"),
        ({**both, "method": {**reinforcement(), "supervised": {}}},
         "method.supervised", "given, but method.type is 'reinforcement'"),
        ({**both, "method": reinforcement(), "hyperparameters": {"n_epochs": 2}},
         "hyperparameters", "give method.reinforcement.hyperparameters"),
        ({**both, "method": reinforcement(),
          "extra_body": {"gradacc": {"grpo": {"group_size": 4}}}},
         "gradacc.grpo.group_size",
         "set by method.reinforcement.hyperparameters.compute_multiplier"),
        ({**both, "method": reinforcement(), "extra_body": {"gradacc": {"num_train_epochs": 2}}},
         "gradacc.num_train_epochs", "set by method.reinforcement.hyperparameters.n_epochs"),
        ({**both, "method": reinforcement(),
          "extra_body": {"gradacc": {"grpo": {"loss_type": "bnpo"}}}},
         "gradacc.grpo.loss_type", "'bnpo' is not trained"),
    ]  # fmt: skip
    before = len(client.fine_tuning.jobs.list(limit=100).data)
    for body, param, said in cases:
        error = _refused(client, **body)
        assert error.param == param, (body, error.body)
        assert said in str(error.message), (body, error.message)
    assert len(client.fine_tuning.jobs.list(limit=100).data) == before  # nothing half-made


def test_the_spec_fields_a_reinforcement_body_sets_are_named_by_it() -> None:
    hyper = "method.reinforcement.hyperparameters"
    named = {param: openai_param(param, "reinforcement") for param in (
        "grpo.group_size", "grpo.eval_samples", "grpo.grader.graders.a.model", "grpo.beta",
        "effective_batch_size", "num_train_epochs", "eval_dataset")}  # fmt: skip
    assert named == {
        "grpo.group_size": f"{hyper}.compute_multiplier",
        "grpo.eval_samples": f"{hyper}.eval_samples",
        "grpo.grader.graders.a.model": "method.reinforcement.grader.graders.a.model",
        "grpo.beta": "gradacc.grpo.beta",
        "effective_batch_size": f"{hyper}.batch_size",
        "num_train_epochs": f"{hyper}.n_epochs",
        "eval_dataset": "validation_file",
    }


# Two GRPO step records as the core writes them (trainer_core.grpo.metrics), the second
# with an evaluation.
STEPS = [
    {"step": 1, "train_loss": -0.01, "reward_mean": 0.25, "reward_std": 0.4,
     "rewards/exact/mean": 0.5, "rewards/exact/std": 0.5, "grader_errors": 2,
     "grader_errors/python_grader_runtime_error": 2, "completion_length": 7.5,
     "truncated_fraction": 0.25, "clip_ratio": 0.0},
    {"step": 2, "train_loss": 0.02, "reward_mean": 0.75, "reward_std": 0.1,
     "rewards/exact/mean": 1.0, "rewards/exact/std": 0.0, "grader_errors": 0,
     "grader_errors/python_grader_runtime_error": 0, "completion_length": 5.0,
     "truncated_fraction": 0.0, "clip_ratio": 0.0, "eval_reward_mean": 0.5,
     "eval_rewards/exact/mean": 0.5},
]  # fmt: skip


def test_a_reinforcement_step_record_in_openais_words() -> None:
    data = openai_metrics(STEPS[1])
    assert data["train_reward_mean"] == 0.75 and data["train_rewards_exact_mean"] == 1.0
    assert data["valid_reward_mean"] == 0.5 and data["valid_rewards_exact_mean"] == 0.5
    assert data["train_grader_errors_python_grader_runtime_error"] == 0
    assert (data["train_completion_length"], data["train_clip_ratio"]) == (5.0, 0.0)
    assert data["valid_loss"] is None and "train_rewards_accuracies" not in data  # no dpo names
    first = openai_metrics(STEPS[0])
    assert "valid_reward_mean" not in first and first["train_grader_errors"] == 2
    assert _message(first) == "Step 1: training loss=-0.0100, reward mean=0.2500"
    assert _message(data).endswith("reward mean=0.7500, validation reward mean=0.5000")
    # A dpo record's pair metric is not taken for a sub-grader's, nor a supervised one's for any.
    assert "train_rewards_chosen" not in openai_metrics({"step": 1, "rewards/chosen/x": 1.0})
    assert set(openai_metrics({"step": 1, "train_loss": 1.0})) == {
        "step", "train_loss", "valid_loss", "train_mean_token_accuracy",
        "valid_mean_token_accuracy"}  # fmt: skip


def test_the_results_file_has_a_column_per_reinforcement_metric() -> None:
    rows = list(csv.DictReader(io.StringIO(results_csv(STEPS, []))))
    assert [row["step"] for row in rows] == ["1", "2"]
    assert rows[0]["train_reward_mean"] == "0.25" and rows[1]["train_reward_mean"] == "0.75"
    assert rows[0]["valid_reward_mean"] == "" and rows[1]["valid_reward_mean"] == "0.5"
    assert rows[1]["valid_rewards_exact_mean"] == "0.5"
    assert rows[0]["train_grader_errors_python_grader_runtime_error"] == "2.0"
