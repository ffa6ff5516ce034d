"""Build a run's context: what is loaded once per job (device, tokenizer, data) and what a
(re)start builds from it (model, micro-batch, epoch plan, optimizer, scheduler, resume state)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.checkpoint.resume import RunState, read_run_state, rescaled, restore
from trainer_core.data.cache import DataCache
from trainer_core.data.grpo import RolloutSplit, RolloutStream, WindowSource
from trainer_core.data.load import JobData, load_job_data
from trainer_core.data.loader import EpochLoader, Planned
from trainer_core.data.plan import optimizer_steps_per_epoch
from trainer_core.data.splits import TokenizedSplit
from trainer_core.distributed import World, join, launched_world, min_over_ranks
from trainer_core.loop import replan
from trainer_core.loop.autobatch import choose_micro_batch
from trainer_core.loop.context import RunContext
from trainer_core.loop.objectives import objective_for
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.model.memory_plan import planned_bytes
from trainer_core.model.optim import build_optimizer, build_scheduler
from trainer_core.model.precision import check_precision
from trainer_core.model.quantized import is_quantized
from trainer_core.model.sharding import shard_model
from trainer_core.spec.batching import accumulation_for
from trainer_core.spec.dpo import Method
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import CHECKPOINT_DIR


@dataclass(frozen=True)
class Inputs:
    device: torch.device
    tokenizer: PreTrainedTokenizerBase
    data: JobData
    world: World  # this process's rank among the job's data-parallel processes
    loader_workers: int  # processes that build batches off the training thread (0: on it)
    method: Method  # what the rows train: the spec's, or grpo for rollouts handed in
    windows: WindowSource | None = None  # a GRPO run's: each epoch's rollouts (data.grpo)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)  # load_tokenizer guarantees a pad token


@dataclass(frozen=True)
class MicroBatchChoice:
    size: int
    accumulation: int
    reason: str  # "spec", "probe" ("auto"), "checkpoint" (a resume keeps what was in force)
    detail: dict[str, Any]


def resolve_device(spec: JobSpec) -> torch.device:
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise JobError("device: cuda was requested but no GPU is visible", param="device")
    if spec.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec.device)


def _join_world(spec: JobSpec, device: torch.device) -> tuple[World, torch.device]:
    """This process's rank: a job of W processes runs under a launcher that started W of them."""
    world = launched_world()
    if world.size != spec.num_processes:
        raise JobError(
            f"num_processes: the job asks for {spec.num_processes} processes but runs in "
            f"{world.size}; start it with torchrun --nproc_per_node {spec.num_processes} "
            f"(on each of num_machines machines)",
            param="num_processes",
        )
    if world.distributed:
        device = join(world, device)
    return world, device


def load_inputs(
    spec: JobSpec,
    *,
    data_cache: DataCache | None = None,
    loader_workers: int | None = None,
    rollouts: RolloutSplit | RolloutStream | None = None,
) -> Inputs:
    world, device = _join_world(spec, resolve_device(spec))
    check_precision(spec.mixed_precision, device)
    tokenizer = load_tokenizer(spec)
    stream = None if rollouts is None else RolloutStream.of(rollouts)
    if stream is not None and stream.source is not None and loader_workers:
        raise ValueError("loader_workers: a GRPO run samples on the training thread (0)")
    if stream is None:
        data = load_job_data(spec, tokenizer, data_cache)
    else:  # rollouts train instead of the spec's dataset (``data.grpo``)
        data = JobData(stream.shape, TokenizedSplit([], None, []), None, format="rollouts")
    if loader_workers is None:
        # Inline by default. A batch of pre-tokenized rows is cheap to build, and on a GPU the
        # device computes asynchronously while the host builds the next one anyway; a worker
        # adds a process hop per batch. Measured (docs/benchmarks.md): on an H200 a worker made
        # tiny models 4-7 % slower, on this 2-core CPU 20 %. Heavy custom collation may want 1.
        loader_workers = 0
    method: Method = spec.method if rollouts is None else "grpo"
    return Inputs(
        device,
        tokenizer,
        data,
        world,
        loader_workers,
        method,
        None if stream is None else stream.source,
    )


