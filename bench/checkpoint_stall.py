"""Checkpoint stall per save: how long the training thread is blocked, synchronous vs asynchronous.

GPT-2 models of about 0.1M, 10M and 100M parameters with AdamW state (one optimizer step taken).
Synchronous: the training thread copies the state and writes the files itself (``snapshot`` then
``install``, what a save cost before the writer moved the files to a thread). Asynchronous: ``CheckpointWriter.save`` (the thread copies the state to CPU memory;
the files are written by a background thread, whose time is printed as "background write"). The
median of REPEATS saves; before each asynchronous save the previous write has finished, so the
stall is the copy alone (a save issued while the previous write still runs waits for it).

    .venv/bin/python bench/checkpoint_stall.py [--sizes 0.1M,10M,100M] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainerState

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.checkpoint.writer import CheckpointWriter, Staging, install, snapshot

SIZES = {  # n_embd, n_layer, vocab -> about this many parameters
    "0.1M": (32, 2, 1000),
    "10M": (256, 8, 8000),
    "100M": (768, 12, 32000),
}


def _model(
    size: str,
) -> tuple[GPT2LMHeadModel, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    n_embd, n_layer, vocab = SIZES[size]
    config = GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=4, vocab_size=vocab, n_positions=128)
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    ids = torch.randint(0, vocab, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()  # AdamW's state now exists: a checkpoint the size of a real one
    return model, optimizer, scheduler


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0.1M,10M,100M")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| model | parameters | sync stall | async stall | background write |")
    print("|---|---|---|---|---|")
    for size in args.sizes.split(","):
        model, optimizer, scheduler = _model(size)
        parts = {"model": model, "optimizer": optimizer, "scheduler": scheduler,
                 "trainer_state": TrainerState(global_step=1), "state": {"global_step": 1}}  # fmt: skip
        sync, stall = [], []
        with tempfile.TemporaryDirectory() as out:
            writer = CheckpointWriter(Path(out) / "async")
            for _ in range(args.repeats):
                start = time.perf_counter()
                install(Path(out) / "sync", snapshot(staging=Staging(), **parts), 1)  # type: ignore[arg-type]
                sync.append(time.perf_counter() - start)
                writer.save({}, **parts)
                stall.append(writer.stalls[-1])
                writer.collect(block=True)  # the next save starts with no write in flight
            snap = snapshot(staging=Staging(), **parts)  # type: ignore[arg-type]
            start = time.perf_counter()  # what the background thread does, timed on its own
            install(Path(out) / "alone", snap, 1)
            write = time.perf_counter() - start
        n = sum(p.numel() for p in model.parameters())
        print(f"| {size} | {n / 1e6:.2f}M | {statistics.median(sync) * 1e3:,.1f} ms | "
              f"{statistics.median(stall) * 1e3:,.1f} ms | {write * 1e3:,.0f} ms |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
