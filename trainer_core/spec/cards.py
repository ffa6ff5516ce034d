"""What a source's own files may make the libraries read: a dataset card's data files and an
adapter's base model.

A dataset folder (or a hub dataset repository) carries a card, ``README.md`` with a YAML block
(and ``.huggingface.yaml``), whose ``configs: [{data_files, data_dir}]`` tell ``datasets`` which
files to read. ``datasets`` reads an absolute path or a glob there on this machine's filesystem,
whatever folder or repository the card came from. A model folder or repository holding
``adapter_config.json`` makes ``transformers`` load its ``base_model_name_or_path`` first, a
local directory included. Both are checked here, by the API at POST and by the core as it loads,
so that what a source reads stays inside the source whatever it names. Errors never echo the
offending path: it may be another tenant's.

Torch-free and cheap: ``huggingface_hub`` (the card's YAML) and ``yaml`` are imported on use.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from trainer_core.spec.fields import HUB_ID_PATTERN
from trainer_core.spec.sources import classify_source

CARD_FILES = ("README.md", ".huggingface.yaml")
ADAPTER_CONFIG = "adapter_config.json"
_HUB_ID = re.compile(HUB_ID_PATTERN)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # hf:, http:, s3:, file:, C: ...


class UnsafeSource(ValueError):
    """A source whose own files would make a library read outside it; the message names the
    field and what is wrong, never a path."""


def _card_data(path: Path) -> dict[str, Any]:
    """The card's YAML as ``datasets`` reads it (the README's front matter, or the whole of
    ``.huggingface.yaml``); {} when there is none."""
    import yaml
    from huggingface_hub.repocard import metadata_load

    if path.name == "README.md":
        data = metadata_load(path)
    else:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("not a mapping")
    return data


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _unsafe(pattern: str) -> str | None:
    """What is wrong with one data_files/data_dir entry, or None: it must be a relative path
    inside the dataset (globs allowed), as ``datasets`` joins only those to the dataset's base."""
    text = pattern.strip().replace("\\", "/")
    if _SCHEME.match(text) or "://" in text:
        return "a URL or another filesystem"
    if text.startswith(("/", "~")) or PureWindowsPath(pattern.strip()).is_absolute():
        return "an absolute path"
    if ".." in PurePosixPath(text).parts:
        return "'..'"
    return None


def check_card(paths: list[Path], *, param: str) -> None:
    """Refuse a card whose configs name data files outside the dataset: absolute paths, URLs
    (``hf://`` another repository, ``http…``, ``s3://``), ``~`` or ``..``."""
    for path in paths:
        if not path.is_file():
            continue
        try:
            data = _card_data(path)
        except Exception as exc:  # unreadable, not UTF-8, bad YAML: datasets could not read it
            raise UnsafeSource(f"{param}: its {path.name} cannot be read as a card") from exc
        configs = data.get("configs") or []
        for index, config in enumerate(configs if isinstance(configs, list) else [configs]):
            if not isinstance(config, dict):
                continue
            for key in ("data_files", "data_dir"):
                for entry in _strings(config.get(key)):
                    if (wrong := _unsafe(entry)) is not None:
                        raise UnsafeSource(
                            f"{param}: its dataset card ({path.name}) lists {wrong} in "
                            f"configs[{index}].{key}; data files must be relative paths inside "
                            "the dataset"
                        )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_dataset_folder(folder: Path, *, param: str, within: Path | None = None) -> None:
    """A local dataset folder (or a hub snapshot of one): its card (``check_card``), and every
    file and folder in it resolving (symlinks followed) inside ``within`` (default: the folder;
    for a hub snapshot, its repository's cache folder, where the snapshot's links point)."""
    check_card([folder / name for name in CARD_FILES], param=param)
    root = os.path.realpath(within if within is not None else folder)
    for current, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            if not _inside(os.path.realpath(os.path.join(current, name)), root):
                raise UnsafeSource(
                    f"{param}: the dataset folder holds a link that leads outside it; copy the "
                    "files in instead"
                )


def adapter_base(config_file: Path, *, param: str) -> str:
    """The base model an adapter's ``adapter_config.json`` makes ``transformers`` load first,
    refused unless it is a hub id: never a local path (another tenant's job folder is one), so
    that a name cannot lead the loader to a directory the data roots do not allow. A local
    adapter is merged into its base (``merge_and_unload``) and uploaded as a whole model."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsafeSource(f"{param}: its {ADAPTER_CONFIG} cannot be read") from exc
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or classify_source(base) != "hub" or not _HUB_ID.match(base):
        raise UnsafeSource(
            f"{param}: it is an adapter ({ADAPTER_CONFIG}) whose base_model_name_or_path is not "
            "a hub id; merge the adapter into its base model and upload the merged model "
            "(POST /v1/files, purpose model)"
        )
    return base
