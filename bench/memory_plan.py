"""The memory plan (``trainer_core.model.memory_plan``) against the peak a real step reaches on this
machine's CPU. A Qwen3-shaped decoder on Qwen3's vocabulary (hidden 512, 6 layers: small enough
to step here), saved to a folder and trained by the core's own pieces (``load_inputs``,
``build_context``, the objective's micro-step, the optimizer), SFT and DPO, full and LoRA, whole
and chunked logits, with and without gradient checkpointing. Measured: the resident memory's
peak during the second step (the optimizer's state exists by then), above what the process held
before the model was built, sampled every 2 ms. ``python bench/memory_plan.py``.

Sharded over two processes (FSDP2, gloo): ``torchrun --nproc_per_node 2 bench/memory_plan.py
--sharded``, each rank measuring its own peak (the larger is shown) against the plan at 2 shards.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from trainer_core.distributed import World, min_over_ranks
from trainer_core.loop.build import build_context, load_inputs
from trainer_core.model.memory_plan import plan_memory
from trainer_core.spec.job import JobSpec

SMALL_QWEN3 = {"vocab_size": 151_936, "hidden_size": 512, "intermediate_size": 1536,
               "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 64, "tie_word_embeddings": True, "max_position_embeddings": 4096}  # fmt: skip
CASES: list[tuple[str, dict[str, Any]]] = [
    ("sft full", {}),
    ("sft lora", {"lora": {"r": 16}}),
    ("sft full, chunked logits", {"loss_chunk_tokens": 256}),
    ("sft full, checkpointing", {"gradient_checkpointing": True}),
    ("dpo full", {"method": "dpo", "dataset": "builtin:preference-arithmetic"}),
    ("dpo lora", {"method": "dpo", "dataset": "builtin:preference-arithmetic", "lora": {"r": 16}}),
]


class Peak:
    def __init__(self) -> None:
        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.002)

    def __enter__(self) -> Peak:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()


def measure(spec: JobSpec, folder: Path) -> tuple[int, int]:
    """(peak bytes above the start, the batch's sequence length) of a second step."""
    inputs = load_inputs(spec)
    gc.collect()
    start = psutil.Process().memory_info().rss
    ctx, _ = build_context(spec, folder / "out", inputs, resume=False)
    batch = next(iter(ctx.loader))
    for _ in range(2):
        with Peak() as peak:
            ctx.micro_step(ctx.model, batch).loss.backward()  # type: ignore[no-untyped-call]
            ctx.optimizer.step()
            ctx.optimizer.zero_grad(set_to_none=True)
    width = int(batch["input_ids"].shape[1])
    del ctx, batch
    gc.collect()
    return peak.peak - start, width


SHARDED_CASES = [CASES[0], CASES[1], CASES[4], CASES[3]]  # sft full, lora; dpo full; checkpointed


def main() -> None:
    sharded = "--sharded" in sys.argv[1:]
    shards = 2 if sharded else 1
    torch.manual_seed(0)  # every rank writes the same model to its own folder
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        config = AutoConfig.for_model("qwen3", **SMALL_QWEN3)
        AutoModelForCausalLM.from_config(config).save_pretrained(folder / "model")
        from trainer_core.builtin.models import builtin_tokenizer

        builtin_tokenizer("builtin:tiny-chat").save_pretrained(folder / "model")
        world = World(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
        say = print if world.is_main else (lambda *_, **__: None)
        say("| case | weights | gradients | optimizer | activations | logits | plan | "
            "measured | plan / measured |")  # fmt: skip
        say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, changes in SHARDED_CASES if sharded else CASES:
            fields = {"model": str(folder / "model"), "dataset": "builtin:tiny-stories",
                      "task": "causal-lm", "per_device_train_batch_size": 4,
                      "gradient_accumulation_steps": 1, "max_seq_length": 256,
                      "validation_split_percentage": 0, "max_train_samples": 8,
                      "group_by_length": False} | changes  # fmt: skip
            if sharded:
                fields |= {"num_processes": 2, "sharding": "fsdp", "device": "cpu"}
            spec = JobSpec.model_validate(fields)
            measured, width = measure(spec, folder)
            measured = int(max_over_ranks(measured, world))
            plan = plan_memory(spec, config, micro_batch=4, seq_len=width, shards=shards)
            acts = plan.activations_checkpointed if plan.checkpointing else plan.activations
            cells = [plan.weights, plan.gradients, plan.optimizer, acts, plan.logits, plan.total,
                     measured]  # fmt: skip
            mib = " | ".join(f"{value / 2**20:.0f}" for value in cells)
            where = f", {shards} shards" if sharded else ""
            say(f"| {name} (width {width}{where}) | {mib} | {plan.total / measured:.2f} |",
                flush=True)  # fmt: skip


def max_over_ranks(value: int, world: World) -> int:
    return -min_over_ranks(-value, world)


if __name__ == "__main__":
    main()
