"""``gradacc demo`` (what ``make run`` runs): start the embedded stack, train one tiny job per
backend with K = 1 and K = 4 at the same effective batch, a chat fine-tuning job on
builtin:small-chat (masked turns, exact token-level accumulation; then three questions of its
data asked through /v1/chat/completions) and a DPO job on preference pairs (exact pair-level accumulation),
then a reinforcement (GRPO) job from the chat model (commands/demo_rl.py); show progress, print
the metrics, stop.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx

from commands.client import Client
from commands.demo_rl import print_rl, submit_rl
from gradacc.settings import Settings

BACKENDS = ("pytorch", "accelerate", "trainer")
EFFECTIVE_BATCH = 16
DEMO_SPEC: dict[str, Any] = {
    "model": "builtin:tiny-bert",
    "dataset": "builtin:sentiment",
    "task": "sequence-classification",
    "num_train_epochs": 2,
    "max_eval_samples": 200,
    "learning_rate": 1e-3,
    "seed": 42,
}
TERMINAL = {"succeeded", "failed", "cancelled"}
# OpenAI-format conversations (system prompts, weight-0 turns): loss falls, token accuracy rises.
CHAT_SPEC: dict[str, Any] = {
    # The subword chat model (1,061 pieces, 2,048 positions: docs/models.md), not tiny-chat.
    "model": "builtin:small-chat",
    "dataset": "builtin:chat-arithmetic",
    "task": "causal-lm",
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    # 8 epochs, not 3: the reinforcement job starts from this model and needs answers right
    # often enough to reward (exact answers sampled at temperature 1: 0.25 after 8, 0 after 3).
    "num_train_epochs": 8,
    "learning_rate": 3e-3,
    "max_eval_samples": 200,
}
# Preference pairs over the same prompts (right answer chosen, a wrong one rejected): the reward
# accuracy rises from chance, epoch by epoch.
DPO_SPEC: dict[str, Any] = {
    "model": "builtin:tiny-chat",
    "dataset": "builtin:preference-arithmetic",
    "task": "causal-lm",
    "method": "dpo",
    "dpo_beta": 0.1,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "num_train_epochs": 3,
    "learning_rate": 3e-3,
    "max_eval_samples": 200,
}


def demo_specs() -> list[dict[str, Any]]:
    """(b, K) = (16, 1) and (4, 4): the same effective batch, so the same training."""
    return [
        {
            **DEMO_SPEC,
            "backend": backend,
            "gradient_accumulation_steps": k,
            "per_device_train_batch_size": EFFECTIVE_BATCH // k,
        }
        for backend in BACKENDS
        for k in (1, 4)
    ]


def run_demo(settings: Settings, *, port: int, workers: int, timeout_s: float = 600.0) -> int:
    port = port or free_port()
    cmd = [
        sys.executable,
        "-m",
        "commands.cli",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Client(f"http://127.0.0.1:{port}", timeout=10) as client:
            wait_ready(client.http)
            jobs = [client.submit(spec) for spec in [*demo_specs(), CHAT_SPEC, DPO_SPEC]]
            print(f"submitted {len(jobs)} jobs to http://127.0.0.1:{port}/v1/jobs")
            finished = follow(
                client, [j["id"] for j in jobs], deadline=time.monotonic() + timeout_s
            )
            chat, dpo = finished[-2], finished[-1]
            rl = submit_rl(client, chat, settings.home / "demo")
            if rl is not None:
                (rl,) = follow(client, [rl["id"]], deadline=time.monotonic() + timeout_s)
            print_table(client, finished[:-2])
            print_chat(client, chat)
            ask_chat(client, chat)
            print_dpo(client, dpo)
            rose = rl is not None and print_rl(client, rl)
            print(f"\njob outputs: {settings.jobs_dir.resolve()}")
            done = all(j["status"] == "succeeded" for j in finished)
            return 0 if done and rose else 1
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the benches and tests use it too)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(client: httpx.Client, *, timeout_s: float = 60.0, workers: bool = True) -> None:
    """Poll ``/readyz`` until the service answers 200 (database, broker and a worker alive).
    ``workers=False``: for an API started without workers, a 503 ``no_workers`` will do."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            answer = client.get("/readyz")
            if answer.status_code == 200:
                return
            if not workers and answer.json().get("error", {}).get("code") == "no_workers":
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the service did not become ready within {timeout_s:.0f} s")


def describe(job: dict[str, Any]) -> str:
    spec, progress = job["spec"], job["progress"]
    total = progress["total_steps"] or "?"
    return (
        f"{job['id']}  {spec['backend']:<10} K={spec['gradient_accumulation_steps']}  "
        f"{job['status']:<9} epoch {progress['epoch']}  step {progress['step']}/{total}"
    )


