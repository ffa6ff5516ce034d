"""Window-local length grouping on chat data of mixed lengths: trained tokens/s, the padding
fraction and the weight gap, grouping off and on, same (b, K), same seed.

The conversations are built-in chat-arithmetic ones with 1 to 6 question/answer turns each, so
rows run from about 20 to about 130 tokens. Each setting trains once per repeat (interleaved);
the median of the repeats is printed. The gap is max |w_on - w_off| after training: grouping
changes only the order of the sums inside a window, so it is fp32 rounding.

    .venv/bin/python bench/group_by_length.py [--repeats 3] [--rows 512] [--b 4] [--k 8]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.spec.job import JobSpec
from trainer_core.testing.recorder import Recorder
from trainer_core.train import train


def mixed_lengths(path: Path, rows: int) -> Path:
    rng = random.Random(0)
    pool = chat_arithmetic("train")["messages"]
    with path.open("w") as out:
        for _ in range(rows):
            turns: list[Any] = []
            for conversation in rng.sample(pool, rng.randint(1, 6)):
                turns += [m for m in conversation if m["role"] != "system"]  # type: ignore[union-attr]
            out.write(json.dumps({"messages": turns}) + "\n")
    return path


def once(data: Path, out: Path, group: bool, args: argparse.Namespace) -> dict[str, float]:
    spec = JobSpec.model_validate(
        {"model": "builtin:tiny-chat", "dataset": str(data), "task": "causal-lm",
         "per_device_train_batch_size": args.b, "gradient_accumulation_steps": args.k,
         "num_train_epochs": 1, "max_seq_length": 256, "logging_steps": 1,
         "save_strategy": "no", "group_by_length": group, "max_eval_samples": 8}
    )  # fmt: skip
    steps = Recorder()
    train(spec, out, callback=steps)
    epoch = steps.epochs[-1]
    padding = statistics.fmean(r["padding_fraction"] for r in steps.steps)
    return {"tokens_per_s": epoch["train_items"] / epoch["train_seconds"], "padding": padding}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--b", type=int, default=4)
    parser.add_argument("--k", type=int, default=8)
    args = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = mixed_lengths(root / "mixed.jsonl", args.rows)
        for repeat in range(args.repeats):
            for group in (False, True):
                out = root / f"{group}-{repeat}"
                results[group].append(once(data, out, group, args))
        weights = {g: load_file(str(root / f"{g}-0" / "model" / "model.safetensors"))
                   for g in (False, True)}  # fmt: skip
    gap = max(float((weights[True][k] - weights[False][k]).abs().max()) for k in weights[True])
    print(f"chat, mixed lengths: {args.rows} rows, b={args.b}, K={args.k}, "
          f"median of {args.repeats}")  # fmt: skip
    for group in (False, True):
        tps = statistics.median(r["tokens_per_s"] for r in results[group])
        pad = statistics.median(r["padding"] for r in results[group])
        print(f"  group_by_length={group!s:5}  {tps:8.0f} trained tokens/s  padding {pad:.3f}")
    off = statistics.median(r["tokens_per_s"] for r in results[False])
    on = statistics.median(r["tokens_per_s"] for r in results[True])
    print(f"  speed-up {on / off:.2f}x; weight gap on vs off {gap:.2e}")


if __name__ == "__main__":
    main()
