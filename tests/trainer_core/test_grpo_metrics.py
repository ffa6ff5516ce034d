"""A GRPO run's metrics and evaluation.

The window aggregation is checked against values worked out by hand (means, population stds per
sub-grader, error counts by kind). On ``builtin:tiny-chat``, a run of 4 windows with
``eval_interval`` 2 evaluates the starting model (step 0, its samples those of the model as
loaded), then after windows 2 and 4 and only then, and each step record holds
what its window's completions and grades aggregate to; the evaluation's samples carry the scores
the reward gives their outputs; sampling the same prompts from the same weights with the same
seed gives the same samples (the run's last evaluation again, from its saved model), another
seed other ones (so the check can fail).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainer_core.grpo import GrpoRun, train_grpo
from trainer_core.grpo.evaluation import GrpoEvaluation, evaluate_policy
from trainer_core.grpo.metrics import reward_metrics, window_metrics
from trainer_core.grpo.prompts import prompt_rows
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.grpo import Graded, GrpoSettings, as_graded
from trainer_core.spec.job import JobSpec

ROWS = [{"messages": [{"role": "user", "content": f"what is {i} plus {i + 2}"}],
         "answer": str(2 * i + 2)} for i in range(4)]  # fmt: skip
VALIDATION = [{"messages": [{"role": "user", "content": f"{i} minus one"}],
               "answer": str(i - 1)} for i in range(5, 10)]  # fmt: skip
SETTINGS = GrpoSettings(group_size=4, max_completion_length=10, eval_interval=2, eval_samples=3)


def spec(**changes: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
        "optim": "sgd", "learning_rate": 1.0, "max_grad_norm": 0.0, "max_steps": 4,
        "lr_scheduler_type": "constant", "validation_split_percentage": 0,
        "group_by_length": False, "max_seq_length": 128, "seed": 7, "effective_batch_size": 8,
        "per_device_train_batch_size": 8,
    }  # fmt: skip
    return JobSpec.model_validate(fields | changes)


def graded_reward(item: Any, text: str) -> Graded:
    """Two sub-graders (length, answer), their sum the reward; an empty answer is an error."""
    length, answer = min(len(text), 20) / 20, float(item["answer"] in text)
    return Graded(length + answer, {"length": length, "answer": answer},
                  {"sample_parse_error": int(not text.strip())})  # fmt: skip


def test_a_window_aggregates_by_hand() -> None:
    graded = [
        Graded(1.0, {"a": 1.0, "b": 0.0}, {"python_grader_runtime_error": 0, "other_error": 1}),
        Graded(0.0, {"a": 0.0, "b": 0.0}, {"python_grader_runtime_error": 1, "other_error": 1}),
        Graded(0.5, {"a": 0.5, "b": 1.0}, {"python_grader_runtime_error": 1, "other_error": 0}),
        Graded(0.5, {"a": 0.5}, {"python_grader_runtime_error": 0}),  # no "b": not counted in b
    ]
    record = reward_metrics(graded)
    # rewards 1, 0, .5, .5: mean .5, deviations .5 -.5 0 0 -> variance .5/4, std sqrt(.125)
    assert record["reward_mean"] == 0.5 and record["reward_std"] == pytest.approx(0.125**0.5)
    assert record["rewards/a/mean"] == 0.5 and record["rewards/a/std"] == pytest.approx(0.125**0.5)
    # b over the three that have it: 0, 0, 1: mean 1/3, variance (1/9 + 1/9 + 4/9) / 3 = 2/9
    assert record["rewards/b/mean"] == pytest.approx(1 / 3)
    assert record["rewards/b/std"] == pytest.approx((2 / 9) ** 0.5)
    assert record["grader_errors/python_grader_runtime_error"] == 2
    assert record["grader_errors/other_error"] == 2 and record["grader_errors"] == 4
    lengths = window_metrics([[1, 2, 3], [4], [5, 6], [7, 8]], [True, False, False, False], graded)
    assert lengths["completion_length"] == 2.0 and lengths["truncated_fraction"] == 0.25


def test_a_float_reward_has_no_sub_graders_nor_errors() -> None:
    record = reward_metrics([as_graded(1.0), as_graded(3.0)])
    assert record == {"reward_mean": 2.0, "reward_std": 1.0, "grader_errors": 0}


def test_evaluating_needs_validation_prompts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="eval_interval"):
        GrpoEvaluation(None, SETTINGS, graded_reward, seed=7, output_dir=tmp_path)
    never = GrpoEvaluation(None, SETTINGS.model_copy(update={"eval_interval": 0}),
                           graded_reward, seed=7, output_dir=tmp_path)  # fmt: skip
    assert not any(never.due(step) for step in range(1, 10))


def test_the_same_seed_samples_the_same_and_scores_carry() -> None:
    tokenizer = load_tokenizer(spec())
    model = load_model(spec(), tokenizer, None)
    rows = prompt_rows(VALIDATION)
    first, again, other = (evaluate_policy(model, tokenizer, rows, SETTINGS, graded_reward, seed)
                           for seed in (7, 7, 8))  # fmt: skip
    assert len(first.samples) == SETTINGS.eval_samples
    assert first.samples == again.samples and first.metrics == again.metrics
    assert [s["output"] for s in other.samples] != [s["output"] for s in first.samples]
    for row, sample in zip(rows, first.samples, strict=False):
        score = graded_reward(row.item, sample["output"])
        assert (sample["reward"], sample["sub_rewards"]) == (score.reward, score.sub_rewards)
        assert row.messages[-1]["content"] in sample["prompt"]


class Progress(TrainingCallback):
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.seen.append(progress)


PROGRESS = Progress()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[GrpoRun, Path]:
    out = tmp_path_factory.mktemp("grpo-eval")
    done = train_grpo(spec(), SETTINGS, prompt_rows(ROWS), graded_reward, out,
                      validation=prompt_rows(VALIDATION), callback=PROGRESS)  # fmt: skip
    return done, out


def test_progress_counts_epochs_over_the_prompts(run: tuple[GrpoRun, Path]) -> None:
    """4 prompts, 2 a window: windows 1-2 are epoch 1 and 3-4 epoch 2 (it said epoch 4)."""
    assert [(p["epoch"], p["step"]) for p in PROGRESS.seen] == [(1, 1), (1, 2), (2, 3), (2, 4)]


def test_each_step_reports_its_window(run: tuple[GrpoRun, Path]) -> None:
    done, _ = run
    rows, per_window = prompt_rows(ROWS), 2
    for window, (record, sampled) in enumerate(zip(done.records, done.samples, strict=True)):
        first = (window % 2) * per_window
        items = [row.item for row in rows[first : first + per_window] for _ in range(4)]
        graded = [
            graded_reward(item, text) for item, text in zip(items, sampled.texts, strict=True)
        ]
        expected = window_metrics(sampled.completion_ids, sampled.truncated, graded)
        assert {key: record[key] for key in expected} == pytest.approx(expected)
        assert "rewards/answer/std" in record and "grader_errors/sample_parse_error" in record


def test_it_evaluates_every_eval_interval_windows(run: tuple[GrpoRun, Path]) -> None:
    done, out = run
    assert [r["step"] for r in done.records] == [1, 2, 3, 4]
    assert ["eval_reward_mean" in r for r in done.records] == [False, True, False, True]
    reports = [json.loads(line) for line in (out / "evaluations.jsonl").read_text().splitlines()]
    assert [report["step"] for report in reports] == [0, 2, 4]  # 0: the starting model
    assert len(done.evaluations) == 3
    for report, record in zip(reports[1:], done.records[1::2], strict=True):
        rewards = [sample["reward"] for sample in report["samples"]]
        assert len(rewards) == SETTINGS.eval_samples
        assert record["eval_reward_mean"] == pytest.approx(sum(rewards) / len(rewards))
        assert report["scores"]["reward_mean"] == record["eval_reward_mean"]
        assert "eval_rewards/length/mean" in record and "eval_grader_errors" in record


def test_step_0_evaluates_the_starting_model(run: tuple[GrpoRun, Path]) -> None:
    """The baseline: the model before any window, on the same prompts under the same seeds."""
    done, _ = run
    tokenizer = load_tokenizer(spec())
    model = load_model(spec(), tokenizer, None)
    before = evaluate_policy(model, tokenizer, prompt_rows(VALIDATION), SETTINGS, graded_reward, 7)
    assert done.evaluations[0].samples == before.samples


def test_step_0_is_graded_before_the_first_window(tmp_path: Path) -> None:
    """The order the reward is called in: step 0's validation prompts, the window, the
    evaluation after it (the answers tell them apart)."""
    graded: list[str] = []

    def reward(item: Any, text: str) -> Graded:
        graded.append(item["answer"])
        return graded_reward(item, text)

    settings = SETTINGS.model_copy(update={"eval_interval": 1})
    train_grpo(spec(max_steps=1), settings, prompt_rows(ROWS), reward, tmp_path,
               validation=prompt_rows(VALIDATION))  # fmt: skip
    evaluated = ["4", "5", "6"]  # the first eval_samples validation answers
    assert graded == [*evaluated, *["2"] * 4, *["4"] * 4, *evaluated]


def test_the_last_evaluation_samples_again_from_the_saved_model(
    run: tuple[GrpoRun, Path],
) -> None:
    done, _ = run
    assert done.model_dir is not None
    tokenizer = load_tokenizer(spec())
    model = load_model(spec(model=str(done.model_dir)), tokenizer, None)
    again = evaluate_policy(model, tokenizer, prompt_rows(VALIDATION), SETTINGS, graded_reward, 7)
    assert again.samples == done.evaluations[-1].samples
