"""The training loop's entry: ``train(spec, output_dir, ...) -> TrainResult``. (A job's entry,
whatever its method, is ``trainer_core.entry.run_job``: SFT and DPO come here directly; GRPO's
driver, ``trainer_core.grpo``, samples and grades its windows and comes here once, with them.)

It loads the data once, builds the run's context (model, micro-batch, epoch plan, optimizer,
scheduler), resumes from ``output_dir/checkpoint`` when one exists, runs the backend, and writes
``metrics.jsonl``, ``summary.json`` and the final model in ``model/`` (with LoRA: ``adapter/``,
and ``model/`` merged on request).

Out of memory during training, the micro-batch shrinks and the effective batch does not: the
partial window is dropped, a checkpoint is taken at the window's start with the micro-batch
halved and K doubled, and the run resumes from it (same rows in every window, so the same
training). After ``replan.MAX_HALVINGS`` it fails with ``out_of_memory``, naming what it tried.
With several ranks, every one starts again from the last checkpoint instead (``loop.replan``).

Example:
    >>> from trainer_core import JobSpec, train
    >>> spec = JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment",
    ...                per_device_train_batch_size=4, effective_batch_size=16,
    ...                num_train_epochs=1, max_train_samples=64)
    >>> result = train(spec, "runs/example")  # doctest: +SKIP
    >>> result.status, result.metrics[-1]["train_loss"]  # doctest: +SKIP
    ('completed', 0.69...)
"""

from __future__ import annotations

import gc
import json
import logging
import platform
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers.utils import logging as hf_logging

from trainer_core.backends import get_backend
from trainer_core.checkpoint.format import best_checkpoint, load_weights
from trainer_core.checkpoint.sharded import load_shards
from trainer_core.data.cache import DataCache
from trainer_core.data.grpo import RolloutSplit, RolloutStream
from trainer_core.distributed import barrier
from trainer_core.loop import replan
from trainer_core.loop.build import Inputs, MicroBatchChoice, build_context, load_inputs
from trainer_core.loop.context import RunContext
from trainer_core.loop.notices import start_warnings
from trainer_core.loop.run import TrainingRun
from trainer_core.loop.stopping import TrainingPreempted
from trainer_core.model.memory_plan import job_plan
from trainer_core.model.sharding import full_state_dict, is_sharded
from trainer_core.spec.batching import accumulation_for
from trainer_core.spec.callbacks import (
    NULL_CALLBACK,
    Status,
    StopCheck,
    TrainingCallback,
    TrainingCancelled,
    TrainResult,
    never_stop,
)
from trainer_core.spec.errors import OutOfMemory
from trainer_core.spec.job import JobSpec
from trainer_core.spec.memory import MemoryPlan
from trainer_core.spec.outputs import MODEL_DIR, SUMMARY_FILE, TENSORBOARD_DIR

log = logging.getLogger(__name__)


def _start_info(ctx: RunContext) -> dict[str, Any]:
    plan = _memory_plan(ctx)
    advice = None if plan is None else plan.advice()  # over the device: what would fit
    return {
        "total_steps": ctx.total_steps,
        "steps_per_epoch": ctx.steps_per_epoch,
        "micro_batches_per_epoch": ctx.micro_batches_per_epoch(),
        "num_processes": ctx.world.size,
        "num_train_samples": len(ctx.data.train),
        "num_eval_samples": len(ctx.data.eval),
        "effective_batch_size": ctx.spec.effective_batch_size,
        "num_parameters": sum(p.numel() for p in ctx.model.parameters()),
        "num_trainable_parameters": sum(
            p.numel() for p in ctx.model.parameters() if p.requires_grad
        ),
        "device": str(ctx.device),
        "start_epoch": ctx.start_epoch,
        "start_step": ctx.start_global_step,
        "dataset_format": ctx.data.format,
        "rows_without_trained_tokens": ctx.data.dropped,
        "warnings": start_warnings(ctx) + ([advice] if advice else []),
        "memory_plan": None if plan is None else plan.as_dict() | {"line": plan.line()},
    }


# The start's plan measures activations on fake tensors, whose first use in a process imports
# torch._dynamo (~1 s of CPU): on a GPU always; on a CPU, whose memory is the host's, for models
# of this many parameters or more (a tiny job's plan would cost more than its training).
PLANNED_ON_CPU_FROM = 100_000_000


