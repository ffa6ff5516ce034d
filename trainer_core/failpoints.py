"""Test-only switches that make rare failures happen on demand, on any machine.

``GRADACC_FAILPOINT_OOM_ABOVE=N``: any micro-batch of more than N rows raises
``torch.OutOfMemoryError`` at its forward pass, as a GPU that cannot hold it would. It is read at
every forward, so a test can set it in the middle of a run. Never set it in production.
"""

from __future__ import annotations

import os

import torch

OOM_ABOVE = "GRADACC_FAILPOINT_OOM_ABOVE"


def check_out_of_memory(rows: int) -> None:
    limit = os.environ.get(OOM_ABOVE)
    if limit and rows > int(limit):
        raise torch.OutOfMemoryError(
            f"failpoint {OOM_ABOVE}={limit}: a micro-batch of {rows} rows does not fit"
        )
