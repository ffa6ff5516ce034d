"""Samples/s of each gradacc backend against the same library driven by hand, same model and data.

The hand-driven twins are what a user would write: the model's own (mean) loss divided by K, a
standard DataLoader with RandomSampler and DataCollatorWithPadding. Only the training epoch is
timed (no evaluation, no checkpoint), runs are interleaved, and the median of REPEATS is reported.

    .venv/bin/python bench/core_throughput.py [--repeats 3] [--task classification|causal-lm]
        [--real-size gpt2-11m,bert-base]

``--real-size`` adds the real-size models of ``bench/real_size.py`` (an ~11M GPT-2 and a
BERT-base-shaped classifier, built from configs) against the exact hand loop, every backend, with
the default checkpoint policy: the steady-state figure of epoch 2 (about 20 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_core.data.load import JobData, load_job_data
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.model.optim import build_optimizer, build_scheduler
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")

SPECS = {
    "classification": {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
    "causal-lm": {
        "model": "builtin:tiny-gpt2",
        "dataset": "builtin:tiny-stories",
        "task": "causal-lm",
    },
}
COMMON = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 4, "num_train_epochs": 1,
          "learning_rate": 1e-3, "max_eval_samples": 8}  # fmt: skip


def _setup(spec: JobSpec) -> tuple[Any, Any, JobData, DataLoader[Any], torch.optim.Optimizer, Any]:
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, data.label_names)
    model.to(DEVICE)  # type: ignore[arg-type]
    if data.train.labels is None:
        rows = [{"input_ids": [int(t) for t in ids]} for ids in data.train.input_ids]
        collator: Any = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    else:
        rows = [
            {"input_ids": [int(t) for t in ids], "labels": y}
            for ids, y in zip(data.train.input_ids, data.train.labels, strict=True)
        ]
        collator = DataCollatorWithPadding(tokenizer)
    loader = DataLoader(
        rows, batch_size=spec.per_device_train_batch_size, shuffle=True, collate_fn=collator
    )  # type: ignore[arg-type]
    optimizer = build_optimizer(model, spec)
    steps = -(-len(loader) // spec.gradient_accumulation_steps)
    return model, rows, data, loader, optimizer, build_scheduler(optimizer, spec, steps)


def bare_loop(spec: JobSpec) -> float:
    model, rows, _, loader, optimizer, scheduler = _setup(spec)
    k = spec.gradient_accumulation_steps
    model.train()
    start = time.perf_counter()
    for i, cpu_batch in enumerate(loader):
        batch = {key: value.to(DEVICE, non_blocking=True) for key, value in cpu_batch.items()}
        (model(**batch).loss / k).backward()
        if (i + 1) % k == 0 or i + 1 == len(loader):
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    if CUDA:
        torch.cuda.synchronize()
    return len(rows) / (time.perf_counter() - start)


def raw_accelerate(spec: JobSpec) -> float:
    model, rows, _, loader, optimizer, scheduler = _setup(spec)
    accelerator = Accelerator(
        gradient_accumulation_steps=spec.gradient_accumulation_steps, cpu=not CUDA
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()
    start = time.perf_counter()
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    if CUDA:
        torch.cuda.synchronize()
    return len(rows) / (time.perf_counter() - start)


class _EpochTimer(TrainerCallback):
    def on_epoch_begin(self, *args: Any, **kwargs: Any) -> None:
        self.start = time.perf_counter()

    def on_epoch_end(self, *args: Any, **kwargs: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def raw_trainer(spec: JobSpec) -> float:
    model, rows, _, loader, optimizer, scheduler = _setup(spec)
    timer = _EpochTimer()
    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(output_dir=scratch, per_device_train_batch_size=spec.per_device_train_batch_size,
                                 gradient_accumulation_steps=spec.gradient_accumulation_steps, num_train_epochs=1,
                                 max_grad_norm=spec.max_grad_norm, use_cpu=not CUDA, eval_strategy="no", save_strategy="no",
                                 logging_strategy="no", report_to="none", disable_tqdm=True)  # fmt: skip
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=loader.collate_fn,  # type: ignore[arg-type]
                          optimizers=(optimizer, scheduler), callbacks=[timer])  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return len(rows) / timer.seconds


def gradacc(spec: JobSpec, loader_workers: int | None = None) -> float:
    """The core's samples/s; ``loader_workers`` None is the core's own default."""
    with tempfile.TemporaryDirectory() as out:
        result = train(spec, Path(out), loader_workers=loader_workers)
    return float(result.metrics[0]["samples_per_second"])


TWINS: dict[str, Callable[[JobSpec], float]] = {
    "pytorch": bare_loop,
    "accelerate": raw_accelerate,
    "trainer": raw_trainer,
}


def measure(
    task: str, repeats: int, backends: list[str], loader_workers: int | None
) -> list[tuple[str, float, float]]:
    rows = []
    for backend, twin in TWINS.items():
        if backend not in backends:
            continue
        spec = JobSpec(**SPECS[task], **COMMON, backend=backend)
        ours, theirs = [], []
        for _ in range(repeats):  # interleaved, so drift hits both alike
            ours.append(gradacc(spec, loader_workers))
            theirs.append(twin(spec))
        rows.append((backend, statistics.median(ours), statistics.median(theirs)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (0: torch's default)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--task", choices=[*SPECS, "all", "none"], default="all")
    parser.add_argument("--backends", default=",".join(TWINS))
    parser.add_argument(
        "--loader-workers", type=int, default=None, help="the core's (default: its own)"
    )
    parser.add_argument("--real-size", default="", help="models of bench/real_size.py to add")
    parser.add_argument("--precision", choices=["no", "bf16"], default="no", help="--real-size's")
    args = parser.parse_args()
    if args.threads:
        # One thread is immune to the spin-wait slowdown that 2 threads suffer when anything else
        # runs on a 2-core box; both sides of every ratio use the same setting.
        torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if CUDA else f"CPU, {torch.get_num_threads()} threads"
    workers = "default" if args.loader_workers is None else args.loader_workers
    print(f"# core throughput: b=8, K=4, 2,000 rows, 1 epoch, median of {args.repeats}, {where}, "
          f"core loader workers {workers}")  # fmt: skip
    print("| task | backend | gradacc samples/s | hand-driven samples/s | ratio |")
    print("|---|---|---:|---:|---:|")
    for task in {"all": list(SPECS), "none": []}.get(args.task, [args.task]):
        for backend, ours, theirs in measure(
            task, args.repeats, args.backends.split(","), args.loader_workers
        ):
            print(
                f"| {task} | {backend} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.3f} |",
                flush=True,
            )
    if args.real_size:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import real_size

        print()
        backends = args.backends.split(",")
        real_size.table(args.real_size.split(","), backends, args.repeats, args.precision)


if __name__ == "__main__":
    main()
