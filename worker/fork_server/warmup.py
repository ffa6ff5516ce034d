"""Pay a training process's one-time costs before a job arrives (used by the worker's fork server).

Imports the backends and the model code that transformers loads lazily, builds the built-in data
sets, and runs one tiny forward/backward on the CPU so its kernels are initialised. Touches no
GPU: CUDA must not be initialised in a process that waits for a job.
"""

from __future__ import annotations

import torch
from transformers.models.bert import modeling_bert
from transformers.models.gpt2 import modeling_gpt2

import trainer_core.backends.accelerate
import trainer_core.backends.pytorch
import trainer_core.backends.trainer  # noqa: F401
from trainer_core.builtin.corpus import BUILDERS, SPLIT_SIZES
from trainer_core.builtin.models import builtin_config, builtin_tokenizer


def warm_up() -> None:
    for build in BUILDERS.values():
        for split in SPLIT_SIZES:
            build(split)
    tokenizer = builtin_tokenizer("builtin:tiny-bert")
    config = builtin_config("builtin:tiny-bert", tokenizer)
    model = modeling_bert.BertForSequenceClassification(config)  # type: ignore[arg-type]
    batch = tokenizer(["a warm up"], return_tensors="pt")
    model(**batch).logits.sum().backward()
    modeling_gpt2.GPT2LMHeadModel  # noqa: B018  (imported for its module-level cost)
    torch.manual_seed(0)  # leave no trace in the global RNG a job might read
