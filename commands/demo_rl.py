"""The demo's reinforcement part: the chat job's model (SFT on ``builtin:chat-arithmetic``) is
trained further with GRPO under a ``string_check`` grader, and its mean reward must rise.

The prompts are the first question of each built-in conversation ("what is 9 plus 16?", with its
system prompt when it has one), uploaded as a prompt file; each row carries, as ``question``, the
way the data's answers restate it ("9 plus 16 is "), and the grader gives 1 when the sampled
answer holds it, else 0: at temperature 1 the SFT model often miscopies an operand. The figures
in README.md ("make run") come from this recipe; ``check_rewards`` fails the demo when the mean
reward of the last windows is not above that of the first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from commands.client import Client
from trainer_core.builtin.chat_corpus import chat_arithmetic

GROUP_SIZE = 8
PROMPTS_PER_WINDOW = 4
WINDOWS = 30
EDGE_WINDOWS = 8  # the reward's start and end: the mean over this many windows each
GRADER: dict[str, Any] = {
    "type": "string_check",
    "name": "sum",
    "operation": "like",
    "input": "{{ sample.output_text }}",
    "reference": "{{ item.question }}",
}
GRPO: dict[str, Any] = {
    "group_size": GROUP_SIZE,
    "temperature": 1.0,
    "max_completion_length": 24,
    "grader": GRADER,
}


def arithmetic_prompts(split: str = "train") -> list[dict[str, Any]]:
    """Each conversation's first question (its system prompt kept) and how an answer restates it."""
    rows = []
    for conversation in chat_arithmetic(split)["messages"]:
        assert isinstance(conversation, list)
        first = next(i for i, m in enumerate(conversation) if m["role"] == "user")
        answer = str(conversation[first + 1]["content"])  # "9 plus 16 is 25."
        messages = [{"role": m["role"], "content": m["content"]} for m in conversation[: first + 1]]
        rows.append({"messages": messages, "question": answer.rsplit(" is ", 1)[0] + " is "})
    return rows


def grpo_spec(model: str, dataset: str) -> dict[str, Any]:
    """A window: PROMPTS_PER_WINDOW prompts x GROUP_SIZE completions, one micro-batch."""
    completions = GROUP_SIZE * PROMPTS_PER_WINDOW
    return {
        "model": model,
        "dataset": dataset,
        "task": "causal-lm",
        "method": "grpo",
        "per_device_train_batch_size": completions,
        "effective_batch_size": completions,
        "max_steps": WINDOWS,
        "learning_rate": 3e-4,
        "lr_scheduler_type": "constant",
        "grpo": GRPO,
    }


def submit_grpo(client: Client, home: Path, chat_job: dict[str, Any]) -> dict[str, Any]:
    """Upload the prompt file and submit the GRPO job from the chat job's fine-tuned model."""
    path = home / "demo" / "arithmetic-prompts.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in arithmetic_prompts()))
    dataset = client.upload(path)["id"]
    return dict(client.submit(grpo_spec(chat_job["fine_tuned_model"], dataset)))


def check_rewards(rewards: list[float]) -> tuple[float, float]:
    """The mean reward over the first and the last EDGE_WINDOWS windows; an error unless it rose."""
    if len(rewards) < 2 * EDGE_WINDOWS:
        raise RuntimeError(f"GRPO logged {len(rewards)} windows, fewer than {2 * EDGE_WINDOWS}")
    start = sum(rewards[:EDGE_WINDOWS]) / EDGE_WINDOWS
    end = sum(rewards[-EDGE_WINDOWS:]) / EDGE_WINDOWS
    if end <= start:
        raise RuntimeError(f"the GRPO reward did not rise: {start:.3f} -> {end:.3f}")
    return start, end


def print_grpo(client: Client, job: dict[str, Any]) -> None:
    """The reward per window and its rise; raises (the demo fails) when it did not rise."""
    spec = job["spec"]
    print(f"\nreinforcement (GRPO, {spec['grpo']['grader']['type']} grader): {spec['model']}, "
          f"{GROUP_SIZE} answers to each of {PROMPTS_PER_WINDOW} prompts a window")  # fmt: skip
    if job["error"]:
        print(f"{job['status']}: {job['error']['message']}")
    records = client.metrics(job["id"], granularity="step")
    rewards = [float(r["reward_mean"]) for r in records if "reward_mean" in r]
    print("reward_mean by window: " + " ".join(f"{r:.2f}" for r in rewards))
    start, end = check_rewards(rewards)
    print(f"mean reward, first {EDGE_WINDOWS} windows -> last {EDGE_WINDOWS}: "
          f"{start:.3f} -> {end:.3f}")  # fmt: skip
