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

from trainer_core.distributed import ddp_ready
from trainer_core.loop.run import TrainingRun


class _ExactTrainer(Trainer):
    loss_is_scaled_for_ga = True
    training_run: TrainingRun
    last_grad_norm: Any = None

    def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:
        # The Trainer computes the pre-clip norm here (with max_norm=inf when clipping is off)
        # but hands it to no callback: keep it for the run's step record.
        self.last_grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)  # type: ignore[no-untyped-call]
        return self.last_grad_norm

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
            )
            hooks = _RunHooks(run)
            trainer = _ExactTrainer(
                model=ctx.model,
                args=args,
                optimizers=(ctx.optimizer, ctx.scheduler),  # type: ignore[arg-type]
                callbacks=[hooks],
            )
            hooks.trainer = trainer
            trainer.training_run = run
            trainer.remove_callback(PrinterCallback)  # the run reports; no stray prints
            resume = str(ctx.checkpoint_dir) if ctx.start_global_step > 0 else None
            trainer.train(resume_from_checkpoint=resume)
