"""CUDA checks of the memory-adaptive micro-batch (run by ``bench/gpu_check.sh`` on a lent GPU).

1. A real CUDA out-of-memory error: a run at b=8 measures its peak, then the process may use
   only a few times that (``torch.cuda.set_per_process_memory_fraction``) and the same job asks
   for b=256. It must halve until it fits and end with the weights of the b=8 run.
2. fp16 (with its gradient scaler) and bf16: (8, K=8) against (64, 1).
3. ``per_device_train_batch_size: "auto"`` against the card's memory: what it chose and tried.
Prints a table; asserts nothing. The rows are 512 tokens, so activations dominate the weights.

    python bench/gpu_memory_adaptive.py [--cap 3]
    python bench/gpu_memory_adaptive.py --device cpu   # a smoke run of the script's plumbing
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_vs_k import _write_long_rows
from safetensors.torch import load_file

from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

BASE: dict[str, Any] = {"model": "builtin:tiny-gpt2", "task": "causal-lm", "num_train_epochs": 1,
                        "max_train_samples": 512, "max_eval_samples": 8, "max_seq_length": 512,
                        "per_device_eval_batch_size": 8, "seed": 3}  # fmt: skip


class Sizes(TrainingCallback):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, str]] = []

    def on_batch_size(self, info: dict[str, Any]) -> None:
        b, k = info["micro_batch_size"], info["gradient_accumulation_steps"]
        self.seen.append((int(b), int(k), str(info["reason"])))


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _run(out: Path, **spec: Any) -> tuple[dict[str, torch.Tensor], Sizes, float, int]:
    sizes = Sizes()
    _free()
    start = time.perf_counter()
    train(JobSpec(**{**BASE, **spec}), out, callback=sizes)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return load_file(str(out / "model" / "model.safetensors")), sizes, seconds, peak


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=float, default=3.0, help="memory cap, times the b=8 peak")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    total = torch.cuda.get_device_properties(0).total_memory if cuda else 0
    print(f"# {torch.cuda.get_device_name() if cuda else 'CPU'} {total:,} B")
    print("| case | micro-batches (b, K, why) | max abs dW | seconds | peak MiB |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "long.jsonl"
        _write_long_rows(data, 520)
        BASE.update(dataset=str(data), eval_dataset=str(data), device=args.device)
        small, s_sizes, s_sec, s_peak = _run(root / "small", per_device_train_batch_size=8,
                                             effective_batch_size=256)  # fmt: skip
        print(
            f"| b=8, K=32 (reference) | {s_sizes.seen} | 0 | {s_sec:.1f} | {s_peak / 2**20:.0f} |"
        )
        if cuda:
            _free()
            fraction = args.cap * s_peak / total
            torch.cuda.set_per_process_memory_fraction(fraction)
            label = f"b=256 under a cap of {args.cap:g}x that peak (fraction {fraction:.2e})"
        else:  # no real OOM on a CPU: the test-only failpoint stands in for one
            os.environ["GRADACC_FAILPOINT_OOM_ABOVE"] = "32"
            label = "b=256, failpoint above 32 rows (CPU smoke run)"
        big, sizes, sec, peak = _run(root / "big", per_device_train_batch_size=256,
                                     effective_batch_size=256)  # fmt: skip
        if cuda:
            torch.cuda.set_per_process_memory_fraction(1.0)
        else:
            os.environ.pop("GRADACC_FAILPOINT_OOM_ABOVE")
        print(
            f"| {label} | {sizes.seen} | {_diff(big, small):.2e} | {sec:.1f} | {peak / 2**20:.0f} |"
        )
        for precision in ("fp16", "bf16") if cuda else ("bf16",):
            one, _, sec1, peak1 = _run(root / f"{precision}1", per_device_train_batch_size=64,
                                       effective_batch_size=64, mixed_precision=precision)  # fmt: skip
            acc, _, seck, peakk = _run(root / f"{precision}k", per_device_train_batch_size=8,
                                       effective_batch_size=64, mixed_precision=precision)  # fmt: skip
            print(f"| {precision}: (8, 8) vs (64, 1) | peaks {peakk / 2**20:.0f} vs "
                  f"{peak1 / 2**20:.0f} MiB | {_diff(one, acc):.2e} | {seck:.1f} vs {sec1:.1f} | |")  # fmt: skip
        _, auto, sec, peak = _run(root / "auto", per_device_train_batch_size="auto",
                                  effective_batch_size=512)  # fmt: skip
        print(
            f"| auto, effective 512, the card's budget | {auto.seen} | | {sec:.1f} | {peak / 2**20:.0f} |"
        )


if __name__ == "__main__":
    main()
