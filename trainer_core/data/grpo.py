"""A window's fixed rollouts as rows the epoch plan can cut, and their micro-batches.

Rollouts are sampled once for the whole window, before its micro-batches: prompt and completion
ids, whether each completion was truncated (cut at the sampling budget, no EOS), the log-prob each
token was sampled with (old), the reference's when there is a KL term, and the advantages, fixed
before the backward (``group_advantages``). So b, K, the ranks and a re-plan change only how the
backward is cut, never what is trained; the micro-batch counts completions and may cut a group.

A row is prompt + completion. What it trains is its completion's tokens, minus any the caller
masked (tool output) and, with ``mask_truncated_completions``, all of a truncated completion's
(after the causal shift every completion token is predicted from the one before it). Its item
count is what its loss type divides by (``accumulation``, "Rollouts"): its trained tokens for
dapo; 1 for grpo and max_completion_length for dr_grpo when it trains anything, else 0.

A GRPO run trains window after window in one run (``RolloutStream``): its plan's epoch e is
window e, whose rollouts the plan asks its ``WindowSource`` for when the epoch's first
micro-batch is built, that is after the previous window's optimizer step, from the live model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from trainer_core.accumulation import MicroBatch, collate
from trainer_core.data.loader import EpochPlan
from trainer_core.data.plan import EpochIndex, micro_batches_per_epoch
from trainer_core.data.splits import TokenizedSplit
from trainer_core.spec.grpo import PolicyLoss


def group_advantages(rewards: Sequence[float], group_size: int, scale: bool) -> np.ndarray:
    """Each completion's reward minus its group's mean (a group: ``group_size`` consecutive
    completions of one prompt), divided by the group's std when ``scale`` (+1e-4, as TRL). A
    group whose rewards are all equal gets zeros: it carries no policy gradient."""
    grouped = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    centred = grouped - grouped.mean(axis=1, keepdims=True)
    if scale:
        centred = centred / (grouped.std(axis=1, ddof=1, keepdims=True) + 1e-4)
    advantages: np.ndarray = centred.reshape(-1).astype(np.float32)
    return advantages


@dataclass(frozen=True)
class Rollouts:
    """What sampling and grading hand the trainer for one window, one entry per completion."""

    prompt_ids: Sequence[Sequence[int]]
    completion_ids: Sequence[Sequence[int]]
    truncated: Sequence[bool]
    old_logps: Sequence[Sequence[float]]  # per completion token
    advantages: Sequence[float]
    ref_logps: Sequence[Sequence[float]] | None = None  # per completion token, for the KL term
    completion_mask: Sequence[Sequence[int]] | None = None  # 0: a token that carries no loss


@dataclass(frozen=True)
class RolloutSplit(TokenizedSplit):
    """Rows prompt + completion (``input_ids``, ``loss_mask``), ``items`` per the loss type."""

    loss: PolicyLoss = field(default_factory=PolicyLoss)
    prompt_lengths: Sequence[int] = ()
    lengths: Sequence[int] = ()  # sampled completion tokens, truncated ones included
    trained: Sequence[int] = ()  # tokens that carry loss
    old_logps: Sequence[Sequence[float]] = ()
    ref_logps: Sequence[Sequence[float]] | None = None
    advantages: Sequence[float] = ()


def _trained_mask(rollouts: Rollouts, i: int, loss: PolicyLoss) -> list[int]:
    """1 on each token of completion i that carries loss."""
    length = len(rollouts.completion_ids[i])
    if rollouts.truncated[i] and loss.mask_truncated_completions:
        return [0] * length
    return list(rollouts.completion_mask[i]) if rollouts.completion_mask else [1] * length


def rollout_split(rollouts: Rollouts, loss: PolicyLoss) -> RolloutSplit:
    """The window's rows, each with its trained tokens and its loss type's item count."""
    if any(len(prompt) == 0 for prompt in rollouts.prompt_ids):
        raise ValueError("a rollout's prompt must hold a token: it predicts the first one")
    masks = [_trained_mask(rollouts, i, loss) for i in range(len(rollouts.completion_ids))]
    trained = [sum(mask) for mask in masks]
    unit = {"dapo": None, "grpo": 1, "dr_grpo": loss.max_completion_length}[loss.loss_type]
    items = [t if unit is None else (unit if t else 0) for t in trained]
    prompts, completions = rollouts.prompt_ids, rollouts.completion_ids
    return RolloutSplit(
        [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)],
        None,
        items,
        [[0] * len(p) + m for p, m in zip(prompts, masks, strict=True)],
        loss=loss,
        prompt_lengths=[len(p) for p in prompts],
        lengths=[len(c) for c in completions],
        trained=trained,
        old_logps=rollouts.old_logps,
        ref_logps=rollouts.ref_logps,
        advantages=rollouts.advantages,
    )


def _shifted(
    split: RolloutSplit, rows: list[int], values: Sequence[Sequence[float]], width: int
) -> torch.Tensor:
    """Per-token values placed where the causal shift predicts each completion token: column
    p - 1 holds the value of the token at position p. 0 elsewhere."""
    out = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    for i, row in enumerate(rows):
        start = split.prompt_lengths[row] - 1
        out[i, start : start + split.lengths[row]] = torch.as_tensor(values[row])
    return out


def collate_rollouts(split: RolloutSplit, rows: list[int], pad_id: int) -> dict[str, Any]:
    """One micro-batch of completions, right-padded, with what the policy loss reads."""
    batch = collate(split.input_ids, None, MicroBatch(rows, 0, 0, True), pad_id, split.loss_mask)
    width = batch["input_ids"].shape[1]
    trained = torch.tensor([split.trained[r] for r in rows], dtype=torch.float32)
    per_token = split.loss.loss_type == "grpo"  # each completion's token mean
    batch |= {
        "old_logps": _shifted(split, rows, split.old_logps, width),
        "advantages": torch.tensor([split.advantages[r] for r in rows], dtype=torch.float32),
        "row_weight": 1 / trained.clamp(min=1) if per_token else torch.ones(len(rows)),
        "completion_lengths": torch.tensor([split.lengths[r] for r in rows], dtype=torch.float32),
        "n_items": sum(int(split.items[r]) for r in rows),
        "n_rows": len(rows),
        "n_train_tokens": int(trained.sum()),
    }
    if split.ref_logps is not None:
        batch["ref_logps"] = _shifted(split, rows, split.ref_logps, width)
    return batch


class WindowSource(Protocol):
    def window(self, index: int, model: torch.nn.Module) -> RolloutSplit:
        """Window ``index``'s rollouts, sampled from ``model`` as it stands (the live policy)."""
        ...


