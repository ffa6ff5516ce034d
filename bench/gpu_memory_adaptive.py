"""CUDA checks of the memory-adaptive micro-batch (run by ``bench/gpu_check.sh`` on a lent GPU).

1. A real CUDA out-of-memory error: the process may use only a small fraction of the card
   (``torch.cuda.set_per_process_memory_fraction``), the job asks for a micro-batch that does not
   fit; it must halve until it fits and end with the weights of a run that started small.
2. fp16 (with its gradient scaler) and bf16: (b, K) against (b·K, 1).
3. ``per_device_train_batch_size: "auto"`` against the card's memory: what it chose and tried.
Prints a table; asserts nothing.

    python bench/gpu_memory_adaptive.py [--fraction 0.02]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from safetensors.torch import load_file

from trainer_core.callbacks import TrainingCallback
from trainer_core.spec import JobSpec
from trainer_core.train import train

BASE = {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories", "task": "causal-lm",
        "num_train_epochs": 1, "max_train_samples": 512, "max_eval_samples": 16,
        "max_seq_length": 512, "device": "cuda", "seed": 3}  # fmt: skip


class Sizes(TrainingCallback):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, str]] = []

    def on_batch_size(self, info: dict[str, object]) -> None:
        b, k = info["micro_batch_size"], info["gradient_accumulation_steps"]
        self.seen.append((int(b), int(k), str(info["reason"])))  # type: ignore[call-overload]


def _run(out: Path, **spec: object) -> tuple[dict[str, torch.Tensor], Sizes]:
    sizes = Sizes()
    train(JobSpec(**{**BASE, **spec}), out, callback=sizes)
    return load_file(str(out / "model" / "model.safetensors")), sizes


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fraction", type=float, default=0.02)
    args = parser.parse_args()
    print(
        f"# {torch.cuda.get_device_name()} {torch.cuda.get_device_properties(0).total_memory:,} B"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small, _ = _run(root / "small", per_device_train_batch_size=8, effective_batch_size=256)
        torch.cuda.set_per_process_memory_fraction(args.fraction)
        big, sizes = _run(root / "big", per_device_train_batch_size=256, effective_batch_size=256)
        torch.cuda.set_per_process_memory_fraction(1.0)
        print(f"| real CUDA OOM at fraction {args.fraction} | sizes {sizes.seen} | "
              f"max dW vs b=8 start {_diff(big, small):.2e} |")  # fmt: skip
        for precision in ("fp16", "bf16"):
            one, _ = _run(root / f"{precision}1", per_device_train_batch_size=64,
                          effective_batch_size=64, mixed_precision=precision)  # fmt: skip
            acc, _ = _run(root / f"{precision}k", per_device_train_batch_size=8,
                          effective_batch_size=64, mixed_precision=precision)  # fmt: skip
            print(f"| {precision} (8, 8) vs (64, 1) | max dW {_diff(one, acc):.2e} |")
        _, auto = _run(root / "auto", per_device_train_batch_size="auto", effective_batch_size=1024)
        print(f"| auto, effective 1024, 90 % of the card | {auto.seen} |")


if __name__ == "__main__":
    main()
