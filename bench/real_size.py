"""Steady-state training throughput of the core on real-size models against a hand-written EXACT
loop (the same sum of item losses divided by the window's items, the same rows in the same
order), every backend, the default checkpoint policy (every epoch, in the background).

Two models built from configs (no download), saved once and loaded by both sides:
- ``gpt2-11m``: GPT-2, n_embd 384, 6 layers, 6 heads (about 11M parameters with the built-in
  tokenizer's vocabulary), causal LM on 192 rows of 64 tokens;
- ``bert-base``: BERT-base-shaped (768 hidden, 12 layers, 12 heads, 3072 intermediate), sequence
  classification on 192 rows of 64 tokens.
b = 4, K = 4, 2 epochs; the figure is epoch 2's samples/s (epoch 1 pays the warm-up and its
checkpoint write runs beside epoch 2, as in a real job). Runs alternate core / hand; median of
--repeats.

    .venv/bin/python bench/real_size.py [--models gpt2-11m,bert-base] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.accumulation import summed_loss
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

ROWS, SEQ, B, K, EPOCHS = 192, 64, 4, 4, 2
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "ran",
    "sat",
    "on",
    "mat",
    "blue",
    "red",
    "quick",
    "slow",
    "jumped",
    "over",
    "lazy",
    "fox",
    "good",
    "bad",
]


def build(kind: str, root: Path) -> tuple[Path, Path, str]:
    """(model folder, dataset file, task) for one of the two models."""
    task = "causal-lm" if kind == "gpt2-11m" else "sequence-classification"
    base = "builtin:tiny-gpt2" if task == "causal-lm" else "builtin:tiny-bert"
    tokenizer = load_tokenizer(JobSpec(model=base, dataset="builtin:sentiment", task=task))
    torch.manual_seed(0)
    if task == "causal-lm":
        config: Any = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=384,
                                 n_layer=6, n_head=6, resid_pdrop=0.0, embd_pdrop=0.0,
                                 attn_pdrop=0.0, pad_token_id=tokenizer.pad_token_id,
                                 bos_token_id=tokenizer.bos_token_id,
                                 eos_token_id=tokenizer.eos_token_id)  # fmt: skip
        model: Any = GPT2LMHeadModel(config)
    else:
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=768, num_hidden_layers=12,
                            num_attention_heads=12, intermediate_size=3072,
                            max_position_embeddings=128, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
                            pad_token_id=tokenizer.pad_token_id, num_labels=2,
                            id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})  # fmt: skip
        model = BertForSequenceClassification(config)
    folder = root / kind
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rng = random.Random(0)
    data = root / f"{kind}.jsonl"
    with data.open("w") as out:
        for i in range(ROWS + 16):
            text = " ".join(rng.choice(WORDS) for _ in range(3 * SEQ))  # truncated to SEQ
            out.write(json.dumps({"text": text, "label": "pos" if i % 2 else "neg"}) + "\n")
    return folder, data, task


DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def spec_of(folder: Path, data: Path, task: str, backend: str, precision: str = "no") -> JobSpec:
    return JobSpec.model_validate(
        {"model": str(folder), "dataset": str(data), "task": task, "backend": backend,
         "per_device_train_batch_size": B, "gradient_accumulation_steps": K,
         "num_train_epochs": EPOCHS, "max_seq_length": SEQ, "max_train_samples": ROWS,
         "max_eval_samples": 16, "learning_rate": 1e-4, "seed": 1, "mixed_precision": precision}
    )  # fmt: skip


def core(spec: JobSpec) -> float:
    with tempfile.TemporaryDirectory() as out:
        result = train(spec, Path(out))
    return float(result.metrics[-1]["samples_per_second"])


def hand(spec: JobSpec, on_step: Callable[[int], None] | None = None) -> float:
    """A user's exact loop: the core's own tokenized rows and epoch order, Σ losses / N_W;
    ``on_step`` is called with the global step after each optimizer step."""
    from trainer_core.data.loader import EpochPlan
    from trainer_core.model.load import load_model

    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, data.label_names).to(DEVICE)  # type: ignore[arg-type]
    bf16 = spec.mixed_precision == "bf16"
    plan = EpochPlan(data.train, batch_size=B, accumulation=K, seed=spec.seed,
                     pad_id=int(tokenizer.pad_token_id))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate)
    causal = spec.task == "causal-lm"
    model.train()
    seconds, step = 0.0, 0
    for epoch in range(EPOCHS):
        plan.set_epoch(epoch)
        started = time.perf_counter()
        for i in range(len(plan)):
            batch = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in plan[i].items()}
            with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
                logits = model(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
                ).logits
                loss = summed_loss(logits, batch["labels"], causal) / batch["n_window_items"]
            loss.backward()
            if batch["last_in_window"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                if on_step is not None:
                    on_step(step)
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started  # the last epoch's
    return ROWS / seconds


def table(models: list[str], backends: list[str], repeats: int, precision: str = "no") -> None:
    """Print the markdown table: one row per model and backend (core, twin, ratio)."""
    where = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "CPU"
    print(f"# epoch-{EPOCHS} samples/s, {ROWS} rows of {SEQ} tokens, b={B} K={K}, median of "
          f"{repeats}, {where}, {torch.get_num_threads()} threads, precision {precision}")  # fmt: skip
    print("| model | backend | core | hand exact loop | ratio |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in models:
            folder, data, task = build(kind, Path(tmp))
            for backend in backends:
                spec = spec_of(folder, data, task, backend, precision)
                ours, theirs = [], []
                for _ in range(repeats):
                    ours.append(core(spec))
                    theirs.append(hand(spec))
                mine, twin = statistics.median(ours), statistics.median(theirs)
                print(f"| {kind} | {backend} | {mine:.1f} | {twin:.1f} | {mine / twin:.3f} |",
                      flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="gpt2-11m,bert-base")
    parser.add_argument("--backends", default="pytorch,accelerate,trainer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precision", choices=["no", "bf16"], default="no")
    args = parser.parse_args()
    table(args.models.split(","), args.backends.split(","), args.repeats, args.precision)


if __name__ == "__main__":
    main()
