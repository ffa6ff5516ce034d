"""DPO beside a peer: TRL's ``DPOTrainer`` and the gradacc core on the same model, the same pairs
and the same (b, K), in one run on this machine; then what the reference costs in memory.

Throughput. Both start from one saved copy of builtin:tiny-chat and train one epoch of
builtin:preference-arithmetic pairs (TRL's conversational rows: a prompt of messages, a chosen
and a rejected assistant message), sigmoid loss, beta 0.1, AdamW at a constant learning rate, no
warm-up, no clipping, fp32 on the CPU, sequences of at most 128 tokens (none is cut). Pairs/s is
the pairs of the epoch over each one's own clock of its training loop (gradacc's epoch
``train_seconds``, the Trainer's ``train_runtime``); tokenizing is outside both. Rows: gradacc
with the reference's log-probs cached (the default: computed once per pair before training, a
forward-only pass timed apart and shown with and without), gradacc online (the reference runs
at every micro-step, as TRL's default does), TRL's default (a frozen copy of the model run at
every micro-step) and TRL with ``precompute_ref_log_probs``. Runs are interleaved; median of
--repeats.

Memory. A wider model (tiny-chat's tokenizer, GPT-2 with n_embd 384, 6 layers: ~11M parameters,
so a copy is visible) trains a few steps in a fresh process per case: full fine-tuning or LoRA
(r 8 on c_attn), reference cached or online. Each reports the distinct parameter storage held
by every live ``nn.Module`` after the first step (a frozen reference copy is a second set) and
the process's peak RSS. With LoRA the reference is the model with its adapters off: online it
holds no more than cached.

TRL is a bench-only extra (``pip install -e '.[bench]'``), not a runtime dependency.

    .venv/bin/python bench/vs_trl_dpo.py [--rows 256] [--b 4] [--k 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.builtin.preference_corpus import preference_arithmetic
from trainer_core.data.load import load_job_data
from trainer_core.data.splits import PreferenceSplit
from trainer_core.loop.objectives.dpo import cached_reference
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

LR, SEED, MAX_LEN, BETA = 1e-3, 7, 128, 0.1
LORA = {"r": 8, "alpha": 16, "target_modules": ["c_attn"]}
MEMORY_CASES = ["full, cached", "full, online", "LoRA, cached", "LoRA, online"]


def prepare(root: Path, rows: int, wide: bool = False) -> tuple[Path, Path]:
    """The base model folder (tiny-chat, or a wider GPT-2 on its tokenizer) and a pairs JSONL."""
    spec = JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic", task="causal-lm")
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tokenizer, None)
    if wide:
        from transformers import GPT2Config, GPT2LMHeadModel

        shape = {"n_embd": 384, "n_layer": 6, "n_head": 6}
        torch.manual_seed(SEED)
        model = GPT2LMHeadModel(GPT2Config(**(model.config.to_dict() | shape)))
    base = root / ("wide" if wide else "base")
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    pairs = preference_arithmetic("train")
    data = root / "pairs.jsonl"
    with data.open("w") as out:
        for prompt, chosen, rejected in list(zip(*pairs.values(), strict=True))[:rows]:
            out.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected}) + "\n")
    return base, data


def dpo_spec(base: Path, data: Path, b: int, k: int, **changes: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"model": str(base), "dataset": str(data), "task": "causal-lm", "method": "dpo",
         "dpo_beta": BETA, "per_device_train_batch_size": b, "gradient_accumulation_steps": k,
         "num_train_epochs": 1, "learning_rate": LR, "lr_scheduler_type": "constant",
         "max_grad_norm": 0, "seed": SEED, "max_seq_length": MAX_LEN, "save_strategy": "no",
         "validation_split_percentage": 0} | changes
    )  # fmt: skip


def ours(base: Path, data: Path, out: Path, b: int, k: int, reference: str) -> dict[str, Any]:
    """One epoch: its clock, its pairs and its trained tokens (both completions)."""
    result = train(dpo_spec(base, data, b, k, reference_logprobs=reference), out)
    epoch = result.metrics[-1]
    return {"seconds": float(epoch["train_seconds"]), "pairs": int(epoch["train_items"]),
            "tokens": int(epoch["train_tokens"])}  # fmt: skip


def cache_seconds(base: Path, data: Path) -> float:
    """What caching costs once: the core's own pass over every pair, forward only."""
    spec = dpo_spec(base, data, 4, 1)
    tokenizer = load_tokenizer(spec)
    split = load_job_data(spec, tokenizer).train
    assert isinstance(split, PreferenceSplit)
    model = load_model(spec, tokenizer, None)
    started = time.perf_counter()
    cached_reference(model, split, int(tokenizer.pad_token_id), torch.device("cpu"))
    return time.perf_counter() - started


def trl_run(base: Path, data: Path, out: Path, b: int, k: int, precompute: bool) -> float:
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer  # type: ignore[attr-defined]

    config = DPOConfig(
        output_dir=str(out), per_device_train_batch_size=b, gradient_accumulation_steps=k,
        num_train_epochs=1, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        max_grad_norm=0.0, seed=SEED, data_seed=SEED, max_length=MAX_LEN, beta=BETA,
        loss_type=["sigmoid"], precompute_ref_log_probs=precompute, use_cpu=True, report_to=[],
        save_strategy="no", logging_steps=1_000_000, dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    torch.manual_seed(SEED)
    trainer = DPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base),
        args=config,
        train_dataset=load_dataset("json", data_files=str(data), split="train"),
        processing_class=AutoTokenizer.from_pretrained(base),
    )
    return float(trainer.train().metrics["train_runtime"])  # the Trainer's own clock of its loop


