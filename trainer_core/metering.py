"""The run's measurements between host syncs: the exact mean train loss of an epoch (Σ item losses
/ Σ items, kept on the device), samples seen and the epoch's clock; and the process's peak memory."""

from __future__ import annotations

import resource
import time
from typing import Any

import torch


class LossMeter:
    """Sums of the current optimizer window apart from the epoch's closed windows: a window that
    is retried (out of memory) is dropped without a trace, and a window's own mean is known."""

    def __init__(self, device: torch.device, saved: dict[str, Any] | None = None) -> None:
        saved = saved or {}
        self.device = device
        self.loss_sum = torch.tensor(saved.get("loss_sum", 0.0), device=device)
        self.loss_items = int(saved.get("loss_items", 0))
        self.samples = 0
        self._window_sum = torch.zeros((), device=device)
        self._window_items = 0
        self._window_samples = 0
        self.started_at = time.perf_counter()

    def add(self, batch: dict[str, Any], summed: torch.Tensor) -> None:
        self._window_sum += summed  # stays on the device: no host sync, no graph (detached)
        self._window_items += int(batch["n_items"])
        self._window_samples += int(batch.get("n_rows", batch["input_ids"].shape[0]))  # 0: padding

    def close_window(self) -> tuple[torch.Tensor, int]:
        """The optimizer stepped: the window's sums join the epoch's. Returns the window's
        Σ item losses (on the device) and items, for its step record."""
        window = self._window_sum, self._window_items
        self.loss_sum += self._window_sum
        self.loss_items += self._window_items
        self.samples += self._window_samples
        self.drop_window()
        return window

    def drop_window(self) -> None:
        """The window is abandoned (it will be retried from its start)."""
        self._window_sum = torch.zeros((), device=self.device)
        self._window_items = self._window_samples = 0

    def start_clock(self) -> None:
        self.started_at = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.started_at

    def mean_loss(self) -> float:
        return self.loss_sum.item() / max(self.loss_items, 1)  # host sync: once per epoch


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class StepMeter:
    """What a step record needs between logging steps besides the window's loss (the LossMeter
    keeps that): the samples and the clock since the last record."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.samples = 0
        self.since = self.started_at = time.perf_counter()

    def add(self, batch: dict[str, Any]) -> None:
        self.samples += int(batch["input_ids"].shape[0])

    def due(self, global_step: int) -> bool:
        return global_step % self.every == 0

    def take(
        self, window: tuple[torch.Tensor, int], grad_norm: torch.Tensor | float | None
    ) -> dict[str, Any]:
        """The window's exact mean loss (Σ item losses, items), the gradient norm and samples/s
        (host sync: here only, at logging steps); starts the next interval."""
        now = time.perf_counter()
        seconds = now - self.since
        window_sum, window_items = window
        record = {
            "train_loss": window_sum.item() / max(window_items, 1),
            "grad_norm": None if grad_norm is None else float(grad_norm),
            "samples_per_second": round(self.samples / seconds, 2) if seconds > 0 else None,
        }
        self.samples, self.since = 0, now
        return record
