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

    def close_window(self) -> None:
        """The optimizer stepped: the window's sums join the epoch's."""
        self.loss_sum += self._window_sum
        self.loss_items += self._window_items
        self.samples += self._window_samples
        self.drop_window()

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

    def saved(self) -> dict[str, Any]:
        """What a checkpoint taken inside an epoch keeps to finish its mean exactly: the closed
        windows (a checkpoint is only ever taken at a window's start)."""
        return {"loss_sum": self.loss_sum.item(), "loss_items": self.loss_items}


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
