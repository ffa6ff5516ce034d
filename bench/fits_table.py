"""What fits where, from the memory plan: each real shape (Qwen3 0.6B, 1.7B, 8B; Llama-3.1 8B, 70B)
trained in full (AdamW), with LoRA (r 16 on q and v) and as a 4-bit base with LoRA, at one row of
4,096 tokens, bf16 autocast over fp32 weights, gradient checkpointing, logits in chunks of 1,024,
K = 1; the plan's GiB per device on 1, 2, 4 and 8 sharded devices (a 4-bit base is not sharded:
one device), marked where it exceeds 80 GiB. Activations are measured on fake tensors: no memory,
a few seconds for a 70B. ``python bench/fits_table.py [--device-gb 80]`` (the docs' table)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from transformers import AutoConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer_core.model.memory_plan import plan_memory
from trainer_core.spec.job import JobSpec
from trainer_core.spec.shapes import SHAPES

METHODS: dict[str, dict[str, Any]] = {
    "full": {},
    "LoRA": {"lora": {"r": 16}},
    "QLoRA": {"lora": {"r": 16}, "load_in_4bit": True},
}
DEVICES = (1, 2, 4, 8)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device-gb", type=float, default=80.0)
    parser.add_argument("--seq-len", type=int, default=4096)
    args = parser.parse_args()
    device = int(args.device_gb * 2**30)
    print(f"| model | method | {' | '.join(f'{n} x {args.device_gb:g} GiB' for n in DEVICES)} |")
    print(f"|---|---|{'---:|' * len(DEVICES)}")
    for name, fields in SHAPES.items():
        config = AutoConfig.for_model(**fields)
        for method, changes in METHODS.items():
            cells = []
            for n in DEVICES:
                if method == "QLoRA" and n > 1:
                    cells.append("—")
                    continue
                sharded = {"num_processes": n, "sharding": "fsdp"} if n > 1 else {}
                spec = JobSpec(
                    model=name,
                    dataset="builtin:chat-arithmetic",
                    task="causal-lm",
                    per_device_train_batch_size=1,
                    max_seq_length=args.seq_len,
                    gradient_checkpointing=True,
                    loss_chunk_tokens=1024,
                    mixed_precision="bf16",
                    **changes,
                    **sharded,
                )
                plan = plan_memory(
                    spec, config, micro_batch=1, seq_len=args.seq_len, device_bytes=device, shards=n
                )
                gib = plan.total / 2**30
                cells.append(f"{gib:.1f}" if plan.fits else f"✗ {gib:.0f}")
            short = name.removeprefix("builtin:").removesuffix("-shape")
            print(f"| {short} | {method} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
