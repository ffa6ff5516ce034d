"""A GRPO run over a prompt dataset: per optimizer window, sample, grade, train.

Each window takes the next ``effective_batch_size / group_size`` prompts, samples their groups
once from the policy as it stands (``sampling``), scores each completion with the injected
``reward(item, text)``, centres the rewards per group (``group_advantages``) and trains the
window's fixed rollouts with ``train(..., rollouts=...)`` in the job's backend, b and K. The next
window samples from the weights that step left.

Each window is one ``train`` call that starts from the previous window's saved model, so the
optimizer's state (Adam's moments) and the learning-rate schedule do not carry from one window
to the next: exact for plain SGD, a restart for the others. Carrying them is not built yet.

Example:
    >>> spec = JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic",
    ...                task="causal-lm", per_device_train_batch_size=4,
    ...                effective_batch_size=8, max_steps=2)
    >>> rows = prompt_rows([{"messages": [{"role": "user", "content": "2 plus 2"}],
    ...                      "answer": "4"}] * 4)
    >>> run = train_grpo(spec, GrpoSettings(group_size=4), rows,
    ...                  lambda item, text: float(item["answer"] in text), "runs/grpo")  # doctest: +SKIP
    >>> run.records[-1]["reward_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer_core.data.prompts import PromptRow, encode_prompt
from trainer_core.data.rollouts import Rollouts, group_advantages, rollout_split
from trainer_core.distributed import launched_world
from trainer_core.loop.build import resolve_device
from trainer_core.loop.sampling import Sampled, old_logps, sample_window, window_seed
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.callbacks import NULL_CALLBACK, TrainingCallback
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import MODEL_DIR
from trainer_core.train import train

Reward = Callable[[Mapping[str, Any], str], float]
# What each window's epoch record carries over into the GRPO step record (the loss emits them).
LOSS_METRICS = ("train_loss", "clip_ratio", "kl")


@dataclass
class GrpoRun:
    """Per window: what was sampled (``samples``) and the step record (``records``)."""

    samples: list[Sampled] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    model_dir: Path | None = None


def window_count(spec: JobSpec, prompts: int, per_window: int) -> int:
    """``max_steps`` windows, else every whole window of prompts each epoch."""
    if per_window > prompts:
        raise ValueError(f"effective_batch_size: a window needs {per_window} prompts, the data "
                         f"holds {prompts}")  # fmt: skip
    return spec.max_steps or spec.num_train_epochs * (prompts // per_window)


def window_prompts(rows: Sequence[PromptRow], window: int, per_window: int) -> list[PromptRow]:
    """The window's prompts, in order, cycling through the data (whole windows only)."""
    start = (window % (len(rows) // per_window)) * per_window
    return list(rows[start : start + per_window])


def _policy(spec: JobSpec, source: str) -> torch.nn.Module:
    model: torch.nn.Module = load_model(spec.model_copy(update={"model": source}),
                                        load_tokenizer(spec), None)  # fmt: skip
    device = resolve_device(spec)  # the job's device; with ranks, this rank's GPU
    if device.type == "cuda":
        device = torch.device("cuda", launched_world().local_rank)
    return model.to(device)


def _sample(spec: JobSpec, source: str, prompts: list[PromptRow], settings: GrpoSettings,
            window: int) -> Sampled:  # fmt: skip
    tokenizer = load_tokenizer(spec)
    policy = _policy(spec, source)
    encoded = [encode_prompt(tokenizer, row) for row in prompts]
    return sample_window(policy, tokenizer, encoded, settings, window_seed(spec.seed, window))


def _record(window: int, sampled: Sampled, rewards: list[float],
            epoch_record: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The step's metrics: the rewards' mean and std, the sampled lengths (truncated ones
    included) and the share cut, and the loss's own (clip fraction, KL, the objective)."""
    values = np.asarray(rewards, dtype=np.float64)
    loss = {key: epoch_record[key] for key in LOSS_METRICS if key in epoch_record}
    return loss | {"step": window + 1, "reward_mean": float(values.mean()),
                   "reward_std": float(values.std()),
                   "completion_length": float(np.mean([len(c) for c in sampled.completion_ids])),
                   "truncated_fraction": float(np.mean(sampled.truncated))}  # fmt: skip


def _rollouts(
    spec: JobSpec, source: str, rows: list[PromptRow], settings: GrpoSettings, window: int,
    reward: Reward, reference: torch.nn.Module | None,
) -> tuple[Sampled, list[float], Rollouts]:  # fmt: skip
    """The window's completions, their rewards, and the rollouts the backward trains."""
    sampled = _sample(spec, source, rows, settings, window)
    items = [row.item for row in rows for _ in range(settings.group_size)]
    rewards = [float(reward(item, text)) for item, text in zip(items, sampled.texts, strict=True)]
    advantages = group_advantages(rewards, settings.group_size, settings.scale_rewards)
    ref = None if reference is None else old_logps(reference, sampled.prompt_ids,
                                                   sampled.completion_ids)  # fmt: skip
    return sampled, rewards, Rollouts(sampled.prompt_ids, sampled.completion_ids,
                                      sampled.truncated, sampled.old_logps,
                                      advantages.tolist(), ref)  # fmt: skip


def train_grpo(
    spec: JobSpec,
    settings: GrpoSettings,
    prompts: Sequence[PromptRow],
    reward: Reward,
    output_dir: Path | str,
    *,
    callback: TrainingCallback = NULL_CALLBACK,
) -> GrpoRun:
    """Sample, grade and train window after window; see the module docstring."""
    assert spec.effective_batch_size is not None  # resolved by the spec
    per_window = settings.prompts_per_window(spec.effective_batch_size)
    output_dir, run, source = Path(output_dir), GrpoRun(), spec.model
    # β > 0: the KL is to the starting model (as DPO's reference), frozen for the whole run.
    reference = _policy(spec, spec.model).train(False) if settings.beta else None
    for window in range(window_count(spec, len(prompts), per_window)):
        rows = window_prompts(prompts, window, per_window)
        sampled, rewards, rollouts = _rollouts(
            spec, source, rows, settings, window, reward, reference
        )
        out = output_dir / f"window-{window}"
        result = train(spec.model_copy(update={"model": source, "max_steps": 1}), out,
                       resume=False, rollouts=rollout_split(rollouts, settings))  # fmt: skip
        if result.status != "completed":
            raise RuntimeError(f"window {window}: training ended {result.status}")
        run.samples.append(sampled)
        run.records.append(_record(window, sampled, rewards, result.metrics[-1]))
        callback.on_step_metrics(run.records[-1])
        source = str(out / MODEL_DIR)
        run.model_dir = out / MODEL_DIR
    return run
