"""A GRPO window's metrics from its completions and their grades, as flat keys (the step record
and the evaluation's both; the evaluation's carry the prefix ``eval_``):

- ``reward_mean``, ``reward_std``: the reward that trains, over the window's completions;
- ``rewards/<name>/mean``, ``rewards/<name>/std``: each sub-grader's score, ``<name>`` the key of
  a multi grader's ``graders`` map (OpenAI's ``sub_rewards``), over the completions that have it;
- ``grader_errors/<kind>``: how many completions the grader failed on, by OpenAI's error kind
  (each kind the reward reports, zeros included), and ``grader_errors``, their total;
- ``completion_length``: the mean sampled tokens, truncated ones included;
  ``truncated_fraction``: the share cut at ``max_completion_length``.

Stds are population stds (over the n completions, not n - 1), as TRL reports them. The values
are plain floats and ints, so a record goes to JSON and TensorBoard as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trainer_core.spec.grpo import Graded

EVAL_PREFIX = "eval_"


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std())


def reward_metrics(graded: Sequence[Graded]) -> dict[str, float | int]:
    """The rewards' mean and std, each sub-grader's, and the grader errors counted by kind."""
    record: dict[str, float | int] = {}
    record["reward_mean"], record["reward_std"] = _mean_std([g.reward for g in graded])
    names = dict.fromkeys(name for g in graded for name in g.sub_rewards)  # first-seen order
    for name in names:
        values = [g.sub_rewards[name] for g in graded if name in g.sub_rewards]
        record[f"rewards/{name}/mean"], record[f"rewards/{name}/std"] = _mean_std(values)
    kinds = dict.fromkeys(kind for g in graded for kind in g.errors)
    counts = {kind: sum(int(g.errors.get(kind, 0)) for g in graded) for kind in kinds}
    record |= {f"grader_errors/{kind}": count for kind, count in counts.items()}
    record["grader_errors"] = sum(counts.values())
    return record


def completion_metrics(
    completion_ids: Sequence[Sequence[int]], truncated: Sequence[bool]
) -> dict[str, float]:
    """The mean sampled length (truncated completions included) and the share truncated."""
    return {
        "completion_length": float(np.mean([len(c) for c in completion_ids])),
        "truncated_fraction": float(np.mean(truncated)),
    }


def window_metrics(
    completion_ids: Sequence[Sequence[int]], truncated: Sequence[bool], graded: Sequence[Graded]
) -> dict[str, float | int]:
    """Everything a window's completions and grades say; the loss's own keys come from the loss."""
    return reward_metrics(graded) | completion_metrics(completion_ids, truncated)


def prefixed(record: Mapping[str, Any], prefix: str = EVAL_PREFIX) -> dict[str, Any]:
    return {prefix + key: value for key, value in record.items()}
