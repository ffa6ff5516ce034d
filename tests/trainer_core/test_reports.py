"""Evaluation reports: the classification figures against a direct count, samples equal to the
saved final model's own greedy continuation of each prompt, training untouched by them, the
time budget's rule, and a resumed run's lines replaced rather than doubled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainer_core.helpers import CAUSAL, CHAT, CLASSIFICATION, final_weights, max_abs_diff
from trainer_core.data.load import load_job_data
from trainer_core.loop.reports import SampleBudget, classification_report
from trainer_core.loop.step_lines import StepLines
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

SMALL = {"num_train_epochs": 2, "max_train_samples": 48, "max_eval_samples": 12,
         "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
         "learning_rate": 5e-3, "seed": 5}  # fmt: skip


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "evaluations.jsonl").read_text().splitlines()]


def test_classification_report_counts() -> None:
    predicted = [0, 1, 1, 2, 2, 2, 0]
    labels = [0, 1, 2, 2, 2, 0, 1]
    report = classification_report(predicted, labels, ["a", "b", "c"])
    assert report["confusion_matrix"] == [[1, 0, 1], [1, 1, 0], [0, 1, 2]]
    c = report["per_class"]["c"]  # predicted c 3 times, 2 right; 3 true c, 2 found
    assert c["precision"] == pytest.approx(2 / 3) and c["recall"] == pytest.approx(2 / 3)
    assert c["support"] == 3 and c["f1"] == pytest.approx(2 / 3)
    assert report["per_class"]["a"]["precision"] == pytest.approx(1 / 2)


def test_a_classifier_reports_each_evaluation(tmp_path: Path) -> None:
    spec = JobSpec(**CLASSIFICATION, **SMALL)
    result = train(spec, tmp_path)
    lines = _lines(tmp_path)
    assert [line["step"] for line in lines] == [6, 12]
    last = lines[-1]
    matrix = last["classification"]["confusion_matrix"]
    assert sum(map(sum, matrix)) == 12  # every eval row, once
    accuracy = sum(matrix[i][i] for i in range(len(matrix))) / 12
    assert accuracy == pytest.approx(result.metrics[-1]["eval_accuracy"])
    wrong = 12 - sum(matrix[i][i] for i in range(len(matrix)))
    assert len(last["misclassified"]) == min(4, wrong)
    for row in last["misclassified"]:
        assert row["label"] != row["predicted"] and row["text"]


@pytest.mark.parametrize("task", ["causal", "chat"])
def test_samples_are_the_final_models_greedy_continuations(tmp_path: Path, task: str) -> None:
    spec = JobSpec(**(CAUSAL if task == "causal" else CHAT), **SMALL, eval_sample_max_new_tokens=12)
    train(spec, tmp_path)
    samples = _lines(tmp_path)[-1]["samples"]  # the last evaluation always has them
    assert len(samples) == 4
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    for sample in samples:
        ids = tokenizer(sample["prompt"], add_special_tokens=False, return_tensors="pt").input_ids
        expected = [int(t) for t in data.eval.input_ids[sample["row"]]][: ids.shape[1]]
        assert ids[0].tolist() == expected  # the prompt is the row's head
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=12, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)  # fmt: skip
        new = out[0, ids.shape[1] :].tolist()
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id)]
        assert sample["output"] == tokenizer.decode(new, skip_special_tokens=True)
        assert sample["reference"]


def test_reports_leave_training_unchanged(tmp_path: Path) -> None:
    spec = JobSpec(**CAUSAL, **SMALL)
    train(spec, tmp_path / "on")
    train(spec.model_copy(update={"eval_sample_count": 0}), tmp_path / "off")
    assert max_abs_diff(final_weights(tmp_path / "on"), final_weights(tmp_path / "off")) == 0.0
    assert _lines(tmp_path / "off")[-1]["samples"] == []


def test_the_sample_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("trainer_core.loop.reports.time.perf_counter", lambda: now[0])
    budget = SampleBudget(share=0.05)
    assert budget.allows(final=False)  # the first: nothing measured yet
    budget.spend(1.0)
    now[0] += 10  # 5 % of 10 s is 0.5 s: 1 s spent, another 1 s would be 2 s
    assert not budget.allows(final=False)
    assert budget.allows(final=True)  # the last evaluation always
    now[0] += 30  # 5 % of 40 s = 2 s >= 1 + 1
    assert budget.allows(final=False)


def test_a_resumed_run_replaces_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "evaluations.jsonl"
    first = StepLines(path)
    for step in (2, 4, 6):
        first.append({"step": step, "run": 1})
    resumed = StepLines(path)  # from a checkpoint at step 4
    resumed.append({"step": 6, "run": 2})
    resumed.append({"step": 8, "run": 2})
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["step"], x["run"]) for x in lines] == [(2, 1), (4, 1), (6, 2), (8, 2)]
