"""Load the job's model and tokenizer: built-in, a local ``save_pretrained`` directory, or a hub id.

``trust_remote_code`` is never enabled. Weights that are created (a built-in model, a new
classification head) are initialised from the job's seed, so every backend starts identical.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils.peft_utils import find_adapter_config_file

from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.model.quantized import four_bit_config, load_4bit, ready_for_adapters, requantized
from trainer_core.model.trained import (
    build_builtin,
    check_trained,
    hub_base,
    is_adapter,
    load_trained,
)
from trainer_core.spec.chat import template_text
from trainer_core.spec.errors import JobError, ModelError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.sources import classify_source, local_path, shadowed


def unavailable(what: str, source: str, exc: Exception) -> ModelError:
    """A model that cannot be had: for a hub id, the two ways that work offline."""
    message = f"model: cannot load {what} {source!r}: {type(exc).__name__}: {exc}"
    if classify_source(source) == "hub":
        message += (
            ". Without the hub (offline, or unreachable from this server), either upload the "
            "model as an archive of a save_pretrained folder (POST /v1/files, purpose model) "
            "and name its file id, or fill a Hugging Face cache with it on a connected machine "
            "(huggingface-cli download ...) and mount that cache as this server's HF_HOME "
            "(docs/models.md)"
        )
    return ModelError(message, param="model")


def load_tokenizer(spec: JobSpec) -> PreTrainedTokenizerBase:
    if classify_source(spec.model) == "builtin":
        tokenizer = builtin_tokenizer(spec.model)
    else:
        try:
            source, revision = _source(spec.model)
            tokenizer = AutoTokenizer.from_pretrained(
                source, revision=revision, trust_remote_code=False
            )
        except ModelError:
            raise
        except Exception as exc:
            raise unavailable("a tokenizer for", spec.model, exc) from exc
    if spec.chat_template is not None:  # the job's template: used, and saved with the model
        tokenizer.chat_template = template_text(spec.chat_template)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelError("model: tokenizer has neither a pad nor an eos token", param="model")
        tokenizer.pad_token = tokenizer.eos_token  # padded positions are masked out of the loss
    return tokenizer


def _source(model: str) -> tuple[str, str | None]:
    """What ``from_pretrained`` gets: a local directory, or a hub id and the commit it is read
    at, each checked for what it would make transformers read besides itself (an adapter's
    base), at that same commit."""
    kind = classify_source(model)
    revision = None
    if kind == "file":  # the service resolves upload ids to paths; reaching here is a bug there
        raise ModelError(f"model: uploaded file {model!r} was not resolved", param="model")
    if kind == "hub":
        if shadowed(model):  # transformers would load the directory, not the hub repository
            raise ModelError(
                f"model: {model!r} is a hub id that also names a path on this machine; write "
                f"./{model} for a local directory",
                param="model",
            )
        source, revision = model, hub_revision(model)
    else:
        path = local_path(model)
        if not path.is_dir():
            raise ModelError(f"model: directory {model!r} does not exist", param="model")
        if is_adapter(path):  # loaded by the trained-model rule, which checks its base
            check_trained(path)
            return str(path), None
        source = str(path)
    _check_adapter(source, revision)
    return source, revision


@lru_cache(maxsize=16)
def hub_revision(model: str) -> str | None:
    """The commit a hub model is read at, looked up once per process: the adapter check, the
    tokenizer and the weights all read that commit, so a push between them changes nothing
    that was checked. None offline: the cache holds the one snapshot it reads."""
    from huggingface_hub import HfApi, constants

    if constants.is_offline_mode():
        return None
    try:
        return HfApi().model_info(model, timeout=30).sha
    except Exception as exc:  # unknown, gated, or the hub unreachable: nothing is loaded
        raise unavailable("a model from", model, exc) from exc


def _check_adapter(source: str, revision: str | None) -> None:
    """A model that is an adapter makes ``from_pretrained`` load the base its config names
    first (transformers' auto_factory, with the same lookup as here, at the same revision):
    that base must be a hub id of a whole model (no path here, no second adapter), or a name
    would reach the disk."""
    found = find_adapter_config_file(source, revision=revision)
    if found is not None:
        hub_base(Path(found))


def _label_kwargs(label_names: list[str]) -> dict[str, object]:
    return {
        "num_labels": len(label_names),
        "id2label": dict(enumerate(label_names)),
        "label2id": {name: i for i, name in enumerate(label_names)},
    }


def _pretrained(spec: JobSpec, auto: Any, kwargs: dict[str, object], device: torch.device) -> Any:
    source, revision = _source(spec.model)
    if classify_source(spec.model) != "local":
        if spec.load_in_4bit:
            return load_4bit(auto, source, device, revision=revision, **kwargs)
        return auto.from_pretrained(source, revision=revision, trust_remote_code=False, **kwargs)
    # A fine-tuned model's adapters are merged into their base: a job trained from it starts
    # from its weights. A built-in base is made from its own job's seed: the new weights of
    # this job (adapters, a head) follow this job's seed again.
    model = load_trained(Path(source), auto, label_kwargs=kwargs)
    if spec.load_in_4bit:
        model = requantized(model, auto, device)
    torch.manual_seed(spec.seed)
    return model


def load_model(
    spec: JobSpec,
    tokenizer: PreTrainedTokenizerBase,
    label_names: list[str] | None,
    device: torch.device | None = None,
) -> PreTrainedModel:
    """``device``: where a 4-bit base is quantized and placed (the others move after)."""
    torch.manual_seed(spec.seed)  # new weights (a built-in model, a fresh head) follow the seed
    auto = AutoModelForCausalLM if spec.task == "causal-lm" else AutoModelForSequenceClassification
    kwargs = _label_kwargs(label_names) if label_names is not None else {}
    device = device or torch.device("cpu")
    if spec.load_in_4bit:
        four_bit_config(device)  # refused before anything loads where it cannot run
    if classify_source(spec.model) == "builtin":
        model = build_builtin(spec.model, spec.seed, auto, kwargs, tokenizer)
        if spec.load_in_4bit:
            model = requantized(model, auto, device)
    else:
        try:
            model = _pretrained(spec, auto, kwargs, device)
        except ModelError:
            raise
        except JobError:
            raise
        except Exception as exc:
            raise unavailable(f"a {spec.task} model from", spec.model, exc) from exc
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id >= model.config.vocab_size:
        raise ModelError("model: tokenizer and model vocabularies disagree", param="model")
    if spec.load_in_4bit:  # peft's preparation, checkpointing included when asked
        model = ready_for_adapters(model, spec.gradient_checkpointing)
    elif spec.gradient_checkpointing:
        # Re-computes activations in backward instead of keeping them; non-reentrant, so frozen
        # inputs (LoRA) still get gradients.
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    if spec.lora is not None:
        from trainer_core.model.lora import apply_lora  # peft is imported only for LoRA jobs

        return cast(PreTrainedModel, apply_lora(model, spec))
    return cast(PreTrainedModel, model)
