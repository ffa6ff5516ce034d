"""Where the whole process's time goes, phase by phase: ``python -m trainer_core run`` against
``bench/core_vs_loop.py``'s hand-written loop on the same tiny 40-epoch job.

Each side runs in a fresh process (one torch thread, as in core_vs_loop) with wall-clock
wrappers around its phases; nothing is profiled, so the figures are the real ones:

- ``start and exit``: the interpreter's start and teardown (the parent's clock minus the script's);
- ``imports``: from the script's first line to the job's first line (torch, transformers, the core);
- ``data``: tokenizing (the core: ``load_inputs``, from its cache after the first run; the hand
  loop: one tokenizer call per split);
- ``model and plan``: loading the model, building the optimizer, the epoch plan, the resume check;
- ``train steps``: the epochs' own clocks (forward, backward, optimizer steps);
- ``evaluation``; ``checkpoints``: the main thread's part of the per-epoch saves (the core only);
- ``final save``: the model, metrics and summary at the end;
- ``the rest``: what remains of the run (epoch ends, callbacks, the CLI's own lines).

Median of --repeats alternating runs; GRADACC_HOME is a fresh folder warmed by one untimed core
run, so the core reads its data cache as a rerun does.

    .venv/bin/python bench/fixed_cost.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()
HERE = Path(__file__).resolve().parent
PHASES = ("start and exit", "imports", "data", "model and plan", "train steps", "evaluation",
          "checkpoints", "final save", "the rest")  # fmt: skip
clock: dict[str, float] = defaultdict(float)


def timed(owner: Any, name: str, phase: str) -> None:
    """Replace ``owner.name`` with a wrapper that adds its wall time to ``clock[phase]``."""
    inner: Callable[..., Any] = getattr(owner, name)

    @wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            clock[phase] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def core_side(spec_file: str, out: str) -> None:
    sys.path.insert(0, str(HERE.parent))
    import trainer_core.__main__ as cli
    import trainer_core.train as core
    from trainer_core.loop import run, saving

    for owner, name, phase in ((core, "load_inputs", "data"), (core, "build_context", "model and plan"),
                               (core, "_finish", "final save"), (run, "evaluate", "evaluation"),
                               (saving.RunCheckpoints, "save", "checkpoints")):  # fmt: skip
        timed(owner, name, phase)
    clock["imports"] = time.perf_counter() - STARTED
    begun = time.perf_counter()
    cli.main(["run", spec_file, "--output-dir", out])
    metrics = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    clock["train steps"] = sum(m["train_seconds"] for m in metrics)
    report(time.perf_counter() - begun)


def hand_side(spec_file: str, out: str) -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import core_vs_loop
    import torch  # noqa: F401  # what the hand loop imports, so "imports" means the same
    import transformers  # noqa: F401

    import trainer_core.builtin.corpus
    import trainer_core.model.load  # noqa: F401

    clock["imports"] = time.perf_counter() - STARTED
    begun = time.perf_counter()
    core_vs_loop.hand_loop(Path(spec_file), Path(out), clock)
    report(time.perf_counter() - begun)


def report(job_seconds: float) -> None:
    clock["the rest"] = job_seconds - sum(v for k, v in clock.items() if k != "imports")
    clock["script"] = time.perf_counter() - STARTED
    print("PHASES " + json.dumps(clock))


def timed_run(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=HERE.parent)
    total = time.perf_counter() - start
    line = next(x for x in done.stdout.splitlines() if x.startswith("PHASES "))
    phases: dict[str, float] = json.loads(line[len("PHASES ") :])
    phases["start and exit"] = total - phases.pop("script")
    phases["total"] = total
    return phases


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", nargs=3, metavar=("SIDE", "SPEC", "OUT"))
    args = parser.parse_args()
    if args.side:
        side, spec_file, out = args.side
        (core_side if side == "core" else hand_side)(spec_file, out)
        return 0
    sys.path.insert(0, str(HERE))
    from core_vs_loop import SPEC

    runs: dict[str, list[dict[str, float]]] = {"core": [], "hand": []}
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "GRADACC_HOME": str(Path(scratch) / "home")}  # fmt: skip
        spec_file = Path(scratch) / "spec.json"
        spec_file.write_text(json.dumps(SPEC))
        for i in range(args.repeats + 1):
            for side in ("core", "hand"):
                out = Path(scratch) / f"{side}{i}"
                out.mkdir()
                cmd = [sys.executable, __file__, "--side", side, str(spec_file), str(out)]
                phases = timed_run(cmd, env)
                if i > 0:  # run 0 warms the data cache (and the page cache) for both
                    runs[side].append(phases)
    print(f"# tiny 40-epoch job, whole process, seconds, median of {args.repeats}")
    print("| phase | core | hand-written | core - hand |")
    print("|---|---:|---:|---:|")
    for phase in (*PHASES, "total"):
        core = statistics.median(r.get(phase, 0.0) for r in runs["core"])
        hand = statistics.median(r.get(phase, 0.0) for r in runs["hand"])
        print(f"| {phase} | {core:.2f} | {hand:.2f} | {core - hand:+.2f} |")
    pairs = zip(runs["core"], runs["hand"], strict=True)
    ratio = statistics.median(h["total"] / c["total"] for c, h in pairs)
    print(f"\nhand / core, median of the pairs: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
