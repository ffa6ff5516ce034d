"""The sharded core (``sharding: "fsdp"``, plain PyTorch backend) against a hand-written FSDP2 loop
at the same settings, on two CPU processes (gloo): the loop a user would write with
``fully_shard`` on each block and the root, a ``DistributedSampler``, the model's mean loss / K,
``set_requires_gradient_sync`` off inside a window, clip, step. A Qwen3-shaped decoder (hidden
256, 4 layers, untied, tiny-chat's tokenizer), 256 rows of tiny-stories at b 4, K 4, W 2, two
epochs, no evaluation, rows unsorted (as the hand loop draws them; the core's length grouping,
its default, made it 1.18x the hand loop). Timed: the training loops only (the core's epochs'
``train_seconds``; the hand loop's epochs), paired and interleaved ``--repeats`` times; the ratio
is the core's samples/s over the hand loop's (1.0: sharding through the core costs nothing).

    OMP_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc_per_node 2 bench/fsdp_vs_loop.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.data import DataLoader, DistributedSampler
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

B, K, W, EPOCHS, ROWS = 4, 4, 2, 2, 256
SHAPE = {
    "vocab_size": 384,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "tie_word_embeddings": False,
}


def spec_for(model: Path) -> JobSpec:
    return JobSpec(
        model=str(model),
        dataset="builtin:tiny-stories",
        task="causal-lm",
        per_device_train_batch_size=B,
        gradient_accumulation_steps=K,
        num_processes=W,
        sharding="fsdp",
        device="cpu",
        num_train_epochs=EPOCHS,
        max_train_samples=ROWS,
        validation_split_percentage=0,
        max_seq_length=128,
        learning_rate=1e-3,
        save_strategy="no",
        seed=1,
        group_by_length=False,
    )


def core(spec: JobSpec, out: Path) -> float:
    result = train(spec, out, resume=False)
    return sum(m["train_seconds"] for m in result.metrics)


def hand(spec: JobSpec) -> float:
    """The hand-written loop; its training seconds."""
    tokenizer = load_tokenizer(spec)
    rows = load_job_data(spec, tokenizer).train.input_ids
    model = load_model(spec, tokenizer, None)
    policy = MixedPrecisionPolicy(reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model.model.embed_tokens, mp_policy=policy)
    fully_shard(model.lm_head, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate)

    def collate(batch: list[Any]) -> dict[str, torch.Tensor]:
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), int(tokenizer.pad_token_id))
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, : len(r)] = torch.as_tensor(r)
            mask[i, : len(r)] = 1
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": ids.masked_fill(mask == 0, -100),
        }

    sampler = DistributedSampler(list(rows), shuffle=True, seed=1)
    loader = DataLoader(list(rows), batch_size=B, sampler=sampler, collate_fn=collate)
    seconds = 0.0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        started = time.perf_counter()
        for i, batch in enumerate(loader):
            last = (i + 1) % K == 0 or i + 1 == len(loader)
            model.set_requires_gradient_sync(last)
            (model(**batch).loss / K).backward()
            if last:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        seconds += time.perf_counter() - started
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    root = Path(tempfile.gettempdir()) / "gradacc-fsdp-bench"
    model = root / "model"
    if rank == 0 and not (model / "config.json").is_file():
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3", **SHAPE)).save_pretrained(
            model
        )
        builtin_tokenizer("builtin:tiny-chat").save_pretrained(model)
    dist.barrier()
    spec = spec_for(model)
    samples = ROWS * EPOCHS
    ratios, rows = [], []
    for repeat in range(args.repeats):
        ours = core(spec, root / f"core-{repeat}")
        theirs = hand(spec)
        ratios.append(theirs / ours)
        rows.append((samples / ours, samples / theirs))
    if rank == 0:
        print("| repeat | core samples/s | hand FSDP2 loop samples/s | core / hand |")
        print("|---|---:|---:|---:|")
        for i, ((a, b), r) in enumerate(zip(rows, ratios, strict=True)):
            print(f"| {i + 1} | {a:.1f} | {b:.1f} | {r:.3f} |")
        print(f"median core / hand: {statistics.median(ratios):.3f}")
        print(json.dumps({"median_ratio": statistics.median(ratios)}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
