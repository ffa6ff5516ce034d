"""Where a micro-step's host time goes: the core against the hand-written exact loop, by profile.

Runs ``bench/real_size.py``'s models (the same rows, b = 4, K = 4, 2 epochs, the default
checkpoint policy for the core) under cProfile, in this process, and sorts every function's own
time into buckets by where its code lives:

- ``torch C ops``: built-in functions and methods (the kernels, autograd's engine, the optimizer's
  foreach ops): the compute both sides must do;
- ``torch python`` / ``transformers python``: the libraries' Python (the model's forward code,
  ``clip_grad_norm_``, AdamW's step) — also on both sides;
- ``trainer_core``: the core's own Python (meters, stop polling, failpoint checks, progress
  callbacks, the plan's batches);
- ``other``: the standard library and the rest (threading, json, tqdm, logging).

Both sides are profiled over the same window of epoch 2: from the end of its first optimizer
step to the end of its last (44 micro-steps), so loading, warm-up, evaluation and the end-of-epoch
saves are outside it, while epoch 1's checkpoint is being written beside it as in a real job.
Only the main thread is profiled: the checkpoint writer's thread is not in the figures (its cost
is the CPU it takes from the main thread, which shows as slower C ops). Profiling inflates Python
calls several times over, so the per-micro-step figures are an upper bound on the host work.

    .venv/bin/python bench/step_overhead.py [--models gpt2-11m,bert-base,tiny-gpt2] [--backend pytorch]

``tiny-gpt2`` is the built-in tiny model on gpt2-11m's rows: its micro-steps are short, so the host
work's share shows.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import real_size

from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

BUCKETS = ("torch C ops", "torch python", "transformers python", "trainer_core", "other")
STEPS = real_size.EPOCHS * real_size.ROWS // (real_size.B * real_size.K)
FIRST = STEPS // real_size.EPOCHS + 1  # epoch 2's first optimizer step: profiling starts after it
MICRO_STEPS = (STEPS - FIRST) * real_size.K


def bucket(filename: str) -> str:
    if filename == "~" or filename.startswith("<"):
        return "torch C ops"  # built-ins: nearly all are torch's ops here
    if "/trainer_core/" in filename:
        return "trainer_core"
    if "/transformers/" in filename:
        return "transformers python"
    if "/torch/" in filename:
        return "torch python"
    return "other"


class Window:
    """cProfile on from the end of optimizer step FIRST to the end of step STEPS."""

    def __init__(self) -> None:
        self.profiler = cProfile.Profile()

    def on_step(self, step: int) -> None:
        if step == FIRST:
            self.profiler.enable()
        elif step == STEPS:
            self.profiler.disable()

    def buckets(self) -> tuple[dict[str, float], list[tuple[float, str]]]:
        stats: Any = pstats.Stats(self.profiler)
        totals: dict[str, float] = defaultdict(float)
        core: list[tuple[float, str]] = []
        for (filename, line, name), (_, _, own, _, _) in stats.stats.items():
            where = bucket(filename)
            totals[where] += own
            if where == "trainer_core":
                short = filename.split("/trainer_core/")[1]
                core.append((own, f"{short}:{line} {name}"))
        return totals, sorted(core, reverse=True)


class _Steps(TrainingCallback):
    def __init__(self, window: Window) -> None:
        self.window = window

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.window.on_step(int(progress["step"]))


def profile_core(spec: JobSpec) -> Window:
    window = Window()
    with tempfile.TemporaryDirectory() as out:
        train(spec, Path(out), callback=_Steps(window))
    return window


def profile_hand(spec: JobSpec) -> Window:
    window = Window()
    real_size.hand(spec, on_step=window.on_step)
    return window


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="gpt2-11m,bert-base")
    parser.add_argument("--backend", default="pytorch")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    print(f"# own time per micro-step (µs), {MICRO_STEPS} micro-steps of b={real_size.B}, "
          f"K={real_size.K}, backend {args.backend}, main thread, under cProfile")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models.split(","):
            tiny = kind == "tiny-gpt2"  # the built-in model on gpt2-11m's rows
            folder, data, task = real_size.build("gpt2-11m" if tiny else kind, Path(tmp))
            spec = real_size.spec_of(folder, data, task, args.backend)
            if tiny:
                spec = spec.model_copy(update={"model": "builtin:tiny-gpt2"})
            ours, top = profile_core(spec).buckets()
            theirs, _ = profile_hand(spec).buckets()
            print(f"\n## {kind}\n| bucket | core | hand exact loop | core - hand |")
            print("|---|---:|---:|---:|")
            for name in (*BUCKETS, "total"):
                a = sum(ours.values()) if name == "total" else ours[name]
                b = sum(theirs.values()) if name == "total" else theirs[name]
                per = 1e6 / MICRO_STEPS
                print(f"| {name} | {a * per:,.0f} | {b * per:,.0f} | {(a - b) * per:+,.0f} |")
            print("\nthe core's own functions with the most own time (µs per micro-step):")
            for own, where in top[: args.top]:
                print(f"- {own * 1e6 / MICRO_STEPS:,.1f} {where}")


if __name__ == "__main__":
    main()
