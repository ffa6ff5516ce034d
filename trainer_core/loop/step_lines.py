"""A JSON-lines file of records keyed by optimizer step (``steps.jsonl``, ``evaluations.jsonl``).
A resumed run logs the steps after its checkpoint again: the lines from that step on are
replaced, never doubled. Cheap to import (the CLI uses it before torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class StepLines:
    def __init__(self, path: Path, *, enabled: bool = True) -> None:
        self.path, self.enabled = path, enabled
        self.last = max((json.loads(line)["step"] for line in self._lines()), default=0)

    def _lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def append(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if record["step"] <= self.last:
            kept = [line for line in self._lines() if json.loads(line)["step"] < record["step"]]
            self.path.write_text("".join(line + "\n" for line in kept))
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        self.last = record["step"]
