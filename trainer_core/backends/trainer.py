"""The Hugging Face ``Trainer`` with ``TrainingArguments(gradient_accumulation_steps=K)``.

The Trainer keeps its loop (windows of K micro-batches with a partial last one, clipping, optimizer
and scheduler steps, resume), but two of its loss rules break exactness and are replaced here:
- it passes ``num_items_in_batch`` only to models that "accept loss kwargs", and then trusts the
  model to normalise — BERT classification accepts ``**kwargs`` and ignores it, so with K = 4 the
  loss is 4x too large;
- otherwise it divides each micro-batch mean by K, which weights tokens unequally.
``compute_loss`` returns Σ item losses / N_window (our shared math) and ``loss_is_scaled_for_ga``
tells the Trainer not to divide again. The Trainer's Accelerator has K = 1, so its backward does
not divide either.

With several processes (torchrun) the Trainer wraps the model in DDP itself and runs every
micro-batch but a window's last under ``accelerator.no_sync``; ``compute_loss`` is unchanged (our
loader's N_W is already per rank, see ``distributed``). Its gather of the window's item count
across ranks (``average_tokens_across_devices``) is switched off: we do not use it, and it would
be a second collective per window.

The Trainer drives its own loop; its callbacks call the run's hooks, and the run checks each of its
optimizer steps against the plan's windows.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import (
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from trainer_core.checkpoint.resume import restore_weights
from trainer_core.distributed import ddp_ready
from trainer_core.loop.run import TrainingRun
from trainer_core.model.sharding import block_classes, fp32_reduction, local_norm, shard_on_cpu


class _ExactTrainer(Trainer):
    loss_is_scaled_for_ga = True
    training_run: TrainingRun
    last_grad_norm: Any = None

    def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:
        # The Trainer computes the pre-clip norm here (with max_norm=inf when clipping is off)
        # but hands it to no callback: keep it for the run's step record.
        norm = super()._get_grad_norm(model, grad_norm=grad_norm)  # type: ignore[no-untyped-call]
        self.last_grad_norm = norm if norm is None else local_norm(norm)
        return self.last_grad_norm

    def create_accelerator_and_postprocess(self) -> None:
        """With sharding, the Trainer's FSDP2 plugin (its ``fsdp`` arguments) reducing gradients
        in fp32, and turned on for CPU processes too (``model.sharding.shard_on_cpu``)."""
        plugin_args = self.args.fsdp_plugin_args
        if plugin_args is not None:  # the Trainer sets no policy: it would reduce in 16 bits
            plugin_args["mixed_precision_policy"] = fp32_reduction()
        super().create_accelerator_and_postprocess()
        if plugin_args is not None and not self.is_fsdp_enabled:
            from accelerate.utils import FullyShardedDataParallelPlugin

            shard_on_cpu(self.accelerator, FullyShardedDataParallelPlugin(**plugin_args))
            self.is_fsdp_enabled = True

    def create_optimizer(self, model: Any = None) -> Any:
        """The run's optimizer: with sharding the Trainer asks for it before it shards the
        model, and Accelerate moves it onto the shards (it refuses one given at init)."""
        if self.optimizer is None:
            self.optimizer = self.training_run.ctx.optimizer
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        if self.lr_scheduler is None:
            self.lr_scheduler = self.training_run.ctx.scheduler  # type: ignore[assignment]
        return self.lr_scheduler

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if not self.is_fsdp_enabled:  # a sharded model's load with its optimizer's, below
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """A sharded checkpoint is read by the run's own loader (``restore_weights``: the
        whole peft state, any number of ranks); the schedule was restored with the run."""
        if checkpoint is None or not self.is_fsdp_enabled:
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        ctx = self.training_run.ctx
        restore_weights(Path(checkpoint), ctx.model, ctx.optimizer)

    def get_train_dataloader(self) -> Any:
        return self.training_run.ctx.loader

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        run = self.training_run
        step = run.ctx.micro_step(model, run.asked(inputs))
        run.after_micro_step(inputs, step)
        return step.loss


class _RunHooks(TrainerCallback):
    def __init__(self, run: TrainingRun) -> None:
        self.run = run
        self.trainer: _ExactTrainer | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.trainer is not None:
            ddp_ready(self.trainer.model_wrapped)  # DDP under torchrun; the model itself otherwise

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        # The Trainer's resume wraps the loader in a skip-loader without set_epoch: plan here too.
        epoch = math.floor(state.epoch + 1e-9) if state.epoch else 0
        self.run.ctx.loader.set_epoch(epoch)
        self.run.begin_epoch(epoch)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.run.after_optimizer_step(self.trainer.last_grad_norm if self.trainer else None)
        if self.run.selection.should_stop:
            control.should_training_stop = True  # early stopping: the run's decision, not ours

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.run.end_epoch()
        if self.run.selection.should_stop:
            control.should_training_stop = True


def _sharding(run: TrainingRun) -> dict[str, Any]:
    """The Trainer's ``fsdp`` arguments for a sharded job: FSDP2 on the model's blocks, its
    checkpoints sharded (DCP, in the layout every backend writes and resumes from)."""
    if run.ctx.spec.sharding != "fsdp":
        return {}
    config = {
        "version": 2,
        "transformer_layer_cls_to_wrap": sorted(block_classes(run.ctx.model)),
        "reshard_after_forward": True,
        "state_dict_type": "SHARDED_STATE_DICT",
    }
    return {"fsdp": True, "fsdp_config": config}


class TrainerLoop:
    def run(self, run: TrainingRun) -> None:
        ctx = run.ctx
        spec = ctx.spec
        with tempfile.TemporaryDirectory(prefix="gradacc-trainer-") as scratch:
            args = TrainingArguments(
                output_dir=scratch,
                per_device_train_batch_size=ctx.micro_batch_size,
                gradient_accumulation_steps=ctx.accumulation,
                num_train_epochs=spec.num_train_epochs,
                max_steps=spec.max_steps or -1,
                bf16=spec.mixed_precision == "bf16",
                fp16=spec.mixed_precision == "fp16",
                max_grad_norm=spec.max_grad_norm,
                seed=spec.seed,
                use_cpu=ctx.device.type == "cpu",
                eval_strategy="no",
                save_strategy="no",
                logging_strategy="no",
                report_to="none",
                disable_tqdm=True,
                remove_unused_columns=False,
                dataloader_pin_memory=False,
                average_tokens_across_devices=False,
                ddp_find_unused_parameters=False,  # every parameter gets a gradient: skip the search
                **_sharding(run),
            )
            hooks = _RunHooks(run)
            sharded = spec.sharding == "fsdp"
            trainer = _ExactTrainer(
                model=ctx.model,
                args=args,
                # A sharded model's are made once the Trainer has sharded it
                optimizers=(None, None) if sharded else (ctx.optimizer, ctx.scheduler),  # type: ignore[arg-type]
                callbacks=[hooks],
            )
            hooks.trainer = trainer
            trainer.training_run = run
            trainer.remove_callback(PrinterCallback)  # the run reports; no stray prints
            resume = str(ctx.checkpoint_dir) if ctx.start_global_step > 0 else None
            trainer.train(resume_from_checkpoint=resume)
