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

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainer_core.checkpoint.resume import RunState
from trainer_core.spec.batching import accumulation_for, smaller_micro_batch

REPLAN_FILE = "replan.json"
MAX_HALVINGS = 5


class RanksReplan(Exception):  # not an error: the job goes on after the restart
    """Raised by the rank that ran out of memory; its launcher restarts every rank."""


@dataclass(frozen=True)
class Replan:
    micro_batch_size: int
    accumulation: int
    tried: list[int] = field(default_factory=list)
    exhausted: str | None = None  # why no smaller micro-batch is left (the job fails)


def halved(micro_batch: int, tried: list[int]) -> int | None:
    """The next micro-batch to try after ``tried`` (which ends with ``micro_batch``), or None."""
    smaller = smaller_micro_batch(micro_batch)
    return None if smaller is None or len(tried) > MAX_HALVINGS else smaller


def request(
    output_dir: Path, *, micro_batch: int, effective: int, world: int, tried: list[int],
    exhausted: str,
) -> RanksReplan:  # fmt: skip
    """Write the re-plan every rank starts again with; the exception to raise."""
    smaller = halved(micro_batch, tried)
    if smaller is None:
        plan = Replan(
            micro_batch, accumulation_for(effective, micro_batch, world), tried, exhausted
        )
    else:
        plan = Replan(smaller, accumulation_for(effective, smaller, world), [*tried, smaller])
    temporary = output_dir / f".{REPLAN_FILE}.{os.getpid()}"
    temporary.write_text(json.dumps(plan.__dict__))
    temporary.replace(output_dir / REPLAN_FILE)  # ranks that ran out together write the same
    return RanksReplan(f"out of memory at micro-batch {micro_batch}; every rank restarts")


def read(output_dir: Path) -> Replan | None:
    try:
        return Replan(**json.loads((output_dir / REPLAN_FILE).read_text()))
    except FileNotFoundError:
        return None


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
