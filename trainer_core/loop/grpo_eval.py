"""A GRPO run's evaluation: every ``eval_interval`` windows, the first ``eval_samples``
validation prompts are sampled once each from the policy as it stands and graded by the run's
reward (OpenAI's reinforcement ``eval_interval`` / ``eval_samples``).

Sampling is the windows' (``sampling.sample_window``: the run's temperature and
``max_completion_length``, the model in eval mode, the global generator forked), one completion
per prompt, in chunks of ``EVAL_CHUNK`` prompts, chunk c seeded with
``window_seed(seed, EVAL_STREAM + c)``: a stream no training window reaches (they count from 0),
the same at every evaluation, so two evaluations differ only by the policy, and the samples are
a function of the seed, the prompts and the weights, never of b, K or the ranks. Every rank
evaluates the same prompts (the same seed and weights give the same samples); rank 0 writes the
report.

Each evaluation gives the step record its keys with the prefix ``eval_`` (``grpo_metrics``) and
writes one line to ``evaluations.jsonl``: ``{"step", "scores", "samples"}``, each sample with its
prompt, output, reward, sub_rewards, the error kinds it hit and whether it was truncated.

Example:
    >>> evaluation = GrpoEvaluation(rows, settings, reward, seed=7, output_dir=out)  # doctest: +SKIP
    >>> evaluation.after_step(4, policy, tokenizer)  # doctest: +SKIP
    {'eval_reward_mean': 0.5, ...}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.data.prompts import PromptRow, encode_prompt
from trainer_core.loop.grpo_metrics import prefixed, window_metrics
from trainer_core.loop.sampling import sample_window, window_seed
from trainer_core.loop.step_lines import StepLines
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.outputs import EVALUATIONS_FILE
from trainer_core.spec.rewards import Graded, Reward, as_graded

EVAL_STREAM = 500_000  # window indices from here on are the evaluation's (a window is < this)
EVAL_CHUNK = 64  # prompts per generate call: bounds the memory, fixed so it moves no sample


@dataclass
class Evaluated:
    """One evaluation: the metrics (unprefixed) and the samples with their scores."""

    metrics: dict[str, float | int]
    samples: list[dict[str, Any]] = field(default_factory=list)


def _decoded(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    text = tokenizer.decode(ids)  # special tokens kept: the prompt as the model saw it
    assert isinstance(text, str)
    return text


def _sample_row(prompt: str, output: str, truncated: bool, graded: Graded) -> dict[str, Any]:
    return {"prompt": prompt, "output": output, "reward": graded.reward,
            "sub_rewards": dict(graded.sub_rewards), "truncated": truncated,
            "errors": [kind for kind, count in graded.errors.items() if count]}  # fmt: skip


def evaluate_policy(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[PromptRow],
    settings: GrpoSettings,
    reward: Reward,
    seed: int,
) -> Evaluated:
    """Sample the first ``eval_samples`` prompts once each from ``model`` and grade them."""
    rows = list(prompts[: settings.eval_samples])
    one = settings.model_copy(update={"group_size": 1})  # one completion per prompt
    completions: list[list[int]] = []
    truncated: list[bool] = []
    graded: list[Graded] = []
    samples: list[dict[str, Any]] = []
    for chunk, start in enumerate(range(0, len(rows), EVAL_CHUNK)):
        part = rows[start : start + EVAL_CHUNK]
        encoded = [encode_prompt(tokenizer, row) for row in part]
        sampled = sample_window(model, tokenizer, encoded, one,
                                window_seed(seed, EVAL_STREAM + chunk))  # fmt: skip
        scores = [as_graded(reward(row.item, text))
                  for row, text in zip(part, sampled.texts, strict=True)]  # fmt: skip
        completions += sampled.completion_ids
        truncated += sampled.truncated
        graded += scores
        samples += [_sample_row(_decoded(tokenizer, ids), text, cut, score)
                    for ids, text, cut, score in zip(sampled.prompt_ids, sampled.texts,
                                                     sampled.truncated, scores, strict=True)]  # fmt: skip
    return Evaluated(window_metrics(completions, truncated, graded), samples)


class GrpoEvaluation:
    """The run's evaluations: ``after_step`` evaluates when ``step`` is a multiple of
    ``eval_interval`` and returns the step record's ``eval_`` keys (else nothing)."""

    def __init__(
        self,
        validation: Sequence[PromptRow] | None,
        settings: GrpoSettings,
        reward: Reward,
        *,
        seed: int,
        output_dir: Path,
        writes: bool = True,
    ) -> None:
        if settings.eval_interval and not validation:
            raise ValueError("eval_interval: evaluating needs validation prompts, none were given")
        self.validation, self.settings, self.reward, self.seed = validation, settings, reward, seed
        if writes:
            output_dir.mkdir(parents=True, exist_ok=True)
        self.reports = StepLines(output_dir / EVALUATIONS_FILE, enabled=writes)
        self.evaluations: list[Evaluated] = []

    def due(self, step: int) -> bool:
        interval = self.settings.eval_interval
        return bool(interval) and step % interval == 0

    def after_step(
        self, step: int, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
    ) -> dict[str, Any]:
        if not self.due(step) or not self.validation:
            return {}
        done = evaluate_policy(model, tokenizer, self.validation, self.settings, self.reward,
                               self.seed)  # fmt: skip
        self.evaluations.append(done)
        self.reports.append({"step": step, "scores": done.metrics, "samples": done.samples})
        return prefixed(done.metrics)
