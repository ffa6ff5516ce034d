"""``metrics.jsonl``: one JSON record per finished epoch, written by rank 0 alone, here alone.

A run starts the file over with the epochs its checkpoint has seen (a crash may have left more
lines than the checkpoint knows of), then appends each epoch as it ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MetricsFile:
    def __init__(self, path: Path, earlier: list[dict[str, Any]], *, enabled: bool) -> None:
        self.path, self.enabled = path, enabled
        if enabled:
            with path.open("w") as out:
                out.writelines(json.dumps(record) + "\n" for record in earlier)

    def append(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with self.path.open("a") as out:
                out.write(json.dumps(record) + "\n")
