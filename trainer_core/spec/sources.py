"""What a model or dataset source names: a built-in, a file uploaded to the service, a local file
or directory, or a hub id.

One function decides it, for the spec's validation, the service's data-roots check and the loading
of data and models, so that what is checked is what is loaded. Cheap to import (no torch).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

SourceKind = Literal["builtin", "file", "fine_tuned", "local", "hub"]
BUILTIN_PREFIX = "builtin:"
# A model fine-tuned by the service ("ft:<base>:<tenant>:<suffix>:<job id>[:ckpt-step-N]"): like
# an uploaded file, the service turns it into a local folder before the core sees the spec.
FINE_TUNED_PREFIX = "ft:"
# An uploaded file's id ("file-" + 12 hex digits of milliseconds + 8 random). The service turns
# it into a local path before the core sees the spec; the core itself never loads one.
FILE_ID_PREFIX = "file-"
FILE_ID_PATTERN = r"^file-[0-9a-f]{20}$"
LOCAL_DATA_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")


def classify_source(value: str) -> SourceKind:
    """``builtin:…`` is built-in; ``file-…`` an uploaded file and ``ft:…`` a fine-tuned model
    (service only); a value that looks like a path (``/``, ``.``, ``~``, a data file suffix) is
    local; everything else is a hub id (its shape checked by the spec). Decided by the text
    alone: asking the disk would make the answer depend on the working directory of whoever
    asks, and tell a client what exists there. A local folder is written ``./name``."""
    if value.startswith(BUILTIN_PREFIX):
        return "builtin"
    if re.fullmatch(FILE_ID_PATTERN, value):
        return "file"
    if value.startswith(FINE_TUNED_PREFIX):
        return "fine_tuned"
    if value.startswith(("/", ".", "~")) or value.endswith(LOCAL_DATA_SUFFIXES):
        return "local"
    return "hub"


def shadowed(hub_id: str) -> bool:
    """Whether a hub id also names something relative to this process's working directory:
    ``transformers`` and ``datasets`` would then read that instead of the hub repository, so
    the loaders refuse such an id rather than let a name reach the disk."""
    try:
        return os.path.lexists(hub_id)
    except (OSError, ValueError):
        return True


def local_path(value: str) -> Path:
    """The file or directory a local source names (``~`` expanded)."""
    return Path(value).expanduser()
