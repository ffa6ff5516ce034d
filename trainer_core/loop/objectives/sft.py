"""SFT: rows (a classifier's) or their trained tokens (a causal LM's) are the items; the loss is
cross-entropy summed over a window's items and divided by its N_W (``accumulation.micro_step_loss``),
and evaluation is ``loop.evaluation``'s. Packed rows (``packing``) are checked to stay isolated
before any step: a model that lets packed rows attend to each other is refused."""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.accumulation import MicroStep, micro_step_loss
from trainer_core.chunked_head import check_head
from trainer_core.data.load import JobData
from trainer_core.data.loader import EpochPlan, Planned
from trainer_core.distributed import World
from trainer_core.loop.evaluation import evaluate
from trainer_core.loop.packing_check import check_rows_isolated, packing_layout
from trainer_core.spec.job import JobSpec


class SftObjective:
    def __init__(
        self,
        spec: JobSpec,
        data: JobData,
        model: torch.nn.Module,
        device: torch.device,
        *,
        pad_id: int,
    ) -> None:
        self.spec, self.data, self.device, self.pad_id = spec, data, device, pad_id
        self.causal = spec.task == "causal-lm"
        self.chunk = spec.loss_chunk_tokens
        if self.chunk:  # before any step: a model whose logits are not its head's is refused
            check_head(model, device, spec.model)
        self.layout = packing_layout(model) if spec.packing else None
        if self.layout is not None:  # before any step: a model that lets packed rows mix
            check_rows_isolated(model, device, spec.model, self.layout)

    def plan(self, planned: Planned) -> EpochPlan:
        return EpochPlan(self.data.train, packing=self.layout, **planned.kwargs())

    def micro_step(self, model: torch.nn.Module, batch: dict[str, Any]) -> MicroStep:
        return micro_step_loss(model, batch, self.causal, self.chunk)

    def evaluate(
        self, model: torch.nn.Module, world: World, predicted: list[int]
    ) -> dict[str, float]:
        labels = self.data.label_names
        return evaluate(
            model,
            self.data.eval,
            batch_size=self.spec.per_device_eval_batch_size,
            pad_id=self.pad_id,
            device=self.device,
            world=world,
            num_classes=len(labels) if labels else None,
            predicted_out=predicted,
        )

    def epoch_record(self, train_tokens: float) -> dict[str, Any]:
        return {}
