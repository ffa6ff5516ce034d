"""What a GRPO run's reward callable returns, torch-free: a plain float, or a ``Graded`` with the
sub-graders' scores and the grader errors counted by kind. The core knows no grader; the worker
builds the callable (``gradacc.graders.reward.grader_reward``) and the core aggregates what comes
back (``trainer_core.loop.grpo_metrics``).

Example:
    >>> as_graded(0.5)
    Graded(reward=0.5, sub_rewards={}, errors={})
    >>> as_graded(Graded(1.0, {"exact": 1.0}, {"python_grader_runtime_error": 0})).reward
    1.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Graded:
    """One completion's score: ``reward`` trains; ``sub_rewards`` (a multi grader's, by the names
    of its ``graders`` map) and ``errors`` (OpenAI's error kinds, 0 or 1 per completion) are
    reported."""

    reward: float
    sub_rewards: Mapping[str, float] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)


Reward = Callable[[Mapping[str, Any], str], "float | Graded"]


def as_graded(value: float | Graded) -> Graded:
    """A float reward as a ``Graded`` without sub-graders or errors."""
    return value if isinstance(value, Graded) else Graded(float(value))
