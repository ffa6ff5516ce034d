"""The run's measurements between host syncs: the exact mean train loss of an epoch (Σ item losses
/ Σ items, kept on the device), samples seen and the epoch's clock; and the process's peak memory."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer_core.accumulation import MicroStep
from trainer_core.checkpoint.resume import RunState


def batch_rows(batch: dict[str, Any]) -> int:
    """The training rows a micro-batch holds: a rank's padding row in a ragged last micro-batch
    (``n_rows`` 0, every label ignored) is not a sample."""
    return int(batch.get("n_rows", batch["input_ids"].shape[0]))


@dataclass(frozen=True)
class Window:
    """One optimizer window's sums: Σ item losses (on the device), items and rows, and the
    trained tokens predicted exactly (on the device) when they were counted."""

    loss_sum: torch.Tensor
    items: int
    samples: int
    hits: torch.Tensor | None = None
    tokens: int = 0  # real tokens of its micro-batches
    slots: int = 0  # their padded size (rows x the longest row)
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # pairs: Σ of each metric


def add_sums(into: dict[str, torch.Tensor], sums: dict[str, torch.Tensor] | None) -> None:
    """Σ of each named metric (DPO's rewards and log-probs over pairs), on the device."""
    for name, value in (sums or {}).items():
        into[name] = into[name] + value if name in into else value


def means(names: list[str], totals: list[float], items: float) -> dict[str, float]:
    """Each metric's mean over the items (pairs) the totals were summed over."""
    return {name: total / max(items, 1) for name, total in zip(names, totals, strict=True)}


class LossMeter:
    """Sums of the current optimizer window apart from the epoch's closed windows: a window that
    is retried (out of memory) is dropped without a trace, and a window's own mean is known."""

    _window_hits: torch.Tensor | None

    def __init__(self, device: torch.device, resumed: RunState | None = None) -> None:
        self.device = device
        self.loss_sum = torch.tensor(resumed.loss_sum if resumed else 0.0, device=device)
        self.loss_items = resumed.loss_items if resumed else 0
        # Pairs: the trained tokens of both completions (a chat job's are its items already).
        self.train_tokens = resumed.train_tokens if resumed else 0
        self.samples = 0
        # Trained items and token slots computed (real + padding) of the windows run here, not
        # a resumed part: packing_efficiency = items / slots.
        self.run_items = self.run_slots = 0
        self.sums: dict[str, torch.Tensor] = {}  # the epoch's closed windows' metric sums
        self.started_at = time.perf_counter()
        self.drop_window()

    def add(self, batch: dict[str, Any], step: MicroStep) -> None:
        self._window_sum += step.summed  # stays on the device: no host sync, no graph (detached)
        self._window_items += int(batch["n_items"])
        self._window_samples += batch_rows(batch)
        self._window_train_tokens += int(batch.get("n_train_tokens", 0))
        if "n_tokens" in batch and batch_rows(batch):  # not a rank's all-ignored padding row
            self._window_tokens += int(batch["n_tokens"])
            self._window_slots += int(batch["input_ids"].numel())
        add_sums(self._window_sums, step.sums)
        if step.hits is not None:
            self._window_hits = (
                step.hits if self._window_hits is None else self._window_hits + step.hits
            )

    def close_window(self) -> Window:
        """The optimizer stepped: the window's sums join the epoch's, and are returned for its
        step record."""
        window = Window(
            self._window_sum,
            self._window_items,
            self._window_samples,
            self._window_hits,
            self._window_tokens,
            self._window_slots,
            self._window_sums,
        )
        add_sums(self.sums, self._window_sums)
        self.loss_sum += self._window_sum
        self.loss_items += self._window_items
        self.train_tokens += self._window_train_tokens
        self.samples += self._window_samples
        self.run_items += self._window_items
        self.run_slots += self._window_slots
        self.drop_window()
        return window

    def drop_window(self) -> None:
        """The window is abandoned (it will be retried from its start)."""
        self._window_sum = torch.zeros((), device=self.device)
        self._window_items = self._window_samples = self._window_train_tokens = 0
        self._window_tokens = self._window_slots = 0
        self._window_hits = None
        self._window_sums: dict[str, torch.Tensor] = {}

    def start_clock(self) -> None:
        self.started_at = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.started_at


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class StepMeter:
    """What a step record needs between logging steps besides its window's loss: the samples of
    the windows since the last record (counted as the LossMeter counts them) and the clock."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.samples = 0
        self.tokens = self.slots = 0  # for the padding fraction
        self.since = self.started_at = time.perf_counter()

    def add(self, window: Window) -> None:
        self.samples += window.samples
        self.tokens += window.tokens
        self.slots += window.slots

    def due(self, global_step: int) -> bool:
        return global_step % self.every == 0

    def take(
        self,
        loss_sum: float,
        items: int,
        grad_norm: torch.Tensor | float | None,
        hits: float | None = None,
    ) -> dict[str, Any]:
        """The window's exact mean loss (and, counted, its token accuracy), the gradient norm
        and samples/s since the last record; starts the next interval."""
        now = time.perf_counter()
        seconds = now - self.since
        record: dict[str, Any] = {
            "train_loss": loss_sum / max(items, 1),
            "grad_norm": None if grad_norm is None else float(grad_norm),  # host sync
            "samples_per_second": round(self.samples / seconds, 2) if seconds > 0 else None,
        }
        if hits is not None:
            record["train_mean_token_accuracy"] = hits / max(items, 1)
        if self.slots:
            record["padding_fraction"] = round(1 - self.tokens / self.slots, 4)
        self.samples, self.since = 0, now
        self.tokens = self.slots = 0
        return record
