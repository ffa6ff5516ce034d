"""One training run: the epoch loop, written once, and what happens between micro-steps.

``TrainingRun.drive`` runs epochs and micro-batches for a backend that lets itself be driven (the
plain loop, Accelerate); the Trainer drives itself and calls the same hooks from its callbacks.
Either way the run checks each window against the epoch plan, meters the loss (``LossMeter``),
polls for a stop (``StopRequests``), reports progress, and ends each epoch with evaluation, a
metrics record and a checkpoint.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from typing import Any, Protocol

import torch
from tqdm import tqdm

from trainer_core.accumulation import COUNT_HITS, MicroStep
from trainer_core.checkpoint.resume import RunState
from trainer_core.distributed import agree_on_stop, sum_over_ranks
from trainer_core.loop.context import RunContext
from trainer_core.loop.meters import LossMeter, StepMeter, Window, means, peak_memory_bytes
from trainer_core.loop.metrics_file import MetricsFile
from trainer_core.loop.reports import SampleBudget, evaluation_report
from trainer_core.loop.saving import RunCheckpoints
from trainer_core.loop.selection import Selection
from trainer_core.loop.step_lines import StepLines
from trainer_core.loop.stopping import StopRequests, TrainingPreempted
from trainer_core.spec.callbacks import StopCheck, TrainingCallback, TrainingCancelled
from trainer_core.spec.outputs import EVALUATIONS_FILE, METRICS_FILE
from trainer_core.testing.failpoints import hold_at_step

log = logging.getLogger(__name__)


class SteppingBackend(Protocol):
    """A library the run can drive: its own lines for a micro-step and an optimizer step, and its
    own decision of when a window closes (which the run checks against the plan)."""

    def batches(self, epoch: int) -> Iterable[dict[str, Any]]: ...

    def forward_backward(self, batch: dict[str, Any]) -> MicroStep:
        """Back-propagate the micro-batch's share of its window's loss; the step's detached
        sums (for the meter)."""
        ...

    def window_closes(self, batch: dict[str, Any]) -> bool: ...

    def optimizer_step(self) -> torch.Tensor | None:
        """Clip, step the optimizer and the scheduler, zero the gradients; the gradient norm
        before clipping (computed with max_norm=inf when clipping is off)."""
        ...


class WindowMismatch(RuntimeError):
    """A library closed an optimizer window where the epoch plan does not (or did not close one
    where it does): accumulation would no longer be exact, so the run stops."""


class TrainingRun:
    def __init__(
        self,
        ctx: RunContext,
        callback: TrainingCallback,
        should_stop: StopCheck,
        progress_bar: bool,
    ) -> None:
        self.ctx = ctx
        self.callback = callback
        self.stop = StopRequests(should_stop)
        self.global_step = ctx.start_global_step
        resumed = ctx.resumed
        self.metrics: list[dict[str, Any]] = list(resumed.metrics) if resumed else []
        self.metrics_file = MetricsFile(
            ctx.output_dir / METRICS_FILE, self.metrics, enabled=ctx.world.is_main
        )
        self.bar = tqdm(total=ctx.total_steps, initial=self.global_step, disable=not progress_bar)
        self.epoch = ctx.start_epoch
        self.micro_step = ctx.start_micro_step
        self.world = ctx.world
        # A resumed epoch's partial loss sums are global; rank 0 carries them (save()).
        self.meter = LossMeter(ctx.device, resumed if self.world.is_main else None)
        self.window_start = ctx.start_micro_step  # micro-steps of the epoch before this window
        self.evaluating = False
        self.checkpoints = RunCheckpoints(ctx, callback)
        self.sample_budget = SampleBudget()
        self.reports = StepLines(ctx.output_dir / EVALUATIONS_FILE, enabled=ctx.world.is_main)
        self.selection = Selection(ctx.spec, resumed.selection if resumed else None)
        self._last_eval: tuple[int, dict[str, float]] | None = None  # (step, scores)
        # Step records: every logging_steps optimizer steps, by default about 50 an epoch.
        every = ctx.spec.logging_steps or max(1, math.ceil(ctx.steps_per_epoch / 50))
        self.steps = StepMeter(every)
        self.eval_every = (ctx.spec.eval_steps or every) if ctx.spec.eval_strategy == "steps" else 0
        self._count_hits = self._records(self.global_step + 1)  # the window in progress
        # The last micro-batch closed its window in the plan, and no optimizer step followed yet.
        self._plan_closed_window = False
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)  # peak of this run, not of the process

    def drive(self, backend: SteppingBackend) -> None:
        """Train from the run's start position to the last epoch with ``backend``."""
        ctx = self.ctx
        ctx.model.train()
        ctx.loader.dataset.resume_at(ctx.start_epoch, ctx.start_micro_step)
        for epoch in range(ctx.start_epoch, ctx.num_epochs):
            self.begin_epoch(epoch)
            for batch in backend.batches(epoch):
                step = backend.forward_backward(self.asked(batch))
                self.after_micro_step(batch, step)
                if backend.window_closes(batch):
                    grad_norm = backend.optimizer_step()
                    self.after_optimizer_step(grad_norm)
                    if self.global_step >= ctx.total_steps or self.selection.should_stop:
                        break  # max_steps reached, or early stopping, inside the epoch
            self.end_epoch()
            if self.selection.should_stop:
                break

    @property
    def stop_reason(self) -> str:
        """Why training ended: "early_stopping", "max_steps" or "epochs"."""
        if self.selection.should_stop:
            return "early_stopping"
        max_steps = self.ctx.spec.max_steps
        return "max_steps" if max_steps is not None and self.global_step >= max_steps else "epochs"

    def begin_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.micro_step, self.window_start = epoch, 0, 0
            self.meter = LossMeter(self.ctx.device)
        # The epoch's clock starts here, after the backend's own setup (the Trainer's is ~0.3 s),
        # so samples_per_second measures training alike in every backend.
        self.meter.start_clock()
        self.bar.set_description(f"epoch {epoch + 1}/{self.ctx.num_epochs}")

    def asked(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch, asking for its token hits in a window whose step is recorded (causal LM)."""
        batch[COUNT_HITS] = self._count_hits
        return batch

    def after_micro_step(self, batch: dict[str, Any], step: MicroStep) -> None:
        self._check_window(library_stepped=False)
        self._plan_closed_window = bool(batch["last_in_window"])
        self.meter.add(batch, step)
        self.micro_step += 1
        if not self.world.distributed:
            self.stop.poll()  # ranks must stop at the same step: they agree once per window instead

    def after_optimizer_step(self, grad_norm: torch.Tensor | float | None = None) -> None:
        self._check_window(library_stepped=True)
        if self.world.distributed:
            self._agree_on_stop()
        self._plan_closed_window = False
        window = self.meter.close_window()
        self.steps.add(window)
        self.window_start = self.micro_step
        self.global_step += 1
        self._count_hits = self._records(self.global_step + 1)
        self.bar.update(1)
        evaluate_now = self.eval_every > 0 and self.global_step % self.eval_every == 0
        if self.steps.due(self.global_step) or evaluate_now:
            self._report_step(window, grad_norm, evaluate_now)
        self.callback.on_progress(
            {
                "epoch": self.epoch + 1,
                "step": self.global_step,
                "total_steps": self.ctx.total_steps,
                "micro_step": self.micro_step,
                "learning_rate": self.learning_rate(),
            }
        )
        hold_at_step(self.global_step, keep_holding=self._keep_holding)  # tests only
        if self.stop.preempt_requested:
            self.save(epoch=self.epoch, micro_step=self.micro_step)
            self.checkpoints.report(block=True)  # on disk before the process says "preempted"
            raise TrainingPreempted
        self.checkpoints.report(block=False)
        # A window that ends its epoch or the run is asked by end_epoch, after the epoch's
        # evaluation and record (which the checkpoint holds); any other, here.
        if not self._window_ends_epoch_or_run() and self._save_due(evaluated=evaluate_now):
            self.save(epoch=self.epoch, micro_step=self.micro_step)

    def _window_ends_epoch_or_run(self) -> bool:
        ctx = self.ctx
        ends_epoch = self.micro_step >= ctx.micro_batches_per_epoch()
        return ends_epoch or self.global_step >= ctx.total_steps or self.selection.should_stop

    def _save_due(self, *, evaluated: bool) -> bool:
        """Whether a save is due after the window just closed: the one place that decides,
        asked once per window (a mid-epoch window by ``after_optimizer_step``, an epoch's or the
        run's last by ``end_epoch``). Selecting the best, every evaluation saves."""
        ctx = self.ctx
        ends_epoch = self.micro_step >= ctx.micro_batches_per_epoch()
        last = ends_epoch and ctx.is_last_epoch(self.epoch)
        ends_run = last or self.global_step >= ctx.total_steps or self.selection.should_stop
        picks = self.selection.load_best and evaluated
        due = self.checkpoints.due(self.global_step, ends_epoch=ends_epoch, ends_run=ends_run)
        return picks or due

    def _keep_holding(self, gate_exists: bool) -> bool:
        """While a test's failpoint holds the run: the caller's stop requests still count (a
        cancel raises, a preemption ends the hold), and ranks hold and leave together."""
        if self.world.distributed:
            self._agree_on_stop()
            gate_exists = sum_over_ranks([float(gate_exists)], self.world)[0] == self.world.size
        else:
            self.stop.poll()
        return gate_exists and not self.stop.preempt_requested

    def _report_step(
        self, window: Window, grad_norm: torch.Tensor | float | None, evaluate_now: bool
    ) -> None:
        ctx = self.ctx
        # Every rank's share of the window (one small all-reduce, at logging steps only); a
        # single process sums only its own. .item(): a host sync, here only.
        steps = self.steps
        sums = [
            window.loss_sum.item(),
            float(window.items),
            float(steps.samples),
            float(steps.tokens),
            float(steps.slots),
        ]
        if window.hits is not None:
            sums.append(float(window.hits.item()))
        names = sorted(window.sums)  # pairs: rewards and log-probs, means over the window's pairs
        totals = sum_over_ranks(sums + [window.sums[n].item() for n in names], self.world)
        loss_sum, items, samples, tokens, slots, *hits = totals[: len(sums)]
        steps.samples, steps.tokens, steps.slots = int(samples), int(tokens), int(slots)
        micro_per_epoch = ctx.micro_batches_per_epoch()
        record: dict[str, Any] = {
            "step": self.global_step,
            "epoch": round(self.epoch + self.micro_step / micro_per_epoch, 4),  # fractional
            **self.steps.take(loss_sum, int(items), grad_norm, hits[0] if hits else None),
            "learning_rate": self.learning_rate(),
        }
        record |= means(names, totals[len(sums) :], items)
        elapsed = time.perf_counter() - self.steps.started_at
        done = self.global_step - ctx.start_global_step  # steps of this run (resumes excluded)
        record["elapsed_seconds"] = round(elapsed, 3)
        record["eta_seconds"] = round(elapsed / done * (ctx.total_steps - self.global_step), 1)
        if evaluate_now:
            record |= self._evaluate()
        self.callback.on_step_metrics(record)

    def _records(self, step: int) -> bool:
        """The window that ends in optimizer step ``step`` is recorded, and counts its token
        hits (a causal LM's token accuracy: one argmax a micro-step, in those windows only)."""
        evaluated = self.eval_every > 0 and step % self.eval_every == 0
        return self.ctx.causal and (self.steps.due(step) or evaluated)

    def _agree_on_stop(self) -> None:
        request = agree_on_stop(self.stop.should_stop(), self.world)
        if request == "cancel":
            raise TrainingCancelled
        if request == "preempt":
            self.stop.preempt_requested = True

    def _evaluate(self, *, at_epoch_end: bool = False) -> dict[str, float]:
        """Evaluate (once per step: an eval step that ends an epoch is not evaluated twice) and
        let the selection see the scores."""
        if self._last_eval is not None and self._last_eval[0] == self.global_step:
            return self._last_eval[1]
        ctx = self.ctx
        if len(ctx.data.eval) == 0:  # validation_split_percentage 0 and no eval_dataset
            return {}
        self.evaluating = True
        predicted: list[int] = []
        assert ctx.objective is not None
        scores = ctx.objective.evaluate(ctx.model, self.world, predicted)
        self._last_eval = (self.global_step, scores)
        if self.selection.active:
            self.selection.observe(self.global_step, scores)
        if self.world.is_main:
            last = at_epoch_end and ctx.is_last_epoch(self.epoch)
            final = last or self.selection.should_stop or self.global_step >= ctx.total_steps
            epoch = round(self.epoch + self.micro_step / ctx.micro_batches_per_epoch(), 4)
            record = {"step": self.global_step, "epoch": epoch, "scores": scores}
            report = evaluation_report(ctx, predicted, self.sample_budget, final=final)
            self.reports.append(record | report)
        self.evaluating = False
        return scores

    def _check_window(self, *, library_stepped: bool) -> None:
        """The library steps exactly where the plan closes a window: right after the window's
        last micro-batch, never inside a window, and never leaves a closed window unstepped."""
        if library_stepped != self._plan_closed_window:
            what = (
                "stepped inside a window of the plan"
                if library_stepped
                else "did not step where the plan closes a window"
            )
            where = f"epoch {self.epoch + 1}, micro-step {self.micro_step}"
            raise WindowMismatch(f"{self.ctx.spec.backend}: the library {what} ({where})")

    def learning_rate(self) -> float:
        return float(self.ctx.optimizer.param_groups[0]["lr"])

    def end_epoch(self) -> dict[str, Any]:
        self._check_window(library_stepped=False)
        ctx, meter = self.ctx, self.meter
        seconds = meter.seconds()
        # Every rank's share (one collective per epoch); a single process sums only its own.
        names = sorted(meter.sums)  # pairs: rewards and log-probs, means over the epoch's pairs
        loss_sum, items, samples, train_tokens, *totals = sum_over_ranks(
            [meter.loss_sum.item(), meter.loss_items, meter.samples, meter.train_tokens]
            + [meter.sums[n].item() for n in names],
            self.world,
        )
        record: dict[str, Any] = {"epoch": self.epoch + 1, "train_loss": loss_sum / max(items, 1)}
        record |= means(names, totals, items)
        assert ctx.objective is not None
        record |= ctx.objective.epoch_record(train_tokens)
        if ctx.spec.packing:  # trained tokens over tokens computed (one more collective)
            trained, computed = sum_over_ranks([meter.run_items, meter.run_slots], self.world)
            record["packing_efficiency"] = round(trained / computed, 4) if computed else None
        record |= self._evaluate(at_epoch_end=True)
        record |= {
            "learning_rate": self.learning_rate(),
            "optimizer_steps": self.global_step,
            "train_samples": int(samples),
            "train_items": int(items),  # what the loss averaged over: trained tokens, or rows
            "train_seconds": round(seconds, 4),
            "samples_per_second": round(samples / seconds, 2) if seconds > 0 else None,
            "peak_memory_bytes": peak_memory_bytes(ctx.device),
        }
        self.metrics.append(record)
        self.metrics_file.append(record)
        if self.world.is_main:
            log.info("epoch %d/%d: %s", record["epoch"], ctx.num_epochs, _brief(record))
        self.callback.on_epoch_end(record)
        if self._save_due(evaluated=True):  # the epoch's (or the run's) last window
            self.save(epoch=self.epoch + 1, micro_step=0)
        return record

    def restart_window_with(self, micro_batch_size: int, accumulation: int) -> None:
        """Drop the window in progress and checkpoint its start for a micro-batch of
        ``micro_batch_size`` rows and K = ``accumulation``: the weights, optimizer and schedule
        have not moved since the window began, so the checkpoint is that moment exactly."""
        self.ctx.optimizer.zero_grad(set_to_none=True)
        self.meter.drop_window()
        windows_done = self.window_start // self.ctx.accumulation
        self.save(
            epoch=self.epoch,
            micro_step=windows_done * accumulation,
            micro_batch=(micro_batch_size, accumulation),
        )

    def save(
        self, *, epoch: int, micro_step: int, micro_batch: tuple[int, int] | None = None
    ) -> None:
        """A checkpoint at a window boundary; ``micro_step`` counts micro-batches of
        ``micro_batch`` (default: the size in force) done in ``epoch``."""
        ctx = self.ctx
        b, accumulation = micro_batch or (ctx.micro_batch_size, ctx.accumulation)
        loss_sum, loss_items, train_tokens = 0.0, 0.0, 0.0
        if micro_step > 0:  # inside an epoch: keep the meter's sums over every rank
            meter = self.meter
            loss_sum, loss_items, train_tokens = sum_over_ranks(
                [meter.loss_sum.item(), meter.loss_items, meter.train_tokens], self.world
            )
        state = RunState(
            epoch=epoch,
            micro_step=micro_step,
            global_step=self.global_step,
            micro_batch_size=b,
            gradient_accumulation_steps=accumulation,
            backend=ctx.spec.backend,
            spec=ctx.fingerprint,
            metrics=self.metrics,
            loss_sum=loss_sum,
            loss_items=int(loss_items),
            train_tokens=int(train_tokens),
            selection=self.selection.state.to_json(),
            evaluation={"step": self._last_eval[0], **self._last_eval[1]}
            if self._last_eval
            else None,
            world_size=ctx.world.size,
        )
        self.checkpoints.save(state, keep_step=self.selection.state.best_step)

    def close(self) -> None:
        """Wait for a checkpoint still being written (it must not be lost at exit)."""
        self.bar.close()
        self.checkpoints.report(block=True)


def _brief(record: dict[str, Any]) -> str:
    """The epoch's numbers for a log line: losses and quality first, 4 significant digits."""
    skip = {"epoch", "peak_memory_bytes"}
    parts = [
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in record.items()
        if key not in skip and value is not None
    ]
    return ", ".join(parts)
