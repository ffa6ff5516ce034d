"""A grader as a GRPO run's reward: ``grader_reward(grader, grading)`` returns the
``reward(item, text) -> Graded`` that ``trainer_core.grpo.train_grpo`` calls on each completion.
The core imports no grader; the training child builds this callable and hands it over.

Each completion is graded by ``run_grader`` (a failing grader scores 0 and the run goes on), and
its ``Graded`` carries the reward, a multi grader's sub-rewards by name, and every one of OpenAI's
error kinds as 0 or 1, so each step record counts them all, zeros included.

Example:
    >>> grader = parse_grader({"type": "string_check", "name": "exact", "operation": "eq",
    ...                        "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"})
    >>> grader_reward(grader)({"answer": "4"}, "4").reward
    1.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainer_core.graders.run import Grading, run_grader
from trainer_core.spec.graders import Grader
from trainer_core.spec.grpo import Graded


def grader_reward(
    grader: Grader, grading: Grading | None = None
) -> Callable[[Mapping[str, Any], str], Graded]:
    """The reward callable of ``grader``: model graders call ``grading.chat``, python graders
    run under ``grading.limits``."""

    def reward(item: Mapping[str, Any], text: str) -> Graded:
        result = run_grader(grader, text, dict(item), grading)
        errors = {kind: int(hit) for kind, hit in result.errors.items()}
        return Graded(result.reward, dict(result.sub_rewards), errors)

    return reward
