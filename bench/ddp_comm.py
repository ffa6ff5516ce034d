"""Communication saved by accumulation: 2 data-parallel processes, K in {1, 4, 8}, gradients
all-reduced once per window (the core) or after every micro-batch (DDP without ``no_sync``).

Prints, per (K, mode): samples/s of the epoch, gradient all-reduces and bytes all-reduced per
optimizer step (counted by ``trainer_core.testing.comm_counter.CommCounter``, a DDP communication hook;
bytes are the buffers each rank hands to the all-reduce). Same data and (b, K) for both modes:
the weights agree, only the traffic differs. The numbers are printed; nothing is asserted.

    .venv/bin/python bench/ddp_comm.py [--ks 1,4,8] [--rows 2048] [--batch 8] [--device cpu]

It starts ``torchrun --nproc_per_node 2`` on itself (gloo on CPUs, NCCL with ``--device cuda``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _rank_main(args: argparse.Namespace) -> None:
    from trainer_core.backends.pytorch import PlainLoop
    from trainer_core.distributed import launched_world, leave, observe_ddp
    from trainer_core.spec.job import JobSpec
    from trainer_core.testing.comm_counter import CommCounter
    from trainer_core.train import train

    counter = CommCounter()
    observe_ddp(counter.attach)
    world = launched_world()
    windowed = PlainLoop._sync_context
    rows: list[dict[str, Any]] = []

    def epoch(k: int) -> dict[str, Any]:
        counter.reset()
        spec = JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment",
                       num_train_epochs=1, max_train_samples=args.rows, max_eval_samples=16,
                       per_device_train_batch_size=args.batch, gradient_accumulation_steps=k,
                       num_processes=world.size, device=args.device)  # fmt: skip
        with tempfile.TemporaryDirectory() as out:
            metrics: dict[str, Any] = train(spec, Path(out), resume=False).metrics[-1]
        return metrics

    epoch(1)  # warm-up: the first run in a process pays one-off costs
    for k in [int(x) for x in args.ks.split(",")]:
        for mode in ("per window", "every micro-batch"):
            # The "every micro-batch" arm: no no_sync(), DDP all-reduces after each backward.
            PlainLoop._sync_context = (  # type: ignore[method-assign]
                windowed if mode == "per window" else lambda self, batch: contextlib.nullcontext()
            )
            runs = [epoch(k) for _ in range(args.repeats)]  # the counts are the last run's
            steps = runs[-1]["optimizer_steps"]
            rows.append({"k": k, "mode": mode,
                         "samples_per_second": max(r["samples_per_second"] for r in runs),
                         "syncs_per_step": counter.syncs / steps,
                         "bytes_per_step": counter.bytes / steps})  # fmt: skip
    if world.is_main:
        Path(args.report).write_text(json.dumps(rows))
    leave(world)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ks", default="1,4,8")
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="samples/s: the best of these")
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    if "RANK" in os.environ:
        _rank_main(args)
        return
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node=2", __file__, *sys.argv[1:], "--report", str(report)]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        subprocess.run(command, env=env, check=True, cwd=ROOT)
        rows = json.loads(report.read_text())
    print(f"2 processes, b = {args.batch}, {args.rows} rows, tiny-bert, device {args.device}, "
          f"best of {args.repeats}\n")  # fmt: skip
    print("| K | all-reduce | samples/s | all-reduces / step | MB all-reduced / step |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['mode']} | {r['samples_per_second']:,.0f} | "
              f"{r['syncs_per_step']:.2f} | {r['bytes_per_step'] / 1e6:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
