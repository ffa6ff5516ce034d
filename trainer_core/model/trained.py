"""A trained model's folder, and the one rule that loads it: training from it, predicting with it.

A folder is either a whole model (``config.json`` and weights, as ``save_pretrained`` writes
them) or adapters (``adapter_config.json``, the tokenizer, and the adapters' weights: peft's
``adapter_model.safetensors``, or a LoRA checkpoint's whole peft state in ``model.safetensors``).
An adapter folder's base is named by the folder itself, never by a path written in one of its
files (another tenant's job folder is a path):

- ``base/``, a folder inside it (the service links the base model's files in), loaded by this same
  rule, so a chain of adapters is a chain of folders;
- ``gradacc_base.json``, ``{"model": "builtin:…", "seed": N}``: a built-in model, whose weights
  are made from the seed of the job that trained the adapters (they exist nowhere else);
- otherwise ``adapter_config.json``'s ``base_model_name_or_path``, which must be a hub id of a
  whole model (``trainer_core.spec.cards.adapter_base``), as for any adapter a client names.

Loading merges the adapters into their base for training (a new job starts from the fine-tuned
weights); predicting keeps the last adapter apart from its base (``merge=False``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import PretrainedConfig
from transformers.utils.peft_utils import find_adapter_config_file

from trainer_core.builtin.models import builtin_config, builtin_tokenizer
from trainer_core.spec.cards import ADAPTER_CONFIG, UnsafeSource, adapter_base
from trainer_core.spec.errors import ModelError
from trainer_core.spec.fields import BUILTIN_MODELS
from trainer_core.spec.outputs import ADAPTER_BASE_DIR, ADAPTER_BUILTIN_BASE
from trainer_core.spec.sources import shadowed

BASE_DIR = ADAPTER_BASE_DIR
BUILTIN_BASE = ADAPTER_BUILTIN_BASE
LABELS = "labels.json"  # a classifier's label names: peft saves the head, not the config
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_STATE = "model.safetensors"  # a LoRA checkpoint: the whole peft state dict
MAX_DEPTH = 16  # adapters on adapters; a deeper chain is refused rather than followed


def is_adapter(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def build_builtin(
    name: str, seed: int, auto: Any, label_kwargs: dict[str, object], tokenizer: Any = None
) -> Any:
    """A built-in model's weights, made from ``seed`` (so every backend starts identical)."""
    torch.manual_seed(seed)
    config: PretrainedConfig = builtin_config(name, tokenizer or builtin_tokenizer(name))
    for key, value in label_kwargs.items():
        setattr(config, key, value)
    return auto.from_config(config)


def hub_base(config_file: Path) -> str:
    """The hub id an adapter config names as its base, when it is one that ``from_pretrained``
    may load: a hub id (no path), that names no path here, of a whole model (no second adapter).
    """
    try:
        base = adapter_base(config_file, param="model")
    except UnsafeSource as exc:
        raise ModelError(str(exc), param="model") from None
    if shadowed(base) or find_adapter_config_file(base) is not None:
        raise ModelError(
            "model: it is an adapter whose base model is not a whole model on the hub; merge "
            "the adapter into its base model and upload the merged model",
            param="model",
        )
    return base


def _inside(folder: Path) -> Path:
    """``folder/base``, when it and everything in it are inside ``folder`` (links included)."""
    base, root = folder / BASE_DIR, os.path.realpath(folder)
    for current, dirs, files in os.walk(base):
        for name in (".", *dirs, *files):
            if not os.path.realpath(os.path.join(current, name)).startswith(root + os.sep):
                raise ModelError("model: its base/ leads outside the model's folder", param="model")
    return base


def _builtin_base(folder: Path) -> tuple[str, int]:
    try:
        named = json.loads((folder / BUILTIN_BASE).read_text(encoding="utf-8"))
        name, seed = named["model"], named["seed"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"model: its {BUILTIN_BASE} cannot be read", param="model") from exc
    if name not in BUILTIN_MODELS or not isinstance(seed, int):
        raise ModelError(f"model: its {BUILTIN_BASE} names no built-in model", param="model")
    return name, seed


def check_trained(folder: Path, depth: int = 0) -> None:
    """What ``load_trained`` would refuse, found without loading a weight."""
    if not is_adapter(folder):
        return
    if depth >= MAX_DEPTH:
        raise ModelError(f"model: more than {MAX_DEPTH} adapters on one base", param="model")
    if (folder / BASE_DIR).is_dir():
        check_trained(_inside(folder), depth + 1)
    elif (folder / BUILTIN_BASE).is_file():
        _builtin_base(folder)
    else:
        hub_base(folder / ADAPTER_CONFIG)


