"""Test-only switches that make rare moments happen on demand, on any machine. Never set them in
production.

``GRADACC_FAILPOINT_OOM_ABOVE=N``: any micro-batch of more than N rows raises
``torch.OutOfMemoryError`` at its forward pass, as a GPU that cannot hold it would. It is read at
every forward, so a test can set it in the middle of a run; ``=@PATH`` reads N from the file PATH
at every forward (no file: no limit), for a process the test cannot set variables in. With
``GRADACC_FAILPOINT_OOM_RANK=R`` only rank R of a multi-process job runs out.

``GRADACC_FAILPOINT_HOLD_AT=STEP:PATH``: after optimizer step STEP the run parks while the file
PATH exists, and writes ``PATH.held`` once it is parked. A test that must act on a running job (a
signal, a kill, a cancel) holds it there instead of racing a tiny job's length, then removes PATH
to let it go. A stop request still ends the hold: a cancel at once, a preemption at this step.
The ranks of a multi-process job hold and leave together (the run agrees on both).

``GRADACC_FAILPOINT_TINKER_STAY=PATH``: while the file PATH exists and names a Tinker session, that
session's host job does not end by its linger (``worker.tinker.host``): a test that must act on a
running host job (preempt it) keeps it there instead of racing the linger, then removes PATH. A
preemption or the session's end still ends it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

OOM_ABOVE = "GRADACC_FAILPOINT_OOM_ABOVE"
OOM_RANK = "GRADACC_FAILPOINT_OOM_RANK"
HOLD_AT = "GRADACC_FAILPOINT_HOLD_AT"
HOLD_POLL_S = 0.05
TINKER_STAY = "GRADACC_FAILPOINT_TINKER_STAY"


def check_out_of_memory(rows: int) -> None:
    limit = os.environ.get(OOM_ABOVE)
    if limit and limit.startswith("@"):  # a file's content, read at every forward (absent: none)
        try:
            limit = Path(limit[1:]).read_text().strip()
        except FileNotFoundError:
            return
    if os.environ.get(OOM_RANK, os.environ.get("RANK", "0")) != os.environ.get("RANK", "0"):
        return
    if limit and rows > int(limit):
        raise torch.OutOfMemoryError(
            f"failpoint {OOM_ABOVE}={limit}: a micro-batch of {rows} rows does not fit"
        )


def tinker_host_stays(session_id: str) -> bool:
    path = os.environ.get(TINKER_STAY)
    try:
        return bool(path) and Path(str(path)).read_text().strip() == session_id
    except FileNotFoundError:
        return False


def held_marker(gate: Path) -> Path:
    """The file a held run writes (its pid inside) once it is parked at ``gate``."""
    return gate.with_name(gate.name + ".held")


def hold_at_step(step: int, *, keep_holding: Callable[[bool], bool]) -> None:
    """Park here, after optimizer step ``step``, while the hold's file exists (see the module).
    ``keep_holding(file_exists)`` decides each time: it checks stop requests (and may raise), and
    makes the ranks of a job agree."""
    value = os.environ.get(HOLD_AT)
    if not value:
        return
    at, _, path = value.partition(":")
    if int(at) != step:
        return
    gate, parked = Path(path), False
    while keep_holding(gate.exists()):
        if not parked:
            held_marker(gate).write_text(str(os.getpid()))
            parked = True
        time.sleep(HOLD_POLL_S)
