"""A 4-bit frozen base for LoRA (QLoRA, ``load_in_4bit``): the base's linear layers held in
bitsandbytes' nf4 (half a byte a weight, and a scale per 64), computed in bf16; the adapters train
in fp32 on top, and everything else of the base (embeddings, norms) stays in fp32, as
``prepare_model_for_kbit_training`` leaves it.

bitsandbytes quantizes on CUDA and, from 0.47, on the CPU (its own kernels: at import it says it
could not fetch faster ones from the hub, which cannot be reached here; harmless). On any other
device, or where it is not installed, the job is refused naming ``load_in_4bit``.

The base is quantized as it loads: a hub or local model is read straight into 4 bits; a built-in
or a fine-tuned model (whose weights the core makes or merges first) is written to a temporary
folder and read back the same way.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from typing import Any

import torch

from trainer_core.spec.errors import JobError

DEVICES = ("cpu", "cuda")
# bitsandbytes (imported by peft wherever it is installed) and the kernels package say at import
# that a faster CPU kernel could not be fetched from the hub: harmless, and kept out of job logs.
for _notice in ("bitsandbytes.backends.cpu.ops", "kernels"):
    logging.getLogger(_notice).setLevel(logging.ERROR)


def four_bit_config(device: torch.device) -> Any:
    """bitsandbytes' nf4 with bf16 compute, or a refusal naming ``load_in_4bit``."""
    if device.type not in DEVICES:
        raise JobError(
            f"load_in_4bit: bitsandbytes quantizes on CUDA and the CPU, not on {device.type}",
            param="load_in_4bit",
        )
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its hub-kernel notice, not the job's
            import bitsandbytes  # noqa: F401
    except ImportError:
        raise JobError(
            "load_in_4bit: bitsandbytes is not installed on this worker", param="load_in_4bit"
        ) from None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(  # type: ignore[no-untyped-call]
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
    )


def load_4bit(auto: Any, source: str, device: torch.device, **kwargs: Any) -> Any:
    """``source`` (a hub id or a folder) with its linear layers in 4 bits, on ``device``."""
    return auto.from_pretrained(
        source,
        quantization_config=four_bit_config(device),
        device_map={"": str(device)},
        trust_remote_code=False,
        **kwargs,
    )


def requantized(model: Any, auto: Any, device: torch.device) -> Any:
    """A model the core made (a built-in, a merged fine-tune) read back in 4 bits."""
    name = model.config._name_or_path  # the adapters' base, as peft records it; not the folder
    with tempfile.TemporaryDirectory(prefix="gradacc-4bit-") as folder:
        model.save_pretrained(folder, safe_serialization=True)
        quantized = load_4bit(auto, folder, device)
    quantized.config._name_or_path = name
    quantized.name_or_path = name
    return quantized


def ready_for_adapters(model: Any, checkpointing: bool) -> Any:
    """peft's preparation of a quantized base: what is not quantized in fp32, the inputs'
    gradients on (adapters below the first quantized layer need them)."""
    from peft import prepare_model_for_kbit_training

    return prepare_model_for_kbit_training(  # type: ignore[no-untyped-call]
        model,
        use_gradient_checkpointing=checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )


def is_quantized(model: Any) -> bool:
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_quantized", False))


def frozen_4bit_keys(model: Any) -> set[str]:
    """The state-dict keys of a 4-bit base's quantized weights (and their quantization state):
    frozen, and made again from the base when a run resumes, so a checkpoint leaves them out."""
    quantized = [
        name for name, module in model.named_modules() if type(module).__name__ == "Linear4bit"
    ]
    prefixes = tuple(f"{name}.weight" for name in quantized)
    if not prefixes:
        return set()
    return {key for key in model.state_dict() if key.startswith(prefixes)}