def _micro_batch(
    spec: JobSpec,
    state: RunState | None,
    model: torch.nn.Module,
    inputs: Inputs,
    plan: replan.Replan | None,
) -> MicroBatchChoice:
    if plan is not None:  # the ranks ran out of memory: every one starts again at the smaller b
        detail: dict[str, Any] = {"tried": plan.tried}
        return MicroBatchChoice(plan.micro_batch_size, plan.accumulation, "out_of_memory", detail)
    if state is not None:
        size, k = state.micro_batch_size, state.gradient_accumulation_steps
        return MicroBatchChoice(size, k, "checkpoint", {})
    if spec.per_device_train_batch_size != "auto":
        assert spec.gradient_accumulation_steps is not None  # resolved by the spec
        return MicroBatchChoice(
            spec.per_device_train_batch_size, spec.gradient_accumulation_steps, "spec", {}
        )
    world = inputs.world
    planned = planned_bytes(spec, model, inputs.device)
    choice = choose_micro_batch(
        model,
        inputs.data.train,
        spec,
        inputs.device,
        inputs.pad_id,
        world=world.size,
        planned=planned,
    )
    size = min_over_ranks(choice.micro_batch_size, world)  # every rank must use the same
    assert spec.effective_batch_size is not None
    k = accumulation_for(spec.effective_batch_size, size, world.size)  # a divisor was chosen
    detail = {"budget_bytes": choice.budget_bytes, "tried": choice.tried}
    return MicroBatchChoice(size, k, "probe", detail)


def build_context(
    spec: JobSpec, output_dir: Path, inputs: Inputs, *, resume: bool
) -> tuple[RunContext, MicroBatchChoice]:
    state = read_run_state(output_dir / CHECKPOINT_DIR, spec) if resume else None
    if state is not None:  # saved by another number of processes: the same windows, rescaled
        state = rescaled(state, inputs.world.size)
    halved = replan.in_force(output_dir, state) if inputs.world.distributed else None
    if state is not None and halved is not None:
        state = replan.apply(state, halved)
    data = inputs.data
    model = load_model(spec, inputs.tokenizer, data.label_names, inputs.device)
    if not is_quantized(model):  # a 4-bit base is placed as it is quantized
        model.to(inputs.device)  # type: ignore[arg-type]
    choice = _micro_batch(spec, state, model, inputs, halved)
    b, k = choice.size, choice.accumulation
    world = inputs.world
    # The method's part of the run, chosen once (before restore(): DPO's reference is the
    # starting weights); it plans the epoch in its unit.
    objective = objective_for(
        inputs.method,
        spec,
        data,
        model,
        inputs.device,
        pad_id=inputs.pad_id,
        windows=inputs.windows,
    )
    sharded_here = spec.sharding == "fsdp" and spec.backend == "pytorch"
    if sharded_here:  # (Accelerate and the Trainer shard as they prepare the model)
        shard_model(model)  # after the objective: DPO's reference is the whole starting model
    plan = objective.plan(Planned(b, k, spec.seed, inputs.pad_id, world, spec.groups_by_length))
    cuda = inputs.device.type == "cuda"
    loader = EpochLoader(plan, num_workers=inputs.loader_workers, pin_memory=cuda)
    steps_per_epoch = optimizer_steps_per_epoch(len(data.train), b * world.size, k)
    total_steps = spec.max_steps or steps_per_epoch * spec.num_train_epochs
    optimizer = build_optimizer(model, spec)
    scheduler = build_scheduler(optimizer, spec, total_steps)
    ctx = RunContext(
        spec,
        data,
        model,
        inputs.pad_id,
        inputs.device,
        loader,
        optimizer,
        scheduler,
        output_dir,
        steps_per_epoch,
        total_steps,
        micro_batch_size=b,
        accumulation=k,
        resumed=state,
        tokenizer=inputs.tokenizer,
        world=world,
        objective=objective,
    )
    if state is not None:  # a backend that shards the model loads its state once it has
        weights = spec.sharding == "none" or sharded_here
        restore(
            ctx.checkpoint_dir,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            weights=weights,
        )
    return ctx, choice