def follow(client: Client, ids: list[str], *, deadline: float) -> list[dict[str, Any]]:
    """Poll every job until all are final; print a line whenever one of them moves. (Six jobs
    at once: one poll each per half second costs less than six streams.)"""
    shown: dict[str, str] = {}
    while True:
        jobs = [client.get(job_id) for job_id in ids]
        for job in jobs:
            key = _milestone(job)
            if shown.get(job["id"]) != key:
                shown[job["id"]] = key
                print(describe(job), flush=True)
        if all(job["status"] in TERMINAL for job in jobs) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.5)


def _milestone(job: dict[str, Any]) -> str:
    """Status, epoch and quarter of the job: a line per milestone, not per poll."""
    progress = job["progress"]
    quarter = 4 * progress["step"] // progress["total_steps"] if progress["total_steps"] else 0
    return f"{job['status']}/{progress['epoch']}/{quarter}"


COLUMNS = ("epoch", "train_loss", "eval_loss", "eval_accuracy", "eval_f1", "samples/s")


def print_table(client: Client, jobs: list[dict[str, Any]]) -> None:
    header = f"{'backend':<10} {'b':>3} {'K':>2} " + " ".join(f"{c:>14}" for c in COLUMNS)
    print("\n" + header + "\n" + "-" * len(header))
    for job in jobs:
        spec = job["spec"]
        prefix = (
            f"{spec['backend']:<10} {spec['per_device_train_batch_size']:>3} "
            f"{spec['gradient_accumulation_steps']:>2} "
        )
        if job["error"]:
            print(prefix + f"{job['status']}: {job['error']['message']}")
        for record in client.metrics(job["id"]):
            values = [record.get("samples_per_second" if c == "samples/s" else c) for c in COLUMNS]
            print(prefix + " ".join(f"{_cell(v):>14}" for v in values))


CHAT_COLUMNS = ("epoch", "train_loss", "eval_loss", "eval_mean_token_accuracy")


def print_chat(client: Client, job: dict[str, Any]) -> None:
    spec = job["spec"]
    print(
        f"\nchat fine-tuning: {spec['model']} on {spec['dataset']} ({job['dataset_format']}), "
        f"b {spec['per_device_train_batch_size']} x K {spec['gradient_accumulation_steps']}, "
        "assistant tokens only"
    )
    if job["error"]:
        print(f"{job['status']}: {job['error']['message']}")
    print(" ".join(f"{c:>26}" for c in CHAT_COLUMNS))
    for record in client.metrics(job["id"]):
        print(" ".join(f"{_cell(record.get(c)):>26}" for c in CHAT_COLUMNS))


# Questions of the chat data's form ("what is A plus B?"), asked of the chat job's model greedily.
QUESTIONS = [(3, 4), (12, 5), (7, 9)]


def ask_chat(client: Client, job: dict[str, Any]) -> None:
    """The chat job's model answers questions of its data through /v1/chat/completions."""
    model = job.get("fine_tuned_model")
    if job["status"] != "succeeded" or not model:
        return
    print(f"\nasked {model} (greedy, through /v1/chat/completions):")
    for a, b in QUESTIONS:
        question = f"what is {a} plus {b}?"
        body = {
            "model": model,
            "messages": [{"role": "user", "content": question}],
            "max_completion_tokens": 16,
            "temperature": 0,
        }
        try:
            answer = client.http.post("/v1/chat/completions", json=body, timeout=120)
            text = (
                answer.json()["choices"][0]["message"]["content"]
                if answer.is_success
                else (f"({answer.status_code}: {answer.text[:120]})")
            )
        except httpx.HTTPError as exc:
            text = f"(no answer: {type(exc).__name__})"
        print(f"  {question!r:>26} -> {text!r}   (right: {a} plus {b} is {a + b}.)")


DPO_COLUMNS = (
    "epoch",
    "train_loss",
    "rewards/accuracies",
    "rewards/margins",
    "eval_rewards/accuracies",
)


def print_dpo(client: Client, job: dict[str, Any]) -> None:
    spec = job["spec"]
    print(
        f"\npreference fine-tuning (DPO, beta {spec['dpo_beta']}): {spec['model']} on "
        f"{spec['dataset']}, b {spec['per_device_train_batch_size']} pairs x K "
        f"{spec['gradient_accumulation_steps']}, the pair as the unit"
    )
    if job["error"]:
        print(f"{job['status']}: {job['error']['message']}")
    print(" ".join(f"{c:>24}" for c in DPO_COLUMNS))
    for record in client.metrics(job["id"]):
        print(" ".join(f"{_cell(record.get(c)):>24}" for c in DPO_COLUMNS))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 100 else f"{value:.6f}"
    return str(value)
