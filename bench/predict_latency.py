"""Latency of POST /v1/jobs/{id}/predict over real HTTP against ``gradacc serve`` (embedded
defaults, one worker and its predict server): the first prediction of a job (cold: the server
loads the model) and the next ones (warm: from its cache), for the tiny classifier and the tiny
chat model.

    .venv/bin/python bench/predict_latency.py [--warm 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
COMMON = {"num_train_epochs": 1, "max_train_samples": 64, "max_eval_samples": 8,
          "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2}  # fmt: skip
JOBS = {
    "tiny-bert, 1 input": ({"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
                           {"inputs": ["a wonderful, moving film"]}),
    "tiny-bert, 32 inputs": ({"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
                             {"inputs": ["a wonderful, moving film"] * 32}),
    "tiny-chat, 32 new tokens": ({"model": "builtin:tiny-chat",
                                  "dataset": "builtin:chat-arithmetic", "task": "causal-lm"},
                                 {"messages": [{"role": "user", "content": "what is 2 plus 3?"}],
                                  "max_new_tokens": 32}),
}  # fmt: skip


def _wait(client: httpx.Client, job_id: str) -> None:
    while (status := client.get(f"/v1/jobs/{job_id}").json()["status"]) not in (
        "succeeded", "failed", "cancelled",
    ):  # fmt: skip
        time.sleep(0.2)
    assert status == "succeeded", status


def _timed(client: httpx.Client, job_id: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    reply = client.post(f"/v1/jobs/{job_id}/predict", json=body)
    seconds = time.perf_counter() - started
    assert reply.status_code == 200, reply.text
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        port = 8700 + os.getpid() % 200
        env = {**os.environ, "GRADACC_HOME": home, "HF_HUB_OFFLINE": "1"}
        argv = [
            sys.executable,
            "-m",
            "commands.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
                while True:
                    try:
                        if client.get("/readyz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.5)
                print(f"# POST /v1/jobs/{{id}}/predict, gradacc serve (embedded), one worker, "
                      f"warm: median of {args.warm}")  # fmt: skip
                print("| model, request | cold (first) ms | warm median ms | warm p95 ms |")
                print("|---|---:|---:|---:|")
                for name, (job, body) in JOBS.items():
                    job_id = client.post("/v1/jobs", json={**job, **COMMON}).json()["id"]
                    _wait(client, job_id)
                    cold = _timed(client, job_id, body)
                    warm = sorted(_timed(client, job_id, body) for _ in range(args.warm))
                    p95 = warm[min(len(warm) - 1, int(0.95 * len(warm)))]
                    print(f"| {name} | {cold * 1e3:,.0f} | {statistics.median(warm) * 1e3:,.0f} "
                          f"| {p95 * 1e3:,.0f} |", flush=True)  # fmt: skip
        finally:
            server.terminate()
            server.wait(60)


if __name__ == "__main__":
    main()
