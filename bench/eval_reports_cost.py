"""What the evaluation reports cost (issue 21): the same tiny job with them on (the default:
per-class figures and misclassified rows for a classifier, 4 greedy samples of up to 64 tokens at
each evaluation for a causal LM) and off (``eval_sample_count`` 0), timed in this process from
``train()`` to its return, alternating, median of --repeats.

    .venv/bin/python bench/eval_reports_cost.py [--repeats 3] [--epochs 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

JOBS = {
    "tiny-gpt2 (causal-lm)": {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories",
                              "task": "causal-lm"},
    "tiny-chat (chat)": {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic",
                         "task": "causal-lm"},
    "tiny-bert (classification)": {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
}  # fmt: skip
COMMON = {"max_train_samples": 128, "max_eval_samples": 16, "per_device_train_batch_size": 4,
          "gradient_accumulation_steps": 4, "learning_rate": 5e-3, "seed": 1}  # fmt: skip


def seconds(spec: JobSpec) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        train(spec, Path(out))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as bench/core_vs_loop.py: steadier on a shared 2-core box
    print(f"# {args.epochs} epochs, 128 rows, b 4, K 4, one evaluation an epoch (16 rows), "
          f"median of {args.repeats}, 1 torch thread")  # fmt: skip
    print("| job | reports on (s) | off (s) | cost |")
    print("|---|---:|---:|---:|")
    for name, job in JOBS.items():
        spec = JobSpec(**job, **COMMON, num_train_epochs=args.epochs)
        off = spec.model_copy(update={"eval_sample_count": 0})
        on_times, off_times = [], []
        for _ in range(args.repeats):
            on_times.append(seconds(spec))
            off_times.append(seconds(off))
        on, bare = statistics.median(on_times), statistics.median(off_times)
        print(f"| {name} | {on:.2f} | {bare:.2f} | {on / bare - 1:+.1%} |", flush=True)


if __name__ == "__main__":
    main()
