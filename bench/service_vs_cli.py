"""The service path against the command line on a job of about a minute.

The same spec (tiny GPT-2, 2,000 built-in stories, ``--epochs`` epochs) runs once as
``python -m trainer_core run`` and once through ``gradacc serve --workers 1`` (POST, poll every
second until it succeeds). Compares training samples/s (mean over epochs, from the metrics) and
wall time (process start or POST to the end). Prints a table; asserts nothing.

    .venv/bin/python bench/service_vs_cli.py [--epochs 16] [--stack embedded|pg-redis]
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

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_latency import ROOT, free_port, start_server, stop_server, wait_ready


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
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server, database = start_server(stack, Path(tmp), port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                wait_ready(client)
                time.sleep(8)  # let the worker's standby finish importing, as on a running server
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
        finally:
            stop_server(server, database)
    return statistics.mean(r["samples_per_second"] for r in records), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--stack", choices=["embedded", "pg-redis"], default="embedded")
    args = parser.parse_args()
    job = spec(args.epochs)
    cli_rate, cli_wall = via_cli(job)
    svc_rate, svc_wall = via_service(job, args.stack)
    print(
        f"# service path vs CLI: tiny GPT-2, 2,000 rows x {args.epochs} epochs, b=8, K=4, {args.stack} stack"
    )
    print(
        "| path | training samples/s | wall s | ratio (samples/s) | ratio (1 / wall) |\n|---|---:|---:|---:|---:|"
    )
    print(f"| python -m trainer_core run | {cli_rate:,.0f} | {cli_wall:.1f} | 1.000 | 1.000 |")
    print(
        f"| POST /v1/jobs (gradacc serve) | {svc_rate:,.0f} | {svc_wall:.1f} | {svc_rate / cli_rate:.3f} | {cli_wall / svc_wall:.3f} |"
    )


if __name__ == "__main__":
    main()
