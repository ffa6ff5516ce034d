"""The reinforcement part of ``gradacc demo``: GRPO from the demo's chat fine-tune, rewarded by a
``string_check`` grader, on a prompt file the demo uploads as a user would.

The file holds the first ``PROMPTS`` prompts of ``builtin:arithmetic-prompts`` (chat-arithmetic
conversations cut before their last answer, each row carrying the answer as ``item.answer``).
The grader scores 1 when the sampled answer is exactly that sentence. The job evaluates the same
prompts every ``EVAL_INTERVAL`` windows, step 0 being the model before any update, under the same
seeds each time: the rise from step 0 is the policy's, never a change of prompts. Measured
(docs/reinforcement.md, "A task that learns"): the reward on these prompts rises, while on
held-out prompts it does not (a small model learns the sums it is rewarded on, not addition). From
builtin:small-chat's fine-tune (2026-12-05): 0.094 at step 0, 0.375 after 40 windows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from commands.client import Client
from trainer_core.builtin.prompt_corpus import arithmetic_prompts

PROMPTS = 32
EVAL_INTERVAL = 10
WINDOWS = 40
GRADER = {
    "type": "string_check",
    "name": "exact answer",
    "operation": "eq",
    "input": "{{ sample.output_text }}",
    "reference": "{{ item.answer }}",
}


def prompt_file(folder: Path) -> Path:
    """The prompts as JSONL in OpenAI's reinforcement format (messages ending with the user's
    turn; every other field is the grader's ``item``)."""
    rows = arithmetic_prompts("train")
    path = folder / "arithmetic-prompts.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for messages, answer, result in list(zip(*rows.values(), strict=True))[:PROMPTS]:
            out.write(json.dumps({"messages": messages, "answer": answer, "result": result}) + "\n")
    return path


def rl_spec(model: str, file_id: str) -> dict[str, Any]:
    """16 prompts x 8 completions a window, cut as b 32 x K 4 (the same update as 128 x 1)."""
    group = 8
    grpo = {
        "group_size": group,
        "loss_type": "dapo",
        "max_completion_length": 16,
        "temperature": 1.0,
        "eval_interval": EVAL_INTERVAL,
        "eval_samples": PROMPTS,
        "grader": GRADER,
    }
    return {
        "model": model,
        "dataset": file_id,
        "eval_dataset": file_id,
        "task": "causal-lm",
        "method": "grpo",
        "per_device_train_batch_size": 32,
        "gradient_accumulation_steps": 4,
        "effective_batch_size": 16 * group,
        "max_steps": WINDOWS,
        "learning_rate": 1e-3,
        "lr_scheduler_type": "constant",
        "seed": 42,
        "grpo": grpo,
    }


def submit_rl(client: Client, chat_job: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """The GRPO job from the chat job's model, or None (said why) when there is none."""
    model = chat_job.get("fine_tuned_model")
    if chat_job["status"] != "succeeded" or not model:
        print(f"\nreinforcement skipped: the chat job {chat_job['id']} {chat_job['status']}")
        return None
    uploaded = client.upload(prompt_file(folder), purpose="fine-tune")
    job: dict[str, Any] = client.submit(rl_spec(model, uploaded["id"]))
    print(f"\nreinforcement (GRPO) from {model}: {job['id']}", flush=True)
    return job


def print_rl(client: Client, job: dict[str, Any]) -> bool:
    """Reward on the job's prompts per evaluation, and per window; True when it rose."""
    spec = job["spec"]
    print(
        f"\nreinforcement fine-tuning (GRPO, {spec['grpo']['loss_type']}): {PROMPTS} prompts, "
        f"group {spec['grpo']['group_size']}, b {spec['per_device_train_batch_size']} "
        f"completions x K {spec['gradient_accumulation_steps']}, grader: {GRADER['type']} "
        f"{GRADER['operation']} against {GRADER['reference']}"
    )
    if job["error"]:
        print(f"{job['status']}: {job['error']['message']}")
        return False
    reports = sorted(client.metrics(job["id"], granularity="evaluation"), key=lambda r: r["step"])
    print(f"{'step':>6} {'reward_mean (same prompts)':>28}")
    for report in reports:
        print(f"{report['step']:>6} {report['scores']['reward_mean']:>28.3f}")
    windows = [r["reward_mean"] for r in client.metrics(job["id"], granularity="step")]
    if len(windows) >= 10:
        first, last = sum(windows[:5]) / 5, sum(windows[-5:]) / 5
        print(f"training reward, mean of the first 5 windows {first:.3f}, last 5 {last:.3f}")
    if len(reports) < 2:
        return False
    before, after = reports[0]["scores"]["reward_mean"], reports[-1]["scores"]["reward_mean"]
    print(f"reward on the job's prompts: {before:.3f} before RL -> {after:.3f} after")
    return bool(after > before)
