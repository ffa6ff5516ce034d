"""The memory plan against ``torch.cuda.max_memory_allocated`` on a GPU (bench/gpu_check.sh): real
architectures (``builtin:*-shape``: Qwen3-0.6B, 1.7B, 8B, weights made from the seed) trained by
the core's own pieces (``load_inputs``, ``build_context``, the objective's micro-step, the
optimizer) in bf16 mixed precision; the peak of the second step (the optimizer's state exists by
then) against the plan at the batch's width. Full and LoRA, checkpointed and chunked, a 4-bit
base (QLoRA). With ``--sharded`` under torchrun (one GPU a rank): FSDP2 over the GPUs, each rank's
peak against the plan at that many shards (the larger is shown).

    python bench/gpu_plan.py [--cases 0.6b-full,...]
    torchrun --nproc_per_node N bench/gpu_plan.py --sharded
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer_core.builtin.models import builtin_config, builtin_tokenizer
from trainer_core.distributed import World, min_over_ranks
from trainer_core.loop.build import build_context, load_inputs
from trainer_core.model.memory_plan import plan_memory
from trainer_core.model.precision import autocast
from trainer_core.spec.job import JobSpec

LONG = {"dataset": "builtin:tiny-stories", "max_seq_length": 1024}
CASES: dict[str, dict[str, Any]] = {
    "0.6b-full": {"model": "builtin:qwen3-0.6b-shape", "per_device_train_batch_size": 4},
    "0.6b-full-chunked": {
        "model": "builtin:qwen3-0.6b-shape",
        "per_device_train_batch_size": 4,
        "loss_chunk_tokens": 1024,
    },
    "1.7b-lora-checkpointed": {
        "model": "builtin:qwen3-1.7b-shape",
        "lora": {"r": 16},
        "per_device_train_batch_size": 8,
        "gradient_checkpointing": True,
    },
    "1.7b-qlora": {
        "model": "builtin:qwen3-1.7b-shape",
        "lora": {"r": 16},
        "load_in_4bit": True,
        "per_device_train_batch_size": 4,
    },
    "8b-lora-checkpointed-chunked": {
        "model": "builtin:qwen3-8b-shape",
        "lora": {"r": 16},
        "per_device_train_batch_size": 2,
        "gradient_checkpointing": True,
        "loss_chunk_tokens": 1024,
    },
}
SHARDED = ["0.6b-full", "1.7b-lora-checkpointed"]


def measure(spec: JobSpec, out: Path) -> tuple[int, int]:
    """(peak bytes of the second step, the batch's width)."""
    inputs = load_inputs(spec)
    ctx, _ = build_context(spec, out, inputs, resume=False)
    batch = {
        k: v.to(ctx.device) if isinstance(v, torch.Tensor) else v
        for k, v in next(iter(ctx.loader)).items()
    }
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with autocast(spec.mixed_precision, ctx.device):  # as the plain loop computes
            step = ctx.micro_step(ctx.model, batch)
        step.loss.backward()  # type: ignore[no-untyped-call]
        ctx.optimizer.step()
        ctx.optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    peak, width = torch.cuda.max_memory_allocated(), int(batch["input_ids"].shape[1])
    del ctx, batch, step
    gc.collect()
    torch.cuda.empty_cache()
    return peak, width


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--sharded", action="store_true")
    args = parser.parse_args()
    world = World(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
    names = SHARDED if args.sharded else args.cases.split(",")
    total = torch.cuda.get_device_properties(0).total_memory
    if world.is_main:
        print(f"{torch.cuda.get_device_name(0)}, {total / 2**30:.0f} GiB; {world.size} rank(s)")
        print("| case | width | plan GiB | max_memory_allocated GiB | plan / measured |")
        print("|---|---:|---:|---:|---:|")
    for name in names:
        fields = {
            "task": "causal-lm",
            **LONG,
            "mixed_precision": "bf16",
            "device": "cuda",
            "gradient_accumulation_steps": 1,
            "validation_split_percentage": 0,
            "max_train_samples": 64,
            "group_by_length": False,
            **CASES[name],
        }
        if args.sharded:
            fields |= {"num_processes": world.size, "sharding": "fsdp"}
        spec = JobSpec.model_validate(fields)
        with tempfile.TemporaryDirectory() as out:
            try:
                peak, width = measure(spec, Path(out))
            except torch.OutOfMemoryError:
                peak, width = -1, 0
        peak = -min_over_ranks(-peak, world)  # the larger rank's
        config = builtin_config(spec.model, builtin_tokenizer(spec.model))
        shards = world.size if args.sharded else 1
        plan = plan_memory(
            spec,
            config,
            micro_batch=int(spec.per_device_train_batch_size),
            seq_len=max(width, 1),
            device_bytes=total,
            shards=shards,
        )
        if world.is_main:
            ratio = f"{plan.total / peak:.2f}" if peak > 0 else "out of memory"
            print(
                f"| {name}{f' ({shards} shards)' if args.sharded else ''} | {width} | "
                f"{plan.total / 2**30:.2f} | {peak / 2**30:.2f} | {ratio} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