def _memory_plan(ctx: RunContext) -> MemoryPlan | None:
    """The job's memory plan per device (rank 0 reports it)."""
    if not ctx.world.is_main:
        return None
    if ctx.device.type == "cpu" and _parameters(ctx.model) < PLANNED_ON_CPU_FROM:
        return None
    shards = ctx.world.size if ctx.spec.sharding == "fsdp" else 1
    return job_plan(
        ctx.spec,
        ctx.model,
        micro_batch=ctx.micro_batch_size,
        device=ctx.device,
        shards=shards,
        accumulation=ctx.accumulation,
    )


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _log_start(ctx: RunContext, info: dict[str, Any]) -> None:
    spec = ctx.spec
    log.info(
        "start: %s on %s, %s backend, device %s, %d parameters; effective batch %d "
        "(micro-batch %d x K %d); %d train rows, %d eval rows; %d optimizer steps "
        "(%d per epoch, %d epochs)%s",
        spec.model,
        spec.dataset,
        spec.backend,
        info["device"],
        info["num_parameters"],
        spec.effective_batch_size,
        ctx.micro_batch_size,
        ctx.accumulation,
        info["num_train_samples"],
        info["num_eval_samples"],
        info["total_steps"],
        info["steps_per_epoch"],
        ctx.num_epochs,
        f"; resuming at epoch {ctx.start_epoch + 1}, step {ctx.start_global_step}"
        if ctx.start_global_step or ctx.start_epoch
        else "",
    )


def _batch_info(ctx: RunContext, choice: MicroBatchChoice, tried: list[int]) -> dict[str, Any]:
    return {
        "micro_batch_size": ctx.micro_batch_size,
        "gradient_accumulation_steps": ctx.accumulation,
        "effective_batch_size": ctx.spec.effective_batch_size,
        "reason": choice.reason,
        "tried": tried,
        **choice.detail,
    }


def _save_model(ctx: RunContext, whole: dict[str, torch.Tensor] | None = None) -> dict[str, str]:
    """The final model (rank 0). ``whole``: a sharded model's state, gathered whole."""
    if ctx.spec.lora is not None:
        from trainer_core.model.lora import save_outputs

        merge = ctx.spec.merge_lora
        return save_outputs(ctx.model, ctx.tokenizer, ctx.output_dir, merge=merge, whole=whole)
    ctx.model.save_pretrained(ctx.output_dir / MODEL_DIR, safe_serialization=True, state_dict=whole)
    ctx.tokenizer.save_pretrained(ctx.output_dir / MODEL_DIR)
    return {"model_dir": str(ctx.output_dir / MODEL_DIR)}


