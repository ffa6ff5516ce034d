"""Best-model selection and early stopping, with the Trainer's names and rules.

At each evaluation the run hands its scores to ``Selection.observe``:
- the best: the metric (``metric_for_best_model``, default ``eval_loss``) strictly better than the
  best so far (``greater_is_better``: by default true unless the name ends in "loss", as the
  Trainer derives it); its step is the best checkpoint's when saving follows evaluation;
- early stopping (``EarlyStoppingCallback``): the evaluation is an improvement when it is better
  than the best so far by more than ``early_stopping_threshold``; otherwise a patience counter
  grows, and at ``early_stopping_patience`` the run stops. The comparison is with the best
  *before* this evaluation, as in the Trainer (the callback runs before the best is updated).

The state (best metric, its step, the counter) is part of each checkpoint's ``RunState``, so a
resumed run takes the same decisions as one that was never interrupted. One object decides for
every backend: the Trainer's own selection and callback are not used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from trainer_core.spec.job import JobSpec


@dataclass
class SelectionState:
    best_metric: float | None = None
    best_step: int | None = None
    patience_counter: int = 0
    evaluations: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SelectionState:
        if not data:
            return cls()
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


class Selection:
    def __init__(self, spec: JobSpec, saved: dict[str, Any] | None = None) -> None:
        self.metric = spec.selection_metric
        self.greater = spec.selection_greater_is_better
        self.patience = spec.early_stopping_patience
        self.threshold = spec.early_stopping_threshold
        self.load_best = spec.load_best_model_at_end
        self.state = SelectionState.from_json(saved)
        self.should_stop = False

    @property
    def active(self) -> bool:
        return self.load_best or self.patience is not None

    def _better(self, value: float, than: float, by: float = 0.0) -> bool:
        return value - than > by if self.greater else than - value > by

    def observe(self, step: int, scores: dict[str, Any]) -> bool:
        """Take one evaluation's scores at optimizer step ``step``; True when it is the best so
        far. Sets ``should_stop`` when patience has run out."""
        value = scores.get(self.metric)
        if value is None or not math.isfinite(float(value)):
            raise ValueError(
                f"metric_for_best_model: the evaluation gave no finite {self.metric!r} "
                f"(it gave {sorted(k for k in scores if k.startswith('eval_'))})"
            )
        value = float(value)
        state = self.state
        state.evaluations += 1
        if self.patience is not None:
            improved = state.best_metric is None or self._better(
                value, state.best_metric, self.threshold
            )
            state.patience_counter = 0 if improved else state.patience_counter + 1
            self.should_stop = state.patience_counter >= self.patience
        is_best = state.best_metric is None or self._better(value, state.best_metric)
        if is_best:
            state.best_metric, state.best_step = value, step
        return is_best

    def summary(self, stop_reason: str) -> dict[str, Any]:
        """What ``summary.json`` says about the selection and why training stopped."""
        out: dict[str, Any] = {"stop_reason": stop_reason}
        if self.active:
            out |= {
                "metric_for_best_model": self.metric,
                "greater_is_better": self.greater,
                "best_metric": self.state.best_metric,
                "best_step": self.state.best_step,
                "evaluations": self.state.evaluations,
            }
        if self.patience is not None:
            out["patience_counter"] = self.state.patience_counter
        return out
