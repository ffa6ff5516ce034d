"""GRPO side by side (``bench/vs_trl.py --method grpo``): TRL's ``GRPOTrainer`` (transformers
generation, no vLLM) and the gradacc core's ``train_grpo`` on the same saved builtin:tiny-chat,
the same chat-arithmetic prompts and the same settings, fp32 on the CPU.

Shared: group size G (TRL's ``num_generations``), max completion length, temperature 1, no top-k
or top-p, b completions a micro-batch (TRL counts ``per_device_train_batch_size`` in completions
too) and K micro-batches an optimizer step, so one window (TRL: one generation batch,
``steps_per_generation`` = K, ``generation_batch_size`` = b·K) is one optimizer step of b·K
completions; ``loss_type="dapo"``, ``beta=0``, ``num_iterations=1``, ε = 0.2, rewards scaled by
the group's std, truncated completions not masked (TRL's default), AdamW (``adamw_torch``) at a
constant learning rate, no clipping. The reward: 1 when the sum's answer appears in the text.

Each is timed by its own clock of its training loop (sampling, grading and training included):
TRL's ``train_runtime``; gradacc's from its ``on_start`` to its last step record. Unequal, and
said in the output: gradacc samples one ``generate`` per group (seeded per group), TRL one per
generation batch; TRL's ``max_prompt_length`` no longer exists in 1.16 (prompts are short here).
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Any, cast

import torch

from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.grpo import train_grpo
from trainer_core.grpo.prompts import prompt_rows
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.job import JobSpec

LR, SEED = 1e-3, 7


def grpo_rows(count: int) -> list[dict[str, Any]]:
    """The first question of each conversation (system turn kept) and its answer, the number that
    ends the first assistant turn ("13 plus 7 is 20." -> "20")."""
    rows = []
    conversations = cast(list[list[dict[str, str]]], chat_arithmetic("train")["messages"])
    for conversation in conversations:
        turns = [{"role": m["role"], "content": m["content"]} for m in conversation]
        first = next(i for i, m in enumerate(turns) if m["role"] == "assistant")
        found = re.findall(r"-?\d+", turns[first]["content"])
        if found:
            rows.append({"messages": turns[:first], "answer": found[-1]})
        if len(rows) == count:
            break
    return rows


def contains_answer(item: Any, text: str) -> float:
    return float(str(item["answer"]) in text)


class _Clock(TrainingCallback):
    """From the run's start to its last step record."""

    def __init__(self) -> None:
        self.start = self.end = 0.0

    def on_start(self, info: dict[str, Any]) -> None:
        self.start = time.perf_counter()

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        self.end = time.perf_counter()


def ours(base: Path, rows: list[dict[str, Any]], out: Path, args: Any) -> tuple[float, float]:
    """The run's seconds and its mean completion length."""
    spec = JobSpec.model_validate(
        {"model": str(base), "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
         "per_device_train_batch_size": args.b, "gradient_accumulation_steps": args.k,
         "max_steps": args.windows, "learning_rate": LR, "lr_scheduler_type": "constant",
         "optim": "adamw_torch", "max_grad_norm": 0, "seed": SEED, "save_strategy": "no",
         "validation_split_percentage": 0, "max_seq_length": 128}
    )  # fmt: skip
    settings = GrpoSettings(group_size=args.group, max_completion_length=args.max_completion,
                            temperature=1.0, loss_type="dapo", beta=0.0,
                            mask_truncated_completions=False)  # fmt: skip
    clock = _Clock()
    run = train_grpo(spec, settings, prompt_rows(rows), contains_answer, out, callback=clock)
    assert len(run.records) == args.windows, run.records
    length = statistics.mean(float(r["completion_length"]) for r in run.records)
    return clock.end - clock.start, length


def trl_run(base: Path, rows: list[dict[str, Any]], out: Path, args: Any) -> tuple[float, float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    def reward(completions: list[Any], answer: list[str], **_: Any) -> list[float | None]:
        return [float(a in c[-1]["content"]) for c, a in zip(completions, answer, strict=True)]

    config = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=args.b,
        gradient_accumulation_steps=args.k, steps_per_generation=args.k,
        num_generations=args.group, max_completion_length=args.max_completion,
        temperature=1.0, top_k=0, top_p=1.0, loss_type="dapo", beta=0.0, num_iterations=1,
        epsilon=0.2, scale_rewards="group", mask_truncated_completions=False, use_vllm=False,
        max_steps=args.windows, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch", max_grad_norm=0.0, seed=SEED, data_seed=SEED, use_cpu=True,
        shuffle_dataset=False, report_to=[], save_strategy="no", logging_steps=1_000_000,
        dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    torch.manual_seed(SEED)
    data = Dataset.from_list([{"prompt": r["messages"], "answer": r["answer"]} for r in rows])
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base), reward_funcs=[reward], args=config,
        train_dataset=data, processing_class=AutoTokenizer.from_pretrained(base),
    )  # fmt: skip
    output = trainer.train()
    assert trainer.state.global_step == args.windows, trainer.state.global_step
    # the Trainer's own clock of its loop; its metrics average the steps since the last log
    return float(output.metrics["train_runtime"]), float(output.metrics["completions/mean_length"])


def compare(base: Path, root: Path, args: Any) -> None:
    per_window = args.b * args.k // args.group
    rows = grpo_rows(per_window * args.windows)
    times: dict[str, list[float]] = {"gradacc": [], "trl": []}
    lengths: dict[str, list[float]] = {"gradacc": [], "trl": []}
    for repeat in range(args.repeats):  # interleaved
        for name, runner in (("gradacc", ours), ("trl", trl_run)):
            seconds, length = runner(base, rows, root / f"grpo-{name}-{repeat}", args)
            times[name].append(seconds)
            lengths[name].append(length)
    completions = args.windows * args.b * args.k
    print(f"GRPO, builtin:tiny-chat, {len(rows)} chat-arithmetic prompts, G={args.group}, "
          f"b={args.b} K={args.k} ({per_window} prompts a step), {args.windows} optimizer steps, "
          f"{completions} completions of <= {args.max_completion} tokens, median of "
          f"{args.repeats}")  # fmt: skip
    for name in ("gradacc", "trl"):
        seconds = statistics.median(times[name])
        runs = ", ".join(f"{s:.2f}" for s in times[name])
        print(f"  {name:8} {completions / seconds:7.1f} completions/s "
              f"{args.windows / seconds:6.2f} optimizer steps/s   mean completion "
              f"{statistics.mean(lengths[name]):.1f} tokens   (runs {runs} s)")  # fmt: skip
    ratio = statistics.median(times["trl"]) / statistics.median(times["gradacc"])
    per_call = GrpoSettings(group_size=args.group).groups_per_call()
    calls = -(-per_window // per_call)
    print(f"  gradacc / TRL: {ratio:.2f}x. Unequal: gradacc makes {calls} generate call(s) a step "
          f"(chunks of {per_call} groups), TRL one for the step's {args.b * args.k}; completions "
          "sampled differ (each its own RNG), so lengths differ")  # fmt: skip
