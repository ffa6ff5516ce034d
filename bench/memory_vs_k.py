"""Peak memory of a fresh process for (b, K) at fixed micro-batch b, and for (b·K, 1).

Accumulation exists to save memory: peak with (b, K) should stay close to peak with (b, 1), while
one batch of b·K rows grows with K. The model is built-in tiny GPT-2 on long synthetic rows
(512 tokens), so activations dominate the weights. On CPU the figure is the peak RSS of the child
process (``ru_maxrss``) and, net of the baseline after loading, the training delta; on a GPU it is
``torch.cuda.max_memory_allocated``.

    .venv/bin/python bench/memory_vs_k.py [--ks 1,4,8] [--batch 4] [--backend pytorch]
    .venv/bin/python bench/memory_vs_k.py --options [--batch 4 --k 8]

``--options`` prints peak memory and samples/s for (b, 1), (b, K) and (b·K, 1), each plain, with
gradient checkpointing, with bf16 and with LoRA (r 8 on ``c_attn``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = [
    "anna",
    "ben",
    "saw",
    "the",
    "red",
    "small",
    "cat",
    "ball",
    "boat",
    "near",
    "in",
    "park",
    "river",
    "garden",
    "house",
    ".",
]


def _write_long_rows(path: Path, rows: int) -> None:
    rng = random.Random(0)
    with path.open("w") as out:
        for _ in range(rows):
            out.write(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(700))}) + "\n")


def child(batch: int, k: int, backend: str, data: str, rows: int, extra: str = "{}") -> None:
    """Runs in a fresh process: train a few windows, print the peak memory as JSON."""
    sys.path.insert(0, str(ROOT))
    import torch

    from trainer_core.spec.job import JobSpec
    from trainer_core.train import train

    spec = JobSpec(model="builtin:tiny-gpt2", dataset=data, eval_dataset=data, task="causal-lm", backend=backend,
                   per_device_train_batch_size=batch, gradient_accumulation_steps=k, num_train_epochs=1,
                   max_seq_length=512, max_train_samples=rows, max_eval_samples=1,
                   per_device_eval_batch_size=1, **json.loads(extra))  # fmt: skip
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with tempfile.TemporaryDirectory() as out:
        result = train(spec, Path(out))
    peak = int(result.metrics[0]["peak_memory_bytes"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    speed = result.metrics[0]["samples_per_second"]
    print(json.dumps({"peak": peak, "baseline": baseline, "device": device, "speed": speed}))


def measure(
    batch: int, k: int, backend: str, data: str, rows: int, extra: str = "{}"
) -> dict[str, int | str]:
    """Every run reads the same rows, so the data costs the same memory in each."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        f"{batch},{k},{rows}",
        "--backend",
        backend,
        "--data",
        data,
        "--extra",
        extra,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    result: dict[str, int | str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ks", default="1,4,8")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--backend", default="pytorch")
    parser.add_argument("--child")
    parser.add_argument("--data")
    parser.add_argument("--extra", default="{}")
    parser.add_argument("--options", action="store_true", help="the options table")
    parser.add_argument("--k", type=int, default=8, help="K of the options table")
    args = parser.parse_args()
    if args.child:
        b, k, rows = (int(x) for x in args.child.split(","))
        child(b, k, args.backend, args.data, rows, args.extra)
        return
    if args.options:
        options_table(args.batch, args.k, args.backend)
        return
    ks = [int(k) for k in args.ks.split(",")]
    mib = 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        data = str(Path(tmp) / "long.jsonl")
        rows = args.batch * max(ks) * 2
        _write_long_rows(Path(data), rows)
        base = measure(args.batch, 1, args.backend, data, rows)
        print(
            f"# memory vs K: tiny GPT-2, 512-token rows, b={args.batch}, backend={args.backend}, device={base['device']}"
        )
        print(
            "| K | (b, K) peak MiB | ratio to (b, 1) | training delta MiB | (b·K, 1) peak MiB | ratio to (b, 1) | training delta MiB |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for k in ks:
            acc = base if k == 1 else measure(args.batch, k, args.backend, data, rows)
            big = base if k == 1 else measure(args.batch * k, 1, args.backend, data, rows)
            p0, pa, pb = int(base["peak"]), int(acc["peak"]), int(big["peak"])
            da, db = pa - int(acc["baseline"]), pb - int(big["baseline"])
            print(
                f"| {k} | {pa / mib:,.0f} | {pa / p0:.3f} | {da / mib:,.0f} | {pb / mib:,.0f} | {pb / p0:.3f} | {db / mib:,.0f} |",
                flush=True,
            )
        print(
            f"(baseline after imports, before training: {int(base['baseline']) / mib:,.0f} MiB; "
            "training delta = peak - that baseline, in the same process)"
        )


OPTIONS = {
    "plain": {},
    "gradient checkpointing": {"gradient_checkpointing": True},
    "bf16": {"mixed_precision": "bf16"},
    "LoRA r=8": {"lora": {"r": 8, "alpha": 16, "target_modules": ["c_attn"]}},
}


def options_table(b: int, k: int, backend: str) -> None:
    mib = 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        data = str(Path(tmp) / "long.jsonl")
        rows = b * k * 2
        _write_long_rows(Path(data), rows)
        print(
            f"# peak memory and speed: tiny GPT-2, 512-token rows, {rows} rows, backend={backend}"
        )
        print("| option | (b, K) | peak MiB | training delta MiB | samples/s |")
        print("|---|---|---:|---:|---:|")
        for name, extra in OPTIONS.items():
            for batch, acc in ((b, 1), (b, k), (b * k, 1)):
                got = measure(batch, acc, backend, data, rows, json.dumps(extra))
                peak, delta = int(got["peak"]), int(got["peak"]) - int(got["baseline"])
                print(
                    f"| {name} | ({batch}, {acc}) | {peak / mib:,.0f} | {delta / mib:,.0f} "
                    f"| {float(got['speed']):,.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
