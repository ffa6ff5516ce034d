"""A checkpoint folder, in the Hugging Face Trainer's layout: the one format of every backend.

``model.safetensors`` + ``config.json`` (as save_pretrained writes them), ``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth`` and ``trainer_state.json`` — what
``Trainer.train(resume_from_checkpoint=...)`` reads — plus ``gradacc_state.json``, our position in
the run (``trainer_core.checkpoint.resume.RunState``), written last so that its presence marks the
folder complete. Folders are written beside their place and renamed into it
(``trainer_core.checkpoint.writer``): a crash never leaves half of one where a resume looks.
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
from transformers import PreTrainedModel

from trainer_core.spec.outputs import CHECKPOINT_STATE, step_of

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
OPTIMIZER = "optimizer.pt"
SCHEDULER = "scheduler.pt"
RNG = "rng_state.pth"
TRAINER_STATE = "trainer_state.json"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.random.get_rng_state_all()
    return state


# What numpy's RNG state (a tuple holding a uint32 array) needs beyond tensors and plain values:
# the array's rebuilder and types, nothing that runs code. The Trainer allows the same.
_NUMPY_RNG: list[Any] = [
    np.zeros(1).__reduce__()[0],
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]


def restore_rng(path: Path) -> None:
    """Load with ``weights_only``: a pickle in the file that names anything else (a function to
    call) is refused (``pickle.UnpicklingError``) instead of run."""
    with torch.serialization.safe_globals(_NUMPY_RNG):
        state = torch.load(path / RNG, weights_only=True)
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.random.set_rng_state_all(state["cuda"])


def recover_interrupted_swap(path: Path) -> None:
    """Finish a swap that a crash interrupted: if only ``path.old`` survived, it is the latest."""
    old = path.with_name(path.name + ".old")
    if old.is_dir() and not (path / CHECKPOINT_STATE).is_file():
        shutil.rmtree(path, ignore_errors=True)
        old.rename(path)


def read_state_json(path: Path) -> dict[str, Any] | None:
    """The folder's ``gradacc_state.json``, or None when there is no complete checkpoint."""
    recover_interrupted_swap(path)
    file = path / CHECKPOINT_STATE
    if not file.is_file():
        return None
    state: dict[str, Any] = json.loads(file.read_text())
    return state


def best_checkpoint(latest: Path, step: int) -> Path:
    """The kept checkpoint of ``step``: ``latest`` (``checkpoint/``) or ``checkpoint-<step>/``."""
    folder = latest if step_of(latest) == step else latest.with_name(f"{latest.name}-{step}")
    if step_of(folder) != step:
        raise FileNotFoundError(f"the checkpoint of step {step} is not kept in {latest.parent}")
    return folder


def load_weights(path: Path, model: PreTrainedModel) -> None:
    """Load model weights; a key the snapshot dropped must be tied to a loaded tensor (GPT-2's
    lm_head is its embedding). A LoRA model's checkpoint holds its whole state dict too, under
    peft's names: the adapters, the new head and the frozen base it was built on."""
    loaded = load_file(str(path / WEIGHTS))
    missing, unexpected = model.load_state_dict(loaded, strict=False)
    params = dict(model.state_dict())
    loaded_ptrs = {params[k].data_ptr() for k in loaded if k in params}
    untied = [k for k in missing if params[k].data_ptr() not in loaded_ptrs]
    if unexpected or untied:
        raise RuntimeError(f"checkpoint does not fit the model: {unexpected or untied}")
