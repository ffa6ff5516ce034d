"""The service path against the command line on a job of about a minute.

The same spec (tiny GPT-2, 2,000 built-in stories, ``--epochs`` epochs) runs once as
``python -m trainer_core run`` and once through ``gradacc serve --workers 1`` (POST, poll every
second until it succeeds), ``--repeats`` times, interleaved. Compares training samples/s (mean
over epochs, from the metrics) and wall time (process start or POST to the end): median ratio
of the pairs. Prints a table; asserts nothing.

    .venv/bin/python bench/service_vs_cli.py [--epochs 16] [--stack embedded|pg-redis] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_latency import ROOT, serving


def spec(epochs: int) -> dict[str, object]:
    return {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories", "task": "causal-lm",
            "num_train_epochs": epochs, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
            "max_eval_samples": 64, "learning_rate": 1e-3}  # fmt: skip


def via_cli(job: dict[str, object]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "spec.json").write_text(json.dumps(job))
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainer_core", "run", f"{tmp}/spec.json", "--output-dir", f"{tmp}/out"],
                       cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        wall = time.perf_counter() - started
        records = [
            json.loads(line)
            for line in (Path(tmp) / "out" / "metrics.jsonl").read_text().splitlines()
        ]
    return statistics.mean(r["samples_per_second"] for r in records), wall


def via_service(job: dict[str, object], stack: str) -> tuple[float, float]:
    with serving(stack) as client:
        time.sleep(8)  # the worker starts and its fork server imports, as when serving
        started = time.perf_counter()
        job_id = client.post("/v1/jobs", json=job).json()["id"]
        while (status := client.get(f"/v1/jobs/{job_id}").json()["status"]) not in (
            "succeeded",
            "failed",
        ):
            time.sleep(1.0)
        wall = time.perf_counter() - started
        if status != "succeeded":
            raise RuntimeError(client.get(f"/v1/jobs/{job_id}").json()["error"])
        records = client.get(f"/v1/jobs/{job_id}/metrics").json()["data"]
    return statistics.mean(r["samples_per_second"] for r in records), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--stack", choices=["embedded", "pg-redis"], default="embedded")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved pairs; medians shown")
    args = parser.parse_args()
    job = spec(args.epochs)
    pairs = [(via_cli(job), via_service(job, args.stack)) for _ in range(args.repeats)]
    ratios = [(svc[0] / cli[0], cli[1] / svc[1]) for cli, svc in pairs]
    cli_rate, cli_wall = (statistics.median(c[i] for c, _ in pairs) for i in (0, 1))
    svc_rate, svc_wall = (statistics.median(s[i] for _, s in pairs) for i in (0, 1))
    print(
        f"# service path vs CLI: tiny GPT-2, 2,000 rows x {args.epochs} epochs, b=8, K=4, {args.stack} stack, median of {args.repeats}"
    )
    print(
        "| path | training samples/s | wall s | ratio (samples/s) | ratio (1 / wall) |\n|---|---:|---:|---:|---:|"
    )
    print(f"| python -m trainer_core run | {cli_rate:,.0f} | {cli_wall:.1f} | 1.000 | 1.000 |")
    rate_ratio, wall_ratio = (statistics.median(r[i] for r in ratios) for i in (0, 1))
    print(
        f"| POST /v1/jobs (gradacc serve) | {svc_rate:,.0f} | {svc_wall:.1f} | {rate_ratio:.3f} | {wall_ratio:.3f} |"
    )
    print("per pair (samples/s, 1/wall):", ", ".join(f"{a:.3f}/{b:.3f}" for a, b in ratios))


if __name__ == "__main__":
    main()
