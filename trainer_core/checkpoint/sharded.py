"""A sharded checkpoint's model and optimizer (``sharding: "fsdp"``), written with
``torch.distributed.checkpoint`` (DCP) by every rank at once, each its own shards, in the layout
Accelerate writes and the Trainer resumes from: ``pytorch_model_fsdp_0/`` ({"model": state}) and
``optimizer_0/`` ({"optimizer": state, by parameter name}). The rest of the folder (scheduler, RNG,
the run's position) is written by rank 0 as for any checkpoint (``format``).

DCP reshards on load: a checkpoint of W ranks loads into W' ranks, sharded or not (one process
reads every shard: a resume at W = 1, or the final model of the best checkpoint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

MODEL_SHARDS = "pytorch_model_fsdp_0"
OPTIMIZER_SHARDS = "optimizer_0"


def is_sharded_checkpoint(folder: Path) -> bool:
    return (folder / MODEL_SHARDS).is_dir()


def save_shards(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """This rank's shards of the model and optimizer into ``folder`` (a collective)."""
    from torch.distributed.checkpoint import state_dict_saver
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, moments = get_state_dict(model, optimizer)
    state_dict_saver.save({"model": weights}, checkpoint_id=folder / MODEL_SHARDS)
    state_dict_saver.save({"optimizer": moments}, checkpoint_id=folder / OPTIMIZER_SHARDS)


def load_shards(
    folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
) -> None:
    """The model (and optimizer) state of ``folder`` into this rank's model, resharded to it."""
    from torch.distributed.checkpoint import state_dict_loader
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    weights: dict[str, Any] = {"model": get_model_state_dict(model)}
    state_dict_loader.load(weights, checkpoint_id=folder / MODEL_SHARDS)
    set_model_state_dict(model, weights["model"])
    if optimizer is not None:
        moments: dict[str, Any] = {"optimizer": get_optimizer_state_dict(model, optimizer)}
        state_dict_loader.load(moments, checkpoint_id=folder / OPTIMIZER_SHARDS)
        set_optimizer_state_dict(model, optimizer, moments["optimizer"])
