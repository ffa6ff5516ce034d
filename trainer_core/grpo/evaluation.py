"""A GRPO run's evaluation: every ``eval_interval`` windows, the first ``eval_samples``
validation prompts are sampled once each from the policy as it stands and graded by the run's
reward (OpenAI's reinforcement ``eval_interval`` / ``eval_samples``).

Sampling is the windows' (``sampling.sample_window``: the run's temperature and
``max_completion_length``, the model in eval mode, the global generator forked), one completion
per prompt, in chunks of ``EVAL_CHUNK`` prompts, chunk c in one left-padded ``generate`` seeded
with ``window_seed(seed, EVAL_STREAM + c)``: seeds of the evaluation's own, the same at every
evaluation, so two evaluations differ only by the policy, and the samples are a function of the
seed, the prompts and the weights, never of b, K or the ranks. With W ranks each samples and
grades a contiguous share of the chunks (so a grader is called once per sample, not W times),
one all-gather gives every rank the whole evaluation in chunk order, and rank 0 writes it; with
fewer chunks than ranks (up to 16 prompts: one chunk) rank 0 evaluates alone while the others
wait in the all-gather.

The starting model is evaluated too, as step 0 (``before_training``, called as the first window
is sampled, so a resumed run does not repeat it): the baseline of the later evaluations.
Each evaluation after a window gives the step record its keys with the prefix ``eval_`` (``grpo_metrics``) and
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

from trainer_core.distributed import SINGLE, World, gather_lists, shard
from trainer_core.grpo.metrics import prefixed, window_metrics
from trainer_core.grpo.prompts import PromptRow, encode_prompt
from trainer_core.grpo.sampling import Sampled, sample_window, window_seed
from trainer_core.loop.step_lines import StepLines
from trainer_core.spec.grpo import Graded, GrpoSettings, Reward, as_graded
from trainer_core.spec.outputs import EVALUATIONS_FILE

EVAL_STREAM = 500_000  # window indices from here on are the evaluation's (a window is < this)
EVAL_CHUNK = 16  # prompts per generate call (and per rank's share); fixed: it moves no sample


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
    return {
        "prompt": prompt,
        "output": output,
        "reward": graded.reward,
        "sub_rewards": dict(graded.sub_rewards),
        "truncated": truncated,
        "errors": [kind for kind, count in graded.errors.items() if count],
    }


def _chunk(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[PromptRow],
    settings: GrpoSettings,
    reward: Reward,
    seed: int,
) -> tuple[Sampled, list[Graded]]:
    encoded = [encode_prompt(tokenizer, row) for row in rows]
    sampled = sample_window(model, tokenizer, encoded, settings, seed)
    scores = [
        as_graded(reward(row.item, text)) for row, text in zip(rows, sampled.texts, strict=True)
    ]
    return sampled, scores


def evaluate_policy(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[PromptRow],
    settings: GrpoSettings,
    reward: Reward,
    seed: int,
    world: World = SINGLE,
) -> Evaluated:
    """Sample the first ``eval_samples`` prompts once each from ``model`` and grade them; with
    ranks, each samples and grades a contiguous share of the chunks and all get the whole."""
    rows = list(prompts[: settings.eval_samples])
    chunks = [rows[start : start + EVAL_CHUNK] for start in range(0, len(rows), EVAL_CHUNK)]
    one = settings.model_copy(update={"group_size": 1})  # one completion per prompt
    mine = [
        _chunk(model, tokenizer, chunks[c], one, reward, window_seed(seed, EVAL_STREAM + c))
        for c in shard(list(range(len(chunks))), world)
    ]
    parts: list[tuple[Sampled, list[Graded]]] = gather_lists(mine, world)  # in chunk order
    prompt_ids = [ids for part, _ in parts for ids in part.prompt_ids]
    completions = [ids for part, _ in parts for ids in part.completion_ids]
    truncated = [cut for part, _ in parts for cut in part.truncated]
    texts = [text for part, _ in parts for text in part.texts]
    graded = [score for _, scores in parts for score in scores]
    samples = [
        _sample_row(_decoded(tokenizer, ids), text, cut, score)
        for ids, text, cut, score in zip(prompt_ids, texts, truncated, graded, strict=True)
    ]
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
        world: World = SINGLE,
    ) -> None:
        if settings.eval_interval and not validation:
            raise ValueError("eval_interval: evaluating needs validation prompts, none were given")
        self.validation, self.settings, self.reward, self.seed = validation, settings, reward, seed
        self.world = world
        if world.is_main:  # rank 0 writes the reports
            output_dir.mkdir(parents=True, exist_ok=True)
        self.reports = StepLines(output_dir / EVALUATIONS_FILE, enabled=world.is_main)
        self.evaluations: list[Evaluated] = []

    def due(self, step: int) -> bool:
        interval = self.settings.eval_interval
        return bool(interval) and step % interval == 0

    def before_training(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> None:
        """With ``eval_interval``, evaluate the starting model as step 0 (written to
        ``evaluations.jsonl``, no step record): the baseline the later evaluations compare with,
        on the same prompts under the same seeds."""
        if self.settings.eval_interval:
            self.after_step(0, model, tokenizer)

    def after_step(
        self, step: int, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
    ) -> dict[str, Any]:
        if not self.due(step) or not self.validation:
            return {}
        done = evaluate_policy(
            model, tokenizer, self.validation, self.settings, self.reward, self.seed, self.world
        )
        self.evaluations.append(done)
        self.reports.append({"step": step, "scores": done.metrics, "samples": done.samples})
        return prefixed(done.metrics)
