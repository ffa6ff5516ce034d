"""``tinker://<run_id>/<kind>/<name>`` checkpoint paths (the SDK splits them into exactly three
parts, so no part may hold a ``/``), and the file a checkpoint lives in on this server."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PREFIX = "tinker://"
KINDS = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


@dataclass(frozen=True)
class TinkerPath:
    run_id: str
    kind: str
    name: str

    @property
    def checkpoint_id(self) -> str:
        return f"{self.kind}/{self.name}"

    def __str__(self) -> str:
        return f"{PREFIX}{self.run_id}/{self.kind}/{self.name}"


def parse(path: str, field: str = "path") -> TinkerPath:
    parts = path.removeprefix(PREFIX).split("/") if path.startswith(PREFIX) else []
    if len(parts) != 3 or parts[1] not in KINDS or not all(parts):
        raise ValueError(f"{field}: {path!r} is not a tinker://<run>/<kind>/<name> path")
    return TinkerPath(*parts)


def check_name(name: str, field: str = "path") -> str:
    if not NAME.fullmatch(name):
        raise ValueError(
            f"{field}: a checkpoint name is 1 to 100 of A-Z a-z 0-9 . _ - (got {name!r})"
        )
    return name


def file_of(root: Path, tenant: str, path: TinkerPath) -> Path:
    """The saved state (``torch.save``): weights, and optimizer state for ``weights/``."""
    safe_run = path.run_id.replace(":", "_")
    return root / tenant / safe_run / path.kind / f"{path.name}.pt"


def folder_of(root: Path, tenant: str, path: TinkerPath) -> Path:
    """The model folder of a named sampler or an export: what chat completions serve under the
    ``tinker://`` name and what an export's URLs download."""
    return file_of(root, tenant, path).with_suffix(".model")