def _finish(
    ctx: RunContext, run: TrainingRun, status: Status, info: dict[str, Any]
) -> dict[str, Any]:
    summary = {
        "status": status,
        "spec": ctx.spec.model_dump(),
        "optimizer_steps": run.global_step,
        "epochs_completed": len(run.metrics),
        "final_metrics": run.metrics[-1] if run.metrics else None,
        "train_seconds": round(sum(m.get("train_seconds", 0.0) for m in run.metrics), 4),
        # What checkpointing cost the training thread (the writes themselves run beside it).
        "checkpoints_saved": len(run.checkpoints.stalls),
        "checkpoint_stall_seconds": round(sum(run.checkpoints.stalls), 4),
        **info,
        "micro_batch_size": ctx.micro_batch_size,
        "gradient_accumulation_steps": ctx.accumulation,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }
    if status == "completed":
        summary |= run.selection.summary(run.stop_reason)
    sharded = is_sharded(ctx.model)
    if status == "completed" and sharded:  # every rank gathers the model, rank 0 writes it
        summary |= _save_sharded(ctx, run)
    if not ctx.world.is_main:
        return summary  # rank 0 writes the run's files
    if status == "completed" and not sharded:
        best = run.selection.state.best_step
        if run.selection.load_best and best is not None:
            load_weights(best_checkpoint(ctx.checkpoint_dir, best), ctx.model)
            summary["model_step"] = best  # the weights in model/: the best checkpoint's
        summary |= _save_model(ctx)
    (ctx.output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


def _save_sharded(ctx: RunContext, run: TrainingRun) -> dict[str, Any]:
    """A sharded model consolidated: the best checkpoint's shards loaded when selecting, the
    whole state gathered to rank 0's CPU memory, written as any model (the plain safetensors
    folder download, serving and the merged export read)."""
    saved: dict[str, Any] = {}
    best = run.selection.state.best_step
    if run.selection.load_best and best is not None:
        load_shards(best_checkpoint(ctx.checkpoint_dir, best), ctx.model, None)
        saved["model_step"] = best
    whole = full_state_dict(ctx.model)
    if ctx.world.is_main:
        saved |= _save_model(ctx, whole)
    return saved


def _out_of_memory(ctx: RunContext, tried: list[int]) -> OutOfMemory:
    sizes = ", ".join(str(size) for size in tried)
    return OutOfMemory(
        f"per_device_train_batch_size: out of memory at micro-batch sizes {sizes} (effective "
        f"batch {ctx.spec.effective_batch_size}); lower max_seq_length, turn on "
        "gradient_checkpointing or mixed_precision, or use a larger device",
        param="per_device_train_batch_size",
    )


def _shrink(ctx: RunContext, run: TrainingRun, tried: list[int]) -> None:
    """Checkpoint the start of the window that ran out of memory with a smaller micro-batch."""
    smaller = replan.halved(ctx.micro_batch_size, tried)
    if smaller is None:
        raise _out_of_memory(ctx, tried)
    tried.append(smaller)
    assert ctx.spec.effective_batch_size is not None  # resolved by the spec
    run.restart_window_with(
        smaller, accumulation_for(ctx.spec.effective_batch_size, smaller, ctx.world.size)
    )


def _replan(ctx: RunContext, tried: list[int]) -> replan.RanksReplan:
    """Several ranks: every one starts again at the smaller micro-batch (``loop.replan``)."""
    assert ctx.spec.effective_batch_size is not None  # resolved by the spec
    return replan.request(
        ctx.output_dir,
        micro_batch=ctx.micro_batch_size,
        effective=ctx.spec.effective_batch_size,
        world=ctx.world.size,
        tried=tried,
        exhausted=_out_of_memory(ctx, tried).message,
    )


def _release(ctx: RunContext) -> None:
    ctx.optimizer.zero_grad(set_to_none=True)
    del ctx.model, ctx.optimizer, ctx.scheduler
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _run(
    spec: JobSpec,
    inputs: Inputs,
    ctx: RunContext,
    callback: TrainingCallback,
    tried: list[int],
    **run_kw: Any,
) -> tuple[RunContext, TrainingRun, Status]:
    """Run the backend; after running out of memory, again from the window's start. ``tried``:
    the micro-batch sizes tried so far, ending with the one in force."""
    while True:
        run = TrainingRun(ctx, callback, **run_kw)
        try:
            get_backend(spec.backend).run(run)
            return ctx, run, "completed"
        except TrainingCancelled:
            return ctx, run, "cancelled"
        except TrainingPreempted:
            return ctx, run, "preempted"
        except torch.OutOfMemoryError as exc:
            if run.evaluating:
                raise OutOfMemory(
                    f"per_device_eval_batch_size: out of memory evaluating at "
                    f"{spec.per_device_eval_batch_size} rows; lower it",
                    param="per_device_eval_batch_size",
                ) from exc
            if ctx.world.distributed:  # one rank's retry would leave the others waiting
                raise _replan(ctx, tried) from exc
            _shrink(ctx, run, tried)
        finally:
            run.close()
        _release(ctx)
        ctx, choice = build_context(spec, ctx.output_dir, inputs, resume=True)
        callback.on_batch_size(_batch_info(ctx, choice, tried) | {"reason": "out_of_memory"})


def train(
    spec: JobSpec,
    output_dir: Path | str,
    *,
    callback: TrainingCallback = NULL_CALLBACK,
    should_stop: StopCheck = never_stop,
    resume: bool = True,
    progress_bar: bool = False,
    data_cache: DataCache | None = None,
    loader_workers: int | None = None,
    rollouts: RolloutSplit | RolloutStream | None = None,
) -> TrainResult:
    """Train one job; see the module docstring. ``data_cache`` keeps the tokenized data between
    jobs and resumes (without one it lives in a temporary folder); ``loader_workers`` processes
    build the batches off the training thread (0, the default: on it). ``rollouts``: fixed
    GRPO-family rollouts (``data.grpo``) train instead of the spec's dataset, or a
    ``RolloutStream`` whose epoch e trains window e, sampled from the live model (``grpo``).

    Example:
        >>> from trainer_core.data.cache import DataCache
        >>> spec = JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment")
        >>> result = train(spec, Path("out"), data_cache=DataCache(Path("cache")))  # doctest: +SKIP
    """
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # "Writing model shards" bars on every checkpoint
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    inputs = load_inputs(
        spec, data_cache=data_cache, loader_workers=loader_workers, rollouts=rollouts
    )
    ctx, choice = build_context(spec, output_dir, inputs, resume=resume)
    if not ctx.world.is_main:  # metrics, progress and events come from rank 0; a callback
        # with work every rank must do (a GRPO run's evaluation: collectives) names its own.
        callback = getattr(callback, "other_ranks", NULL_CALLBACK)
    tensorboard = None
    if "tensorboard" in spec.report_to:
        from trainer_core.loop.tensorboard import TensorBoardCallback

        callback = tensorboard = TensorBoardCallback(callback, output_dir / TENSORBOARD_DIR)
    info = _start_info(ctx)
    _log_start(ctx, info)
    callback.on_start(info)
    # After a re-plan (``loop.replan``), every size tried so far; else the one in force.
    tried = choice.detail["tried"] if choice.reason == "out_of_memory" else [ctx.micro_batch_size]
    callback.on_batch_size(_batch_info(ctx, choice, tried))
    try:
        ctx, run, status = _run(
            spec, inputs, ctx, callback, tried, should_stop=should_stop, progress_bar=progress_bar
        )
    finally:
        if tensorboard is not None:
            tensorboard.close()
    summary = _finish(ctx, run, status, info)
    barrier(ctx.world)  # the final model is on disk before any rank reports the run done
    log.info("%s after %d optimizer steps", status, run.global_step)
    return TrainResult(status=status, metrics=run.metrics, summary=summary, output_dir=output_dir)