def stored_labels(folder: Path) -> dict[str, object]:
    """The label kwargs a classifier's adapters were trained with (empty for a causal LM)."""
    file = folder / LABELS
    if not file.is_file():
        return {}
    names: list[str] = json.loads(file.read_text(encoding="utf-8"))
    return {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {name: i for i, name in enumerate(names)},
    }


def load_trained(
    folder: Path, auto: Any, *, label_kwargs: dict[str, object], merge: bool = True, depth: int = 0
) -> Any:
    """The model in ``folder`` (see the module docstring): a plain ``transformers`` model, or with
    ``merge=False`` and adapters, a ``PeftModel`` whose last adapter stays apart from its base."""
    if not is_adapter(folder):
        return auto.from_pretrained(folder, trust_remote_code=False, **label_kwargs)
    model = _with_adapter(load_base(folder, auto, label_kwargs=label_kwargs, depth=depth), folder)
    if not merge:
        return model
    merged = model.merge_and_unload()
    merged.requires_grad_(True)  # peft froze the base: merged, it is a plain model again
    return merged


def load_base(folder: Path, auto: Any, *, label_kwargs: dict[str, object], depth: int = 0) -> Any:
    """The plain model an adapter folder's adapters go on (a chain below it merged)."""
    check_trained(folder, depth)
    if (folder / BASE_DIR).is_dir():
        return load_trained(_inside(folder), auto, label_kwargs=label_kwargs, depth=depth + 1)
    if (folder / BUILTIN_BASE).is_file():
        return build_builtin(*_builtin_base(folder), auto, label_kwargs)
    return auto.from_pretrained(
        hub_base(folder / ADAPTER_CONFIG), trust_remote_code=False, **label_kwargs
    )


def base_key(folder: Path) -> tuple[object, ...]:
    """What an adapter folder's base is made from, so that adapters on one base can share one
    loaded copy of it: a built-in name and seed, a hub id, or the ``model_key`` of ``base/``."""
    check_trained(folder)
    if (folder / BASE_DIR).is_dir():
        return model_key(_inside(folder))
    if (folder / BUILTIN_BASE).is_file():
        return ("builtin", *_builtin_base(folder))
    return ("hub", hub_base(folder / ADAPTER_CONFIG))


def model_key(folder: Path) -> tuple[object, ...]:
    """A model folder's identity: its files as the file system knows them (device, inode, size,
    mtime), so that hard links of one model (how the service links a base into an adapter's
    view) name the same model and a file written again names another; for adapters, their base
    too."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found.append((path.name, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns))
    if is_adapter(folder):
        return ("adapters", base_key(folder), tuple(found))
    return ("files", tuple(found))


def add_adapter(model: Any, folder: Path, name: str) -> Any:
    """``folder``'s adapter put on ``model`` as ``name`` beside any it has (not active until
    ``set_adapter``): the ``PeftModel`` that holds them, made from ``model`` if it is plain."""
    from peft import PeftConfig, PeftModel, get_peft_model

    peft = isinstance(model, PeftModel)
    if (folder / ADAPTER_WEIGHTS).is_file():
        if peft:
            model.load_adapter(folder, adapter_name=name)
            return model
        return PeftModel.from_pretrained(model, folder, adapter_name=name)
    config = PeftConfig.from_pretrained(str(folder))
    if peft:
        model.add_adapter(name, config)
    else:
        model = get_peft_model(model, config, adapter_name=name)
    # A checkpoint's view: the whole peft state, its adapter named "default" (training's name).
    state = {
        key.replace(".default.", f".{name}."): value
        for key, value in load_file(str(folder / PEFT_STATE)).items()
        if "lora_" in key
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [key for key in missing if "lora_" in key and f".{name}." in key]:
        raise ModelError("model: the checkpoint does not fit its adapter config", param="model")
    return model


def _with_adapter(base: Any, folder: Path) -> Any:
    from peft import PeftConfig, PeftModel, get_peft_model  # peft only for adapter folders

    if (folder / ADAPTER_WEIGHTS).is_file():
        return PeftModel.from_pretrained(base, folder)
    # A checkpoint's view: the whole peft state (frozen base, adapters, a new head) by name.
    model = get_peft_model(base, PeftConfig.from_pretrained(str(folder)))
    missing, unexpected = model.load_state_dict(load_file(str(folder / PEFT_STATE)), strict=False)
    adapters_missing = [key for key in missing if "lora_" in key]
    if unexpected or adapters_missing:
        raise ModelError("model: the checkpoint does not fit its adapter config", param="model")
    return model
