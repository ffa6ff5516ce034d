"""A training method's part of a run, a room per method: SFT over rows and tokens (``sft``), DPO
over pairs (``dpo``), GRPO over a window's rollouts (``grpo``). Each is an ``Objective``: it plans
the epoch (its unit, and the window counts its loss divides by besides N_W: every plan's rank
share and ÷W are made once, in ``data.loader.EpochPlan``), runs a micro-step (its share of the
window's loss, from ``accumulation``) and evaluates. ``build_context`` asks ``objective_for`` once;
the run and the backends ask the objective, and no loop module tests a method's type. A new
method is one module here and one line in ``objective_for``.

As torchtune says of its recipe interface, this protocol is a contract, not a vehicle for code
reuse: an objective calls the shared math and plan, and holds only its own method's parts.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch

from trainer_core.accumulation import MicroStep
from trainer_core.data.grpo import RolloutSplit, WindowSource
from trainer_core.data.load import JobData
from trainer_core.data.loader import EpochPlan, Planned
from trainer_core.data.splits import PreferenceSplit
from trainer_core.distributed import World
from trainer_core.loop.objectives import dpo, grpo, sft
from trainer_core.spec.dpo import Method
from trainer_core.spec.job import JobSpec


class Objective(Protocol):
    def plan(self, planned: Planned) -> EpochPlan:
        """The epoch plan of this method's unit over the training split."""
        ...

    def micro_step(self, model: torch.nn.Module, batch: dict[str, Any]) -> MicroStep:
        """The micro-batch's share of its window's loss (to back-propagate) and its sums."""
        ...

    def evaluate(
        self, model: torch.nn.Module, world: World, predicted: list[int]
    ) -> dict[str, float]:
        """The ``eval_`` scores over the whole eval split (a classifier's predicted classes
        into ``predicted``)."""
        ...

    def epoch_record(self, train_tokens: float) -> dict[str, Any]:
        """What an epoch record adds for this method (pairs: their trained tokens)."""
        ...


def objective_for(
    method: Method,
    spec: JobSpec,
    data: JobData,
    model: torch.nn.Module,
    device: torch.device,
    *,
    pad_id: int,
    windows: WindowSource | None = None,
) -> Objective:
    """The run's objective, chosen once by the method it trains: call it before a checkpoint is
    restored into ``model`` (DPO's online reference is a copy of the starting weights). A GRPO
    run's ``windows``: its rollouts, window by window, sampled from the live ``model``."""
    if method == "dpo":
        train, evaluation = cast(PreferenceSplit, data.train), data.eval
        return dpo.DpoObjective(spec, model, train, evaluation, device, pad_id=pad_id)
    if method == "grpo":
        return grpo.GrpoObjective(spec, cast(RolloutSplit, data.train), model, windows)
    return sft.SftObjective(spec, data, model, device, pad_id=pad_id)
