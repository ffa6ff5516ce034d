"""A GRPO run's windows, sampled from the live policy: the ``WindowSource`` its one training run
asks for window w's rollouts when window w's first micro-batch is built (``data.grpo``).

Window w takes the next ``effective_batch_size / group_size`` prompts (cycling through the data,
a whole window at a time). Its groups are cut into fixed chunks of ``groups_per_call()`` groups;
each of the W ranks samples a contiguous share of the chunks (``distributed.shard``), chunk c
under the generator seed ``group_seed(seed, w, c)``, one ``generate`` per chunk
(``sampling.sample_chunks``), so a chunk's completions do not depend on W (a rank may get no
chunk when the window has fewer chunks than ranks). The rank grades its own completions and, with a KL term, takes its reference
log-probs; then one all-gather (``gather_lists``) hands every rank the whole window, in group
order, before the window's first backward: the advantages (centred per group) and the plan's
counts (N_W) are the window's on every rank, exactly as if one process had sampled it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.data.grpo import Rollouts, RolloutSplit, group_advantages, rollout_split
from trainer_core.distributed import World, gather_lists, shard
from trainer_core.grpo.prompts import PromptRow, encode_prompt
from trainer_core.grpo.sampling import Sampled, group_seed, joined, old_logps, sample_chunks
from trainer_core.spec.grpo import GrpoSettings

# reward(item, text): a float, or an object whose ``reward`` is one (a grader's ``Graded``).
Reward = Callable[[Mapping[str, Any], str], Any]


def reward_value(scored: Any) -> float:
    """What trains: a plain float reward, or the ``reward`` of a richer result."""
    return float(getattr(scored, "reward", scored))


@dataclass(frozen=True)
class WindowSamples:
    """What a window sampled (every rank's, in group order), the reward callable's results for
    each completion, and how many completions this process generated itself."""

    sampled: Sampled
    scores: list[Any]
    generated: int

    @property
    def rewards(self) -> list[float]:
        return [reward_value(score) for score in self.scores]


def window_prompts(rows: Sequence[PromptRow], window: int, per_window: int) -> list[PromptRow]:
    """The window's prompts, in order, cycling through the data (whole windows only)."""
    start = (window % (len(rows) // per_window)) * per_window
    return list(rows[start : start + per_window])


class PolicyWindows:
    """The ``WindowSource`` of a GRPO run; ``done`` keeps what each window sampled."""

    def __init__(
        self,
        *,
        seed: int,
        settings: GrpoSettings,
        prompts: Sequence[PromptRow],
        tokenizer: PreTrainedTokenizerBase,
        reward: Reward,
        per_window: int,
        world: World,
        reference: torch.nn.Module | None = None,
        before_first: Callable[[torch.nn.Module], None] | None = None,
    ) -> None:
        self.seed, self.settings, self.prompts, self.tokenizer = seed, settings, prompts, tokenizer
        self.reward, self.per_window, self.world = reward, per_window, world
        self.reference, self.before_first = reference, before_first
        self.done: dict[int, WindowSamples] = {}
        self.model: torch.nn.Module | None = None  # the live policy, as last handed over
        self._last: tuple[int, RolloutSplit] | None = None

    def window(self, index: int, model: torch.nn.Module) -> RolloutSplit:
        """Window ``index``'s rollouts from ``model`` as it stands. Asked again for the same
        window (a re-plan restarts it from its checkpoint: the same weights), the same ones."""
        self.model = model
        if self._last is not None and self._last[0] == index:
            return self._last[1]
        if index == 0 and self.before_first is not None:  # the starting policy (a baseline)
            self.before_first(model)
        rows = window_prompts(self.prompts, index, self.per_window)
        size = self.settings.groups_per_call()
        chunks = [
            list(range(start, min(start + size, self.per_window)))
            for start in range(0, self.per_window, size)
        ]
        my_chunks = shard(list(range(len(chunks))), self.world)  # whole chunks, contiguous
        mine = [g for c in my_chunks for g in chunks[c]]
        prompts = [[encode_prompt(self.tokenizer, rows[g]) for g in chunks[c]] for c in my_chunks]
        sampled = sample_chunks(
            model,
            self.tokenizer,
            prompts,
            self.settings,
            [group_seed(self.seed, index, c) for c in my_chunks],
        )
        items = [rows[g].item for g in mine for _ in range(self.settings.group_size)]
        scores = [self.reward(item, text) for item, text in zip(items, sampled.texts, strict=True)]
        ref = self._reference_logps(sampled)
        # The window's whole rollouts on every rank, in group order (ranks' shares in order).
        parts: list[tuple[Sampled, list[Any], list[list[float]] | None]]
        parts = gather_lists([(sampled, scores, ref)], self.world)
        window = WindowSamples(
            joined([p[0] for p in parts]), [s for p in parts for s in p[1]], len(sampled.texts)
        )
        refs = None if ref is None else [r for p in parts for r in (p[2] or [])]
        split = self._split(window, refs)
        self.done[index], self._last = window, (index, split)
        return split

    def _reference_logps(self, sampled: Sampled) -> list[list[float]] | None:
        if self.reference is None:
            return None
        if not sampled.completion_ids:  # a rank without a group (fewer groups than ranks)
            return []
        return old_logps(self.reference, sampled.prompt_ids, sampled.completion_ids)

    def _split(self, window: WindowSamples, refs: list[list[float]] | None) -> RolloutSplit:
        settings, sampled = self.settings, window.sampled
        advantages = group_advantages(window.rewards, settings.group_size, settings.scale_rewards)
        rollouts = Rollouts(
            sampled.prompt_ids,
            sampled.completion_ids,
            sampled.truncated,
            sampled.old_logps,
            advantages.tolist(),
            refs,
        )
        return rollout_split(rollouts, settings)


def window_shape(
    prompts: Sequence[PromptRow],
    tokenizer: PreTrainedTokenizerBase,
    settings: GrpoSettings,
    completions: int,
) -> RolloutSplit:
    """``completions`` rows as long as a window's can be (the longest prompt and a full budget of
    tokens): the run's counts, and what ``per_device_train_batch_size: auto`` probes."""
    longest = max((encode_prompt(tokenizer, row) for row in prompts), key=len)
    budget = settings.max_completion_length
    eos = int(tokenizer.eos_token_id)
    rows = Rollouts(
        [longest] * completions,
        [[eos] * budget] * completions,
        [False] * completions,
        [[0.0] * budget] * completions,
        [0.0] * completions,
        [[0.0] * budget] * completions if settings.beta else None,
    )
    return rollout_split(rows, settings)
