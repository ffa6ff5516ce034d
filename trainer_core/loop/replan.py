"""Out of memory in a multi-process job: every rank starts again with the micro-batch halved.

One process retries in place (``trainer_core.train``): it drops the window and checkpoints its
start. A rank cannot: the others would wait for it in their next all-reduce, and a checkpoint is a
collective (rank 0 writes what every rank summed). So the rank that ran out writes
``REPLAN_FILE`` in the output folder (the smaller micro-batch b, K for it, every size tried so
far) and raises ``RanksReplan``; its launcher stops every rank and starts them all again. They
resume from the last checkpoint under the new b (``apply``): a window holds the same rows
whatever b is (b·K·W is fixed), so the run goes on exactly as the one-process path does, from
the last checkpoint instead of the window's start.

The file stays: a later resume takes its b only while it is smaller than the checkpoint's (a
checkpoint written after the re-plan records the new b itself). When no smaller b is left, the
file says so (``exhausted``) and the launcher fails the job with ``out_of_memory``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trainer_core.checkpoint.resume import RunState
from trainer_core.spec.replan import (
    MAX_HALVINGS,
    REPLAN_FILE,
    RanksReplan,
    Replan,
    halved,
    read,
    request,
)

__all__ = [
    "MAX_HALVINGS",
    "REPLAN_FILE",
    "RanksReplan",
    "Replan",
    "apply",
    "halved",
    "in_force",
    "read",
    "request",
]


def in_force(output_dir: Path, state: RunState | None) -> Replan | None:
    """The re-plan a (re)start must take: one smaller than the checkpoint's micro-batch."""
    plan = read(output_dir)
    if plan is None or plan.exhausted is not None:
        return None
    if state is not None and plan.micro_batch_size >= state.micro_batch_size:
        return None
    return plan


def apply(state: RunState, plan: Replan) -> RunState:
    """The checkpoint's position counted in micro-batches of the re-plan's b: the same windows
    done (a checkpoint is at a window's end), each now ``plan.accumulation`` micro-batches."""
    windows_done = state.micro_step // state.gradient_accumulation_steps
    return replace(
        state,
        micro_step=windows_done * plan.accumulation,
        micro_batch_size=plan.micro_batch_size,
        gradient_accumulation_steps=plan.accumulation,
    )
