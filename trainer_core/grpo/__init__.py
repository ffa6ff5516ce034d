"""GRPO (method ``grpo``): a driver above ``train``, as a torchtune recipe sits above its parts.
One training run whose window w samples the live policy, grades and trains.

- ``run``: ``train_grpo`` (the run, its records and checkpoints; the example is there).
- ``prompts``: a job's prompt rows from its sources.
- ``windows``: a window's rollouts: each rank samples its share of the window's groups, the
  reward grades them, the advantages are fixed (``data.grpo`` then plans them).
- ``sampling``: generation, seeded per group, and the log-probs it sampled with.
- ``evaluation``: the validation prompts sampled and graded every ``eval_interval`` windows.
- ``metrics``: a window's step record (rewards, lengths, grader errors).

The training objective itself (the clipped policy loss over a window's rollouts) is the loop's:
``loop.objectives.grpo``, with its math in ``accumulation`` ("Rollouts").
"""

from __future__ import annotations

from trainer_core.grpo.run import GrpoRun, train_grpo

__all__ = ["GrpoRun", "train_grpo"]
