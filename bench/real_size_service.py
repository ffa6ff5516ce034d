"""A real-size job through the service on this machine's CPU: Qwen3-0.6B's shape (596M parameters,
151,936-token vocabulary, weights made from the seed), ``gradacc serve --workers 1`` on the
embedded stack, POST, poll until it succeeds. Prints the memory plan the job's start reported
(its ``memory_plan`` event), the job's events, its step records and the wall time. Full
fine-tuning with AdamW at b 2, K 2, 128 tokens, logits in chunks of 256 tokens, 4 optimizer
steps, ``save_strategy: "no"`` (the run's end still saves: 7 GB of weights and AdamW state, then
the final model, 2.4 GB).

    .venv/bin/python bench/real_size_service.py [--stack embedded|pg-redis] [--steps 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_latency import serving

JOB = {
    "model": "builtin:qwen3-0.6b-shape",
    "dataset": "builtin:chat-arithmetic",
    "task": "causal-lm",
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 2,
    "max_seq_length": 128,
    "loss_chunk_tokens": 256,
    "max_eval_samples": 8,
    "save_strategy": "no",
    "learning_rate": 1e-5,
    "logging_steps": 1,
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stack", choices=["embedded", "pg-redis"], default="embedded")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    with serving(args.stack) as client:
        started = time.perf_counter()
        job_id = client.post("/v1/jobs", json=JOB | {"max_steps": args.steps}).json()["id"]
        while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] not in (
            "succeeded",
            "failed",
            "cancelled",
        ):
            time.sleep(2.0)
        wall = time.perf_counter() - started
        events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
        by_step = {"granularity": "step"}
        steps = client.get(f"/v1/jobs/{job_id}/metrics", params=by_step).json()["data"]
    print(f"job {job_id}: {job['status']} in {wall:.0f} s (POST to succeeded)")
    for event in events:
        print(f"  [{event['kind']}] {event['message']}")
    for record in steps:
        print(
            f"  step {record['step']}: train_loss {record['train_loss']:.4f}, grad_norm "
            f"{record['grad_norm']:.3f}, {record['samples_per_second']} samples/s"
        )
    return 0 if job["status"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
