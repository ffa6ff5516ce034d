"""The re-plan file of a multi-process job that ran out of memory, and the exception that asks for
it: torch-free, so that the worker's launcher reads it without importing the training loop.
``trainer_core.loop.replan`` applies it to a checkpoint's position (the whole story is there)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

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
    output_dir: Path,
    *,
    micro_batch: int,
    effective: int,
    world: int,
    tried: list[int],
    exhausted: str,
) -> RanksReplan:
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
