"""A trained model folder written out whole: adapters merged into their base (``load_trained``'s
rule), saved as any ``save_pretrained`` model (``config.json`` of the base's architecture,
``model.safetensors``, the tokenizer and its chat template), which ``from_pretrained`` and
servers such as vLLM load without peft.

Run as ``python -m trainer_core merge FOLDER --output-dir DIR``: the service calls it in a child
process, so that the merge's memory (base and adapters, then the merged copy) is the child's and
goes back when it ends, and the API never imports torch.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from trainer_core.model.trained import load_trained, stored_labels


def merge_folder(folder: Path, into: Path, *, causal: bool) -> None:
    """``folder``'s model merged and saved as ``into``, renamed in whole when complete (a reader
    never sees half of it; an existing ``into`` is left as it is)."""
    auto = AutoModelForCausalLM if causal else AutoModelForSequenceClassification
    model = load_trained(folder, auto, label_kwargs=stored_labels(folder), merge=True)
    tmp = into.with_name(f"{into.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        AutoTokenizer.from_pretrained(folder).save_pretrained(tmp)
        tmp.rename(into)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
