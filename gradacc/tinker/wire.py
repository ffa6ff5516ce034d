"""The Tinker SDK's protobuf messages (``tinker_public``), from the pinned SDK's own generated
module, loaded by its file: importing the ``tinker`` package would load torch into the API."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

NAME = "gradacc_tinker_public_pb2"


def _load() -> ModuleType:
    if NAME in sys.modules:
        return sys.modules[NAME]
    found = importlib.util.find_spec("tinker")  # finds the package without running it
    if found is None or found.origin is None:
        raise ImportError("the tinker SDK (tinker==0.38.0) is not installed")
    path = Path(found.origin).parent / "proto" / "tinker_public_pb2.py"
    spec = importlib.util.spec_from_file_location(NAME, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module


pb: Any = _load()
