"""Rows vs time to the first optimizer step and memory, cold (empty data cache) and cached.

Each measurement is a fresh process that imports torch and transformers first (not timed), then
calls ``train()`` on a generated CSV (tiny-bert, ``max_seq_length`` 128, rows of 20-60 words,
b 8, K 4) with a ``DataCache`` and stops at the first optimizer step. Printed per run: seconds from
``train()`` to the first step, rows/s of that (cold: tokenization dominates), growth of the peak
RSS over the RSS before ``train()``, and the anonymous (non-file-backed) RSS growth at the first
step, where the cold seconds go (reading and splitting the file, the label pass, the tokenizing
map, the model), and the ceiling: the fast tokenizer's own batch rate on the same rows on ONE core
(``RAYON_NUM_THREADS=1``) times the processes the core gives tokenizing, with the cold rate's
share of it. The tokenizer's batch call spreads over every core by itself (1.9 cores busy on this
2-core box), so its default rate is already a multi-core figure; it is printed last. Memory-mapped Arrow
pages count in RSS as file-backed pages the kernel can drop; the
``datasets.map`` worker processes are not counted here. Torch runs one thread (see ``child``).

    .venv/bin/python bench/data_scaling.py --rows 25000,100000,400000,1600000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _words(n: int, rng: random.Random) -> list[str]:
    letters = "etaoinshrdlucmfwypvbgk"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(n)]


def generate_csv(path: Path, rows: int) -> None:
    rng = random.Random(rows)
    vocabulary = _words(2000, rng)
    with path.open("w") as out:
        out.write("text,label\n")
        for i in range(rows):
            text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(20, 60)))
            out.write(f"{text},{'pos' if i % 2 else 'neg'}\n")


def _status() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def child(csv: Path, cache_dir: Path) -> None:
    import torch  # imports are not what is measured
    import transformers  # noqa: F401

    # One torch thread: on a shared 2-core box two spinning OpenMP threads made a tiny model's
    # steps ~9x slower (measured), which would drown what this measures.
    torch.set_num_threads(1)

    import trainer_core.data.load as load
    import trainer_core.train as core
    from trainer_core.data.cache import DataCache
    from trainer_core.spec.callbacks import StopRequest, TrainingCallback
    from trainer_core.spec.job import JobSpec
    from trainer_core.train import train

    class FirstStep(TrainingCallback):
        def __init__(self) -> None:
            self.seen: dict[str, Any] = {}

        def on_progress(self, progress: dict[str, Any]) -> None:
            if not self.seen:
                self.seen.update(seconds=time.perf_counter() - start, **_status())

    spec = JobSpec(model="builtin:tiny-bert", dataset=str(csv), per_device_train_batch_size=8,
                   gradient_accumulation_steps=4, num_train_epochs=1, max_seq_length=128)  # fmt: skip
    first = FirstStep()
    phases: dict[str, float] = {}
    for owner, name, phase in ((load, "_train_and_eval", "read and split"),
                               (load, "_label_names", "labels"), (load, "tokenize_to", "tokenize"),
                               (core, "build_context", "model and plan")):  # fmt: skip
        _timed(owner, name, phase, phases)

    def stop() -> StopRequest | None:
        return "cancel" if first.seen else None

    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from here
    before = _status()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        train(spec, Path(out), callback=first, should_stop=stop, data_cache=DataCache(cache_dir))
    seen = first.seen
    print(json.dumps({
        "seconds": seen["seconds"],
        "peak_growth": seen["VmHWM"] - before["VmRSS"],
        "anon_growth": seen["RssAnon"] - before["RssAnon"],
        "file_rss": seen["RssFile"] - before["RssFile"],
        "phases": phases,
    }))  # fmt: skip


def _timed(owner: Any, name: str, phase: str, clock: dict[str, float]) -> None:
    """Replace ``owner.name`` with a wrapper adding its wall time to ``clock[phase]``."""
    inner = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            clock[phase] = clock.get(phase, 0.0) + time.perf_counter() - began

    setattr(owner, name, wrapper)


def tokenizer_rate(csv: Path) -> None:
    """Print the fast tokenizer's own batch rate on these rows (no Arrow, no datasets), in rows/s,
    and the cores it kept busy (CPU time / wall time)."""
    import csv as csv_module

    from trainer_core.builtin.models import builtin_tokenizer

    with csv.open() as source:
        texts = [row["text"] for row in csv_module.DictReader(source)]
    backend = builtin_tokenizer("builtin:tiny-bert").backend_tokenizer
    backend.no_padding()
    backend.enable_truncation(128)
    cpu, started = time.process_time(), time.perf_counter()
    for start in range(0, len(texts), 2000):  # the core's map batch size
        backend.encode_batch_fast(texts[start : start + 2000])
    wall = time.perf_counter() - started
    print(json.dumps({"rate": len(texts) / wall, "cores": (time.process_time() - cpu) / wall}))


def tokenizer_ceiling(csv: Path, rows: int) -> tuple[float, float, int]:
    """The tokenizer's rate on one core (``RAYON_NUM_THREADS=1``: by default its batch call
    already spreads over every core), its rate with its own threads, and the processes the core
    gives tokenizing at this size. One core's rate x those processes is the ceiling: each map
    process runs the tokenizer on one thread (the library turns its threads off after a fork)."""
    from trainer_core.data.tokenized import ROWS_PER_PROCESS

    def run(env: dict[str, str]) -> float:
        done = subprocess.run([sys.executable, __file__, "--tokenizer", str(csv)], check=True,
                              capture_output=True, text=True, env={**os.environ, **env})  # fmt: skip
        return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])

    one_core = run({"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    threaded = run({})
    cores = len(os.sched_getaffinity(0))
    return one_core, threaded, max(1, min(cores, rows // ROWS_PER_PROCESS))


def measure(csv: Path, cache_dir: Path) -> dict[str, Any]:
    # datasets keeps its own copy of a loaded CSV: in the scratch folder, gone with it
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache_dir.parent / "hf-datasets")}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(csv), str(cache_dir)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="25000,100000")
    parser.add_argument("--child", nargs=2, type=Path)
    parser.add_argument("--tokenizer", type=Path)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    if args.tokenizer:
        tokenizer_rate(args.tokenizer)
        return 0
    mb = 1024 * 1024
    print("| rows | run | to first step | rows/s | peak RSS growth | anon RSS growth | "
          "tokenizer on one core x processes | cold / ceiling | tokenizer, its own threads |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="gradacc-bench-") as scratch:
        for rows in [int(r) for r in args.rows.split(",")]:
            csv, cache = Path(scratch) / f"{rows}.csv", Path(scratch) / "cache"
            generate_csv(csv, rows)
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(Path(scratch) / "hf-datasets", ignore_errors=True)
            rate, threaded, processes = tokenizer_ceiling(csv, rows)
            ceiling = rate * processes
            for run in ("cold", "cached"):
                r = measure(csv, cache)
                speed = rows / r["seconds"]
                versus = f"{speed / ceiling:.2f}" if run == "cold" else ""
                print(f"| {rows:,} | {run} | {r['seconds']:.1f} s | {speed:,.0f} | "
                      f"{r['peak_growth'] / mb:+,.0f} MB | {r['anon_growth'] / mb:+,.0f} MB | "
                      f"{rate:,.0f} x {processes} | {versus} | {threaded:,.0f} |", flush=True)  # fmt: skip
                if run == "cold":
                    where = ", ".join(f"{k} {v:.1f} s" for k, v in r["phases"].items())
                    print(f"|  | (cold, where: {where}) | | | | | | | |", flush=True)
            csv.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
