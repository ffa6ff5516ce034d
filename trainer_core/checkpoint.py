"""Checkpoints at optimizer-window boundaries, in the Hugging Face Trainer's layout.

One format serves every backend: ``model.safetensors`` + ``config.json`` (save_pretrained),
``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth`` and ``trainer_state.json`` — what
``Trainer.train(resume_from_checkpoint=...)`` reads — plus ``gradacc_state.json`` with our own
position (epoch, micro-batches done), the partial epoch's loss meter and the metrics so far.
A checkpoint is written to a temporary directory and renamed, so a crash never leaves half of one.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel, TrainerState

STATE_FILE = "gradacc_state.json"


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.random.get_rng_state_all()
    return state


def restore_rng(path: Path) -> None:
    state = torch.load(path / "rng_state.pth", weights_only=False)
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.random.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: Path,
    *,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    trainer_state: TrainerState,
    state: dict[str, Any],
) -> None:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(_rng_state(), tmp / "rng_state.pth")
    trainer_state.save_to_json(str(tmp / "trainer_state.json"))
    (tmp / STATE_FILE).write_text(json.dumps(state))
    old = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def recover_interrupted_swap(path: Path) -> None:
    """Finish a swap that a crash interrupted: if only ``path.old`` survived, it is the latest."""
    old = path.with_name(path.name + ".old")
    if old.is_dir() and not (path / STATE_FILE).is_file():
        shutil.rmtree(path, ignore_errors=True)
        old.rename(path)


def read_state(path: Path) -> dict[str, Any] | None:
    recover_interrupted_swap(path)
    file = path / STATE_FILE
    if not file.is_file():
        return None
    state: dict[str, Any] = json.loads(file.read_text())
    return state


def load_weights(path: Path, model: PreTrainedModel) -> None:
    """Load model weights; keys save_pretrained dropped must be tied to a loaded tensor. A LoRA
    model's checkpoint holds its adapters (and head) only: the frozen base is rebuilt as before."""
    if hasattr(model, "peft_config"):
        from trainer_core.lora import load_adapter_weights

        load_adapter_weights(model, path)
        return
    loaded = load_file(str(path / "model.safetensors"))
    missing, unexpected = model.load_state_dict(loaded, strict=False)
    params = dict(model.state_dict())
    loaded_ptrs = {params[k].data_ptr() for k in loaded if k in params}
    untied = [k for k in missing if params[k].data_ptr() not in loaded_ptrs]
    if unexpected or untied:
        raise RuntimeError(f"checkpoint does not fit the model: {unexpected or untied}")


def load_training_state(
    path: Path,
    *,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> None:
    load_weights(path, model)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
    restore_rng(path)
