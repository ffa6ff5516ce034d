"""What the Tinker API costs over training in-process: the same steps through the stock SDK
against ``gradacc serve`` (embedded stack, one worker, no predict server) and on a
``TrainingHost`` in this process.

For each row shape: ``--steps`` windows of ``forward_backward`` (``--rows`` datums of
``--tokens`` tokens, cross-entropy) + ``optim_step`` (SGD), after one warm-up window; then
``--samples`` greedy samples of 16 tokens. Full fine-tuning (rank 0) and LoRA rank 8 on
``gradacc/tiny-chat`` (the built-in chat model: the model's own time is small, so the gap is the
API's cost per call). Then a session's placement: windows on one rank and on two
(``user_metadata={"ranks": "2"}``), and the first window after the model was parked (its host
job ended; the window queues a new one, which starts, loads and swaps the model in). Prints
tables; asserts nothing.

Usage: .venv/bin/python bench/tinker_overhead.py [--steps 20] [--rows 16] [--tokens 32]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

os.environ.setdefault("TINKER_TELEMETRY", "0")
import tinker
import torch
from tinker import types
from tinker.types.optimizer import OptimizerConfigBase, OptimParamsBase

from commands.demo import free_port, wait_ready
from trainer_core.tinker_host.host import Datum, StepParams, TrainingHost
from trainer_core.tinker_host.model import ModelChoice
from trainer_core.tinker_host.sampling import SampleParams, sample

ROOT = Path(__file__).resolve().parent.parent
LINGER_S = 2  # the server's GRADACC_TINKER_HOST_LINGER_S here: a pause past it parks the model


def rows(count: int, tokens: int, seed: int) -> list[Datum]:
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        ids = [rng.randint(5, 200) for _ in range(tokens + 1)]
        inputs = {"target_tokens": torch.tensor(ids[1:]), "weights": torch.ones(tokens)}
        found.append(Datum(ids[:-1], inputs))
    return found


def wire(data: list[Datum]) -> list[types.Datum]:
    return [types.Datum(model_input=types.ModelInput.from_ints(d.tokens),
                        loss_fn_inputs={k: v.tolist() for k, v in d.inputs.items()}) for d in data]  # fmt: skip


def timed_sdk(url: str, rank: int, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    service = tinker.ServiceClient(base_url=url, api_key="tml-bench")
    sgd = OptimizerConfigBase(type="sgd")
    client = service.create_lora_training_client(
        "gradacc/tiny-chat", rank=rank, optimizer=sgd
    ).result()
    steps = []
    for step in range(args.steps + 1):
        data = wire(rows(args.rows, args.tokens, step))
        start = time.perf_counter()
        client.forward_backward(data, "cross_entropy")
        client.optim_step(OptimParamsBase(type="sgd", learning_rate=0.01)).result()
        if step:  # the first window starts the host and loads the model
            steps.append(time.perf_counter() - start)
    sampler = client.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(rows(1, args.tokens, 99)[0].tokens)
    params = types.SamplingParams(max_tokens=16, temperature=0.0, stop=[])
    samples = []
    for index in range(args.samples + 1):
        start = time.perf_counter()
        sampler.sample(prompt, 1, params).result()
        if index:
            samples.append(time.perf_counter() - start)
    return steps, samples


def timed_parked(url: str, args: argparse.Namespace, ranks: int = 1) -> tuple[list[float], float]:
    """Windows back to back on a session of ``ranks`` ranks (their times), then ``--resumes``
    times: a pause past the host's linger (the model parked, the host job ended), and the next
    window, which queues a new host job that swaps the model back in (the median)."""
    service = tinker.ServiceClient(
        user_metadata={"ranks": str(ranks)}, base_url=url, api_key="tml-bench"
    )
    sgd = OptimizerConfigBase(type="sgd")
    client = service.create_lora_training_client(
        "gradacc/tiny-chat", rank=8, optimizer=sgd
    ).result()

    def window(seed: int) -> float:
        start = time.perf_counter()
        client.forward_backward(wire(rows(args.rows, args.tokens, seed)), "cross_entropy")
        client.optim_step(OptimParamsBase(type="sgd", learning_rate=0.01)).result()
        return time.perf_counter() - start

    steps = [window(step) for step in range(args.steps + 1)][1:]
    resumed = []
    for turn in range(args.resumes):
        time.sleep(LINGER_S + 3)
        resumed.append(window(1000 + turn))
    return steps, statistics.median(resumed)


def timed_local(rank: int, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    host = TrainingHost(ModelChoice("builtin:tiny-chat", rank=rank), family="sgd")
    steps = []
    for step in range(args.steps + 1):
        data = rows(args.rows, args.tokens, step)
        start = time.perf_counter()
        host.forward_backward(data, "cross_entropy", {})
        host.optim_step(StepParams(family="sgd", learning_rate=0.01))
        if step:
            steps.append(time.perf_counter() - start)
    prompt = rows(1, args.tokens, 99)[0].tokens
    samples = []
    for index in range(args.samples + 1):
        start = time.perf_counter()
        sample(
            host.model,
            host.tokenizer,
            prompt,
            1,
            SampleParams(16, 0.0, stop=[]),
            prompt_logprobs=False,
        )
        if index:
            samples.append(time.perf_counter() - start)
    return steps, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--resumes", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the host's share on a 2-core box: the server takes the other
    home = Path(tempfile.mkdtemp(prefix="tinker-bench-"))
    port = free_port()
    env = {**os.environ, "GRADACC_HOME": str(home / "home"), "GRADACC_PREDICT_SERVER": "false",
           "GRADACC_TRAIN_THREADS": "1", "GRADACC_TINKER_HOST_LINGER_S": str(LINGER_S),
           "GRADACC_DEVICES": "2"}  # fmt: skip
    for name in ("GRADACC_DATABASE_URL", "GRADACC_BROKER_URL"):
        env.pop(name, None)
    log = (home / "serve.log").open("wb")
    argv = [sys.executable, "-m", "commands.cli", "serve", "--port", str(port), "--workers", "1"]
    server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url) as client:
            wait_ready(client, timeout_s=180)
        print(f"{args.steps} windows of {args.rows} rows x {args.tokens} tokens (forward_backward "
              f"+ optim_step, SGD); {args.samples} greedy samples of 16 tokens; gradacc/tiny-chat\n")  # fmt: skip
        print("| model | where | window median (ms) | window p90 (ms) | sample median (ms) |")
        print("|---|---|---|---|---|")
        for rank in (0, 8):
            label = "full (rank 0)" if rank == 0 else f"LoRA rank {rank}"
            for where, (steps, samples) in (
                ("in-process TrainingHost", timed_local(rank, args)),
                ("stock SDK -> gradacc serve", timed_sdk(url, rank, args)),
            ):
                p90 = statistics.quantiles(steps, n=10)[-1]
                print(f"| {label} | {where} | {statistics.median(steps) * 1e3:.1f} | "
                      f"{p90 * 1e3:.1f} | {statistics.median(samples) * 1e3:.1f} |")  # fmt: skip
        print("\n| LoRA rank 8, stock SDK | window median (ms) | first window after parking (ms) |")
        print("|---|---|---|")
        for ranks in (1, 2):
            steps, resumed = timed_parked(url, args, ranks)
            print(f"| {ranks} rank(s) | {statistics.median(steps) * 1e3:.1f} | "
                  f"{resumed * 1e3:.0f} |")  # fmt: skip
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
