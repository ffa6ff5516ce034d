"""Exit statuses of a training process: the child returns them, the consumer reads them."""

from __future__ import annotations

OUTCOME_RECORDED = 0  # the job's outcome (succeeded, failed, cancelled) is in the database
CRASHED = 1  # an unexpected error; the child recorded it as failed when the database allowed
PREEMPTED = 75  # stopped early with a checkpoint kept; another worker resumes the job
REPLAN = 76  # a rank ran out of memory: every rank starts again at a smaller micro-batch
RESTART = 77  # a gang job's rank died: node 0's worker hands the job on, to gather again
