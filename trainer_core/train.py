"""The one entry point: ``train(spec, output_dir, ...) -> TrainResult``.

It builds what every backend shares (data, model, the epoch plan, optimizer, scheduler), resumes
from ``output_dir/checkpoint`` when one exists, runs the backend, and writes ``metrics.jsonl``,
``summary.json`` and the final model in ``model/``.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from trainer_core.accumulation import micro_batches_per_epoch, optimizer_steps_per_epoch
from trainer_core.backends import get_backend
from trainer_core.callbacks import (
    NULL_CALLBACK,
    Status,
    StopCheck,
    TrainingCallback,
    TrainingCancelled,
    TrainResult,
    never_stop,
)
from trainer_core.checkpoint import load_training_state, read_state
from trainer_core.context import RunContext
from trainer_core.data import load_job_data
from trainer_core.errors import JobError, OutOfMemory
from trainer_core.loader import EpochLoader, EpochPlan
from trainer_core.models import load_model, load_tokenizer
from trainer_core.optim import build_optimizer, build_scheduler
from trainer_core.run import TrainingRun
from trainer_core.spec import JobSpec
from trainer_core.stopping import TrainingPreempted


def resolve_device(spec: JobSpec) -> torch.device:
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise JobError("device: cuda was requested but no GPU is visible", param="device")
    if spec.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec.device)


def _build_context(spec: JobSpec, output_dir: Path, resume: bool) -> RunContext:
    device = resolve_device(spec)
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    model = load_model(spec, tokenizer, data.label_names)
    model.to(device)  # type: ignore[arg-type]
    pad_id = int(tokenizer.pad_token_id)  # load_tokenizer guarantees a pad token
    b, k = spec.per_device_train_batch_size, spec.gradient_accumulation_steps
    loader = EpochLoader(
        EpochPlan(data.train, batch_size=b, accumulation=k, seed=spec.seed, pad_id=pad_id)
    )
    steps_per_epoch = optimizer_steps_per_epoch(len(data.train), b, k)
    total_steps = steps_per_epoch * spec.num_train_epochs
    optimizer = build_optimizer(model, spec)
    scheduler = build_scheduler(optimizer, spec, total_steps)
    ctx = RunContext(
        spec, data, model, pad_id, device, loader, optimizer, scheduler, output_dir,
        steps_per_epoch, total_steps,
        tokenizer=tokenizer,
    )  # fmt: skip
    state = read_state(ctx.checkpoint_dir) if resume else None
    if state is not None:
        if state.get("spec") != ctx.fingerprint:
            raise JobError("output_dir holds a checkpoint of a different spec", param="output_dir")
        load_training_state(
            ctx.checkpoint_dir, model=model, optimizer=optimizer, scheduler=scheduler
        )
        ctx.start_epoch, ctx.start_micro_step = state["epoch"], state["micro_step"]
        ctx.start_global_step, ctx.resume_state = state["global_step"], state
    return ctx


def _start_info(ctx: RunContext) -> dict[str, Any]:
    spec = ctx.spec
    return {
        "total_steps": ctx.total_steps,
        "steps_per_epoch": ctx.steps_per_epoch,
        "micro_batches_per_epoch": micro_batches_per_epoch(
            len(ctx.data.train), spec.per_device_train_batch_size
        ),
        "num_train_samples": len(ctx.data.train),
        "num_eval_samples": len(ctx.data.eval),
        "effective_batch_size": spec.effective_batch_size,
        "num_parameters": sum(p.numel() for p in ctx.model.parameters()),
        "device": str(ctx.device),
        "start_epoch": ctx.start_epoch,
        "start_step": ctx.start_global_step,
    }


def _finish(
    ctx: RunContext, run: TrainingRun, status: Status, info: dict[str, Any]
) -> dict[str, Any]:
    summary = {
        "status": status,
        "spec": ctx.spec.model_dump(),
        "optimizer_steps": run.global_step,
        "epochs_completed": len(run.metrics),
        "final_metrics": run.metrics[-1] if run.metrics else None,
        **info,
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
    }
    if status == "completed":
        ctx.model.save_pretrained(ctx.output_dir / "model", safe_serialization=True)
        ctx.tokenizer.save_pretrained(ctx.output_dir / "model")
        summary["model_dir"] = str(ctx.output_dir / "model")
    (ctx.output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def train(
    spec: JobSpec,
    output_dir: Path,
    *,
    callback: TrainingCallback = NULL_CALLBACK,
    should_stop: StopCheck = never_stop,
    resume: bool = True,
    progress_bar: bool = False,
) -> TrainResult:
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # "Writing model shards" bars on every checkpoint
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    ctx = _build_context(spec, output_dir, resume)
    tensorboard = None
    if "tensorboard" in spec.report_to:
        from trainer_core.tensorboard import TensorBoardCallback

        callback = tensorboard = TensorBoardCallback(callback, output_dir / "tensorboard")
    # metrics.jsonl holds exactly the epochs the checkpoint has seen (a crash may have left more).
    with (output_dir / "metrics.jsonl").open("w") as out:
        out.writelines(json.dumps(m) + "\n" for m in ctx.resume_state.get("metrics", []))
    run = TrainingRun(ctx, callback, should_stop, progress_bar)
    info = _start_info(ctx)
    callback.on_start(info)
    status: Status = "completed"
    try:
        get_backend(spec.backend).run(run)
    except torch.OutOfMemoryError as exc:
        raise OutOfMemory(
            f"per_device_train_batch_size: out of memory at micro-batch "
            f"{spec.per_device_train_batch_size}; lower it and raise gradient_accumulation_steps",
            param="per_device_train_batch_size",
        ) from exc
    except TrainingCancelled:
        status = "cancelled"
    except TrainingPreempted:
        status = "preempted"
    finally:
        run.close()
        if tensorboard is not None:
            tensorboard.close()
    summary = _finish(ctx, run, status, info)
    return TrainResult(status=status, metrics=run.metrics, summary=summary, output_dir=output_dir)
