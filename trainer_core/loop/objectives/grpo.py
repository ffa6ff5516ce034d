"""GRPO's training objective: a window's fixed rollouts, each completion weighted and counted as
its loss type says (dapo, grpo, dr_grpo: ``accumulation``, "Rollouts"), with the clipped policy
loss (``accumulation.rollout_micro_step``). A stream's epoch e is window e, sampled from the live
model when that epoch starts (``data.grpo.RolloutPlan``). A GRPO run has no eval split of its
own: its evaluation samples and grades (``trainer_core.grpo``, above the loop)."""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.accumulation import MicroStep, rollout_micro_step
from trainer_core.chunked_head import check_head
from trainer_core.data.grpo import RolloutPlan, RolloutSplit, WindowSource
from trainer_core.data.loader import Planned
from trainer_core.distributed import World
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec


class GrpoObjective:
    def __init__(
        self,
        spec: JobSpec,
        split: RolloutSplit,
        model: torch.nn.Module,
        source: WindowSource | None,
    ) -> None:
        if spec.packing:
            raise JobError(
                "packing: rollouts are not packed; train them without packing", param="packing"
            )
        self.split, self.loss, self.chunk = split, split.loss, spec.loss_chunk_tokens
        if self.chunk:
            check_head(model, next(model.parameters()).device, spec.model)
        # A stream's epoch e is window e, sampled from this model when that epoch starts.
        self.model, self.source = model, source

    def _window(self, epoch: int) -> RolloutSplit:
        assert self.source is not None
        return self.source.window(epoch, model=self.model)

    def plan(self, planned: Planned) -> RolloutPlan:
        windows = None if self.source is None else self._window
        return RolloutPlan(self.split, windows=windows, **planned.kwargs())

    def micro_step(self, model: torch.nn.Module, batch: dict[str, Any]) -> MicroStep:
        return rollout_micro_step(model, batch, self.loss, self.chunk)

    def evaluate(
        self, model: torch.nn.Module, world: World, predicted: list[int]
    ) -> dict[str, float]:
        return {}

    def epoch_record(self, train_tokens: float) -> dict[str, Any]:
        return {}