def throughput(args: argparse.Namespace, root: Path) -> None:
    b, k = args.b, args.k
    base, data = prepare(root, args.rows)
    cases: dict[str, Callable[[int], Any]] = {"gradacc, cached": lambda n: ours(base, data, root / f"c{n}", b, k, "cached"),
             "gradacc, online": lambda n: ours(base, data, root / f"o{n}", b, k, "online"),
             "TRL DPOTrainer": lambda n: trl_run(base, data, root / f"t{n}", b, k, False),
             "TRL, precompute_ref_log_probs": lambda n: trl_run(base, data, root / f"p{n}", b, k,
                                                                True)}  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    failed: dict[str, str] = {}
    counted: dict[str, Any] = {}
    for repeat in range(args.repeats):  # interleaved
        for name, case in cases.items():
            if name in failed:
                continue
            try:
                outcome = case(repeat)
            except Exception as error:  # a peer that fails on this stack: say how, go on
                failed[name] = f"{type(error).__name__}: {error}"
                continue
            if isinstance(outcome, dict):
                counted = outcome
                outcome = outcome["seconds"]
            seconds[name].append(float(outcome))
    cache = statistics.median(cache_seconds(base, data) for _ in range(args.repeats))
    pairs = counted["pairs"]
    print(f"preference-arithmetic, {pairs} pairs ({counted['tokens']} trained tokens in both "
          f"completions), builtin:tiny-chat, b={b} K={k}, 1 epoch, median of {args.repeats}")  # fmt: skip
    print(f"  {'':32} {'pairs/s':>8}  {'loop s':>7}")
    for name, times in seconds.items():
        if name in failed:
            print(f"  {name:32} failed: {failed[name]}")
        elif times:
            loop = statistics.median(times)
            print(f"  {name:32} {pairs / loop:8.1f}  {loop:7.2f}")
    loop = statistics.median(seconds["gradacc, cached"])
    print(f"  {'gradacc, cached, cache included':32} {pairs / (loop + cache):8.1f}  "
          f"{loop + cache:7.2f}   (cache: {cache:.2f} s once, {pairs / cache:.0f} pairs/s)")  # fmt: skip


class ParameterBytes(TrainingCallback):
    """After the first optimizer step: the distinct parameter storage of every live module."""

    def __init__(self) -> None:
        self.bytes: int | None = None

    def on_progress(self, progress: dict[str, Any]) -> None:
        if self.bytes is not None:
            return
        gc.collect()
        storages: dict[int, int] = {}
        for obj in gc.get_objects():
            if isinstance(obj, torch.nn.Module):
                for param in obj.parameters(recurse=False):
                    storage = param.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
        self.bytes = sum(storages.values())


def memory_child(case: str, base: Path, data: Path) -> None:
    """One memory case, alone in this process: prints one JSON line."""
    kind, reference = case.split(", ")
    changes: dict[str, Any] = {"reference_logprobs": reference, "max_steps": 3}
    if kind == "LoRA":
        changes["lora"] = LORA
    counter = ParameterBytes()
    with tempfile.TemporaryDirectory() as out:
        result = train(dpo_spec(base, data, 4, 2, **changes), out, callback=counter)
    print(json.dumps({"case": case, "parameter_bytes": counter.bytes,
                      "peak_rss_bytes": result.metrics[-1]["peak_memory_bytes"]}))  # fmt: skip


def memory(root: Path) -> None:
    base, data = prepare(root, 48, wide=True)
    model_bytes = sum(p.numel() * p.element_size() for p in load_wide(base).parameters())
    print(f"\nmemory: GPT-2 n_embd 384, 6 layers ({model_bytes / 2**20:.1f} MiB of fp32 parameters), "
          f"b=4 K=2, 3 steps, one fresh process per case")  # fmt: skip
    print(f"  {'':16} {'parameters held MiB':>20} {'x model':>8} {'peak RSS MiB':>13}")
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    for case in MEMORY_CASES:
        command = [sys.executable, __file__, "--memory-child", case, str(base), str(data)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            print(f"  {case:16} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        line = json.loads(done.stdout.strip().splitlines()[-1])
        held = line["parameter_bytes"]
        print(f"  {case:16} {held / 2**20:20.1f} {held / model_bytes:8.2f} "
              f"{line['peak_rss_bytes'] / 2**20:13.0f}")  # fmt: skip


def load_wide(base: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(base)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--b", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--memory-child", nargs=3, metavar=("CASE", "BASE", "DATA"))
    args = parser.parse_args()
    if args.memory_child:
        case, base, data = args.memory_child
        memory_child(case, Path(base), Path(data))
        return
    with tempfile.TemporaryDirectory() as tmp:
        throughput(args, Path(tmp))
        memory(Path(tmp))


if __name__ == "__main__":
    main()
