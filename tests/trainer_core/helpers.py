"""Shared helpers for the core tests: run a job, read its weights, compare to the tolerance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from trainer_core.accumulation import MicroBatch
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.callbacks import TrainResult
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

Weights = dict[str, torch.Tensor]

CLASSIFICATION = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
CAUSAL = {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories", "task": "causal-lm"}
# Conversations: system prompts, several turns, some assistant turns of weight 0.
CHAT = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm"}

# 101 rows: not a multiple of b*K = 16, so every epoch ends in a partial window (2 of 4 micro-
# batches) whose last micro-batch is ragged (1 row). Clipping at 0.5 fires (see test_clipping).
EQUIVALENCE = {
    "num_train_epochs": 2,
    "max_train_samples": 101,
    "max_eval_samples": 16,
    "learning_rate": 5e-3,
    "max_grad_norm": 0.5,
    "seed": 7,
}


def make_spec(task: dict[str, Any], **overrides: Any) -> JobSpec:
    return JobSpec(**{**task, **EQUIVALENCE, **overrides})


def run(spec: JobSpec, out: Path, **kwargs: Any) -> TrainResult:
    return train(spec, out, **kwargs)


def final_weights(out: Path) -> Weights:
    return load_file(str(out / "model" / "model.safetensors"))


def initial_weights(spec: JobSpec) -> Weights:
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, data.label_names)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def max_abs_diff(a: Weights, b: Weights) -> float:
    assert a.keys() <= b.keys() or b.keys() <= a.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a.keys() & b.keys())


def tolerance(initial: Weights, final: Weights) -> float:
    """The issue's bar: max |ΔW| <= 1e-3 x max |W_final - W_initial|."""
    return 1e-3 * max_abs_diff(initial, final)


def reference_plan(
    order: list[int], items: list[int] | Any, batch_size: int, accumulation: int
) -> list[MicroBatch]:
    """The epoch plan written the plain way (lists, no numpy): what ``data.plan.EpochIndex``
    must equal, micro-batch for micro-batch."""
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    plan: list[MicroBatch] = []
    for window, start in enumerate(range(0, len(chunks), accumulation)):
        members = chunks[start : start + accumulation]
        n_items = sum(int(items[row]) for chunk in members for row in chunk)
        for position, rows in enumerate(members):
            plan.append(MicroBatch(rows, window, n_items, position == len(members) - 1))
    return plan


def prompt_completion_file(folder: Path, rows: int = 300) -> Path:
    """A prompt-completion JSONL made of the chat data's first turns: a question, its answer."""
    from trainer_core.builtin.chat_corpus import chat_arithmetic

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prompt-completion.jsonl"
    lines = []
    for conversation in chat_arithmetic("train")["messages"][:rows]:
        assert isinstance(conversation, list)
        user = next(m["content"] for m in conversation if m["role"] == "user")
        answer = next(m["content"] for m in conversation if m["role"] == "assistant")
        lines.append(json.dumps({"prompt": f"Q: {user}\nA:", "completion": f" {answer}"}))
    path.write_text("\n".join(lines) + "\n")
    return path
