"""A checkpoint folder, in the Hugging Face Trainer's layout: the one format of every backend.

``model.safetensors`` + ``config.json`` (as save_pretrained writes them), ``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth`` and ``trainer_state.json`` — what
``Trainer.train(resume_from_checkpoint=...)`` reads — plus ``gradacc_state.json``, our position in
the run (``trainer_core.checkpoint.resume.RunState``), written last so that its presence marks the
folder complete. Folders are written beside their place and renamed into it
(``trainer_core.checkpoint.writer``): a crash never leaves half of one where a resume looks.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel

from trainer_core.model.quantized import frozen_4bit_keys
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


DISCARDED = ".discarded-"  # the prefix of a folder being deleted: no reader looks at it


def discard(folder: Path) -> None:
    """Delete a checkpoint folder so that a crash midway never leaves part of it under a name a
    reader looks at: it is renamed out of sight first (one atomic step), then deleted. Another
    rank discarding or recovering the same folder at the same moment is not an error."""
    gone = folder.with_name(DISCARDED + folder.name)
    shutil.rmtree(gone, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        folder.rename(gone)
    shutil.rmtree(gone, ignore_errors=True)


def kept_at(latest: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is kept once a newer one is ``latest``:
    ``checkpoint-<step>/`` beside ``checkpoint/``."""
    return latest.with_name(f"{latest.name}-{step}")


def _rename_once(source: Path, target: Path) -> None:
    """Rename, unless another process did it first (``source`` gone, ``target`` there)."""
    try:
        source.rename(target)
    except OSError:
        if source.exists() and not target.exists():
            raise


def recover_interrupted_swap(path: Path) -> None:
    """Finish the swap of ``writer.install`` that a crash interrupted.

    - Killed between its two renames: only ``path.old`` survived, and it is the latest; it is
      put back.
    - Killed after the new checkpoint landed, before the old one was kept or deleted: both
      survived. The old one is kept as ``path-<step>``, as a kept or best checkpoint would be;
      the next save prunes it if the policy does not keep it. (Left where it was, it made the
      next save's rename fail: "Directory not empty".)
    - Killed while deleting a folder: what is left of it is deleted.

    Every rank of a job reads its checkpoint at start, so two processes may recover the same
    folder at once: a rename the other one did first is not an error."""
    for gone in path.parent.glob(f"{DISCARDED}{path.name}*"):
        shutil.rmtree(gone, ignore_errors=True)
    old = path.with_name(path.name + ".old")
    if not old.is_dir():
        return
    if not path.exists():
        _rename_once(old, path)
        return
    if step_of(path) < 0:
        return  # not a checkpoint this module wrote: left for the next save to replace
    step = step_of(old)
    kept = kept_at(path, step)
    if step >= 0 and step != step_of(path) and not kept.exists():
        _rename_once(old, kept)
    else:
        discard(old)


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
    folder = latest if step_of(latest) == step else kept_at(latest, step)
    if step_of(folder) != step:
        raise FileNotFoundError(f"the checkpoint of step {step} is not kept in {latest.parent}")
    return folder


def load_weights(path: Path, model: PreTrainedModel) -> None:
    """Load model weights; a key the snapshot dropped must be tied to a loaded tensor (GPT-2's
    lm_head is its embedding). A LoRA model's checkpoint holds its whole state dict too, under
    peft's names: the adapters, the new head and the frozen base it was built on (but a 4-bit
    base's quantized weights, which the base makes again)."""
    loaded = load_file(str(path / WEIGHTS))
    missing, unexpected = model.load_state_dict(loaded, strict=False)
    params = dict(model.state_dict())
    loaded_ptrs = {params[k].data_ptr() for k in loaded if k in params}
    frozen = frozen_4bit_keys(model)  # a 4-bit base's, left out of the checkpoint
    untied = [k for k in missing if params[k].data_ptr() not in loaded_ptrs and k not in frozen]
    if unexpected or untied:
        raise RuntimeError(f"checkpoint does not fit the model: {unexpected or untied}")