@dataclass(frozen=True)
class RolloutStream:
    """A run whose epoch e trains window e of ``source``. ``shape``: rows as many as a window's
    completions, each as long as the longest a window can hold (the run's counts, and the
    micro-batch probe of ``per_device_train_batch_size: auto``); never trained. Without a
    source, ``shape`` is the fixed rollouts every epoch trains."""

    shape: RolloutSplit
    source: WindowSource | None = None

    @classmethod
    def of(cls, rollouts: RolloutSplit | RolloutStream) -> RolloutStream:
        """Rollouts as ``train`` takes them: a stream, or one fixed window."""
        return rollouts if isinstance(rollouts, RolloutStream) else cls(rollouts)


class RolloutPlan(EpochPlan):
    """``EpochPlan`` over completions: the same windows, each micro-batch carrying besides N_W
    (Σ items) its window's trained tokens and completions, for the metrics. With ``windows``
    (a stream), epoch e holds window e's rollouts, asked for when that epoch's first
    micro-batch is built: never ahead, so the policy they come from is the one after the
    previous window's step (``set_epoch`` plans nothing, ``__len__`` needs only the count)."""

    split: RolloutSplit

    def __init__(
        self,
        split: RolloutSplit,
        *,
        windows: Callable[[int], RolloutSplit] | None = None,
        **plan: Any,
    ) -> None:
        self._windows, self._window = windows, -1  # the epoch whose rollouts ``split`` holds
        super().__init__(split, **plan)

    def set_epoch(self, epoch: int) -> None:
        if self._windows is None:
            return super().set_epoch(epoch)
        if self._resume is not None and self._resume[0] == epoch:
            (_, self.skip), self._resume, self.epoch = self._resume, None, epoch
        elif epoch != self.epoch:
            self.epoch, self.skip = epoch, 0

    def __len__(self) -> int:
        if self._windows is None:
            return super().__len__()
        return micro_batches_per_epoch(len(self.split), self.batch_size) - self.skip

    def full_plan(self, epoch: int) -> EpochIndex:
        if self._windows is not None and epoch != self._window:
            self._take_window(epoch, self._windows(epoch))
        return super().full_plan(epoch)

    def _take_window(self, epoch: int, split: RolloutSplit) -> None:
        if len(split) != len(self.split):
            raise ValueError(
                f"window {epoch}: {len(split)} completions, the run's windows hold "
                f"{len(self.split)}"
            )
        self.split, self._window = split, epoch
        self._items = np.asarray(split.items, dtype=np.int64)
        self._full = self._counts = None

    def window_columns(self) -> dict[str, np.ndarray]:
        trained = np.asarray(self.split.trained, dtype=np.int64)
        return {"n_window_tokens": trained, "n_window_completions": np.ones_like(trained)}

    def collate_rows(self, rows: list[int], micro: MicroBatch) -> dict[str, Any]:
        return collate_rollouts(self.split, rows, self.pad_id)

    def stand_in(self, batch: dict[str, Any]) -> None:
        super().stand_in(batch)
        batch["row_weight"] = torch.zeros_like(batch["row_weight"])
        batch["completion_lengths"] = torch.zeros_like(batch["completion_lengths"])
        batch["n_train_tokens"] = 0
