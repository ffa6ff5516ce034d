"""Packing against length grouping alone and against plain padding, in one run: trained tokens/s
on uneven chat rows (lengths drawn from 16 to 512 tokens; one exchange, the shortest, renders to
about 40), the padding fraction (of the token slots computed), the packing efficiency (trained
tokens over slots) and peak memory.

The model is an ~11M GPT-2 (n_embd 384, 6 layers, 6 heads, on tiny-chat's tokenizer), built from
a config (no download). Each conversation is built-in chat-arithmetic exchanges appended until
the rendered row reaches a length drawn uniformly from 16 to 512 tokens. The three settings train
the same rows with the same (b, K) and seed, each in a fresh process (peak memory is the
process's: RSS on a CPU, allocated memory on a GPU); the figure is the second epoch's (the first
pays the warm-up). Packing on sdpa lays each micro-batch into rows as wide as its window's longest
row (``data.packing``), so it computes no more attention than padding does.

    .venv/bin/python bench/packing.py [--rows 48] [--b 8] [--k 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.testing.recorder import Recorder
from trainer_core.train import train

MODES = {
    "padding": {"group_by_length": False},
    "grouping": {"group_by_length": True},
    "packing": {"group_by_length": True, "packing": True},
}
MAX_LEN = 512


def prepare(root: Path, rows: int) -> tuple[Path, Path]:
    """The ~11M GPT-2's folder and a JSONL of conversations of 16 to 512 tokens."""
    spec = JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic", task="causal-lm")
    tokenizer = load_tokenizer(spec)
    base_model = load_model(spec, tokenizer, None)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    shape = {"n_embd": 384, "n_layer": 6, "n_head": 6}
    model = GPT2LMHeadModel(GPT2Config(**(base_model.config.to_dict() | shape)))
    base = root / "gpt2-11m"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    rng = random.Random(0)
    conversations: list[list[dict[str, str]]] = chat_arithmetic("train")["messages"]  # type: ignore[assignment]
    pool = [[m for m in c if m["role"] != "system"] for c in conversations]
    data = root / "uneven.jsonl"
    with data.open("w") as out:
        for _ in range(rows):
            target, turns = rng.randint(16, MAX_LEN), list[dict[str, str]]()
            while len(turns) < 200:  # ~20 tokens an exchange: 512 tokens long before that
                turns += rng.choice(pool)
                text = tokenizer.apply_chat_template(turns, tokenize=False)
                if len(tokenizer(text)["input_ids"]) >= target:
                    break
            out.write(json.dumps({"messages": turns}) + "\n")
    return base, data


def child(mode: str, base: str, data: str, b: int, k: int) -> None:
    """One setting, alone in this process: prints one JSON line."""
    spec = JobSpec.model_validate(
        {"model": base, "dataset": data, "task": "causal-lm", "per_device_train_batch_size": b,
         "gradient_accumulation_steps": k, "num_train_epochs": 2, "max_seq_length": MAX_LEN,
         "logging_steps": 1, "save_strategy": "no", "validation_split_percentage": 0,
         "learning_rate": 1e-4, "seed": 0, **MODES[mode]}
    )  # fmt: skip
    steps = Recorder()
    with tempfile.TemporaryDirectory() as out:
        train(spec, out, callback=steps)
    epoch = steps.epochs[-1]
    half = steps.steps[len(steps.steps) // 2 :]  # the second epoch's windows
    print(json.dumps({
        "tokens_per_s": epoch["train_items"] / epoch["train_seconds"],
        "padding": statistics.fmean(r["padding_fraction"] for r in half),
        "efficiency": epoch.get("packing_efficiency"),
        "peak_bytes": epoch["peak_memory_bytes"],
        "loss": epoch["train_loss"],
    }))  # fmt: skip


def measure(mode: str, base: Path, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", mode, str(base), str(data),
               str(args.b), str(args.k)]  # fmt: skip
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--b", type=int, default=8)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", nargs=5, metavar=("MODE", "BASE", "DATA", "B", "K"))
    args = parser.parse_args()
    if args.child:
        mode, base, data, b, k = args.child
        child(mode, base, data, int(b), int(k))
        return
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        base, data = prepare(Path(tmp), args.rows)
        for _ in range(args.repeats):
            for mode in MODES:  # interleaved: a slow moment hits every setting alike
                results[mode].append(measure(mode, base, data, args))
    device = "cuda" if torch.cuda.is_available() else f"cpu, {torch.get_num_threads()} threads"
    print(f"uneven chat rows (16-512 tokens): {args.rows} rows, GPT-2 ~11M, b={args.b}, "
          f"K={args.k}, epoch 2, median of {args.repeats}, {device}")  # fmt: skip
    print(f"  {'':9} {'trained tok/s':>13} {'padding':>8} {'efficiency':>10} {'peak MiB':>9} "
          f"{'loss':>7}")  # fmt: skip
    speed = {}
    for mode, runs in results.items():
        speed[mode] = statistics.median(r["tokens_per_s"] for r in runs)
        pad = statistics.median(r["padding"] for r in runs)
        eff = runs[0]["efficiency"]
        peak = statistics.median(r["peak_bytes"] for r in runs) / 2**20
        print(f"  {mode:9} {speed[mode]:13.0f} {pad:8.3f} {eff if eff else '':>10} "
              f"{peak:9.0f} {runs[0]['loss']:7.4f}")  # fmt: skip
    print(f"  packing / grouping {speed['packing'] / speed['grouping']:.2f}x, "
          f"packing / padding {speed['packing'] / speed['padding']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
