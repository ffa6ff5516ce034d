"""Read a dataset source (built-in, local file or folder, hub id) into splits, reading nothing
outside it.

A folder, or a hub dataset, is read by ``datasets`` as its card says, and a card may name any
path on this machine (``trainer_core.spec.cards``). So a source is resolved first to what will
be read, and checked there: a local folder and its card; a hub dataset offline, its snapshot in
the Hugging Face cache, read as that folder; a hub dataset online, its card at a pinned commit,
which is then the commit loaded. A hub id that is also a path here is refused: the library would
read the path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.builtin.corpus import BUILDERS
from trainer_core.spec.cards import CARD_FILES, UnsafeSource, check_card, check_dataset_folder
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.sources import classify_source, local_path, shadowed

if TYPE_CHECKING:  # datasets costs ~0.4 s to import; a cached job never needs it
    import datasets

_FILE_FORMATS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def load_source(source: str, param: str) -> datasets.DatasetDict:
    import datasets

    kind = classify_source(source)
    if kind == "builtin":
        build = BUILDERS[source]  # the spec admits only known builtins
        return datasets.DatasetDict(
            {split: datasets.Dataset.from_dict(build(split)) for split in ("train", "validation")}
        )
    if kind == "file":  # the service resolves upload ids to paths; reaching here is a bug there
        raise DatasetError(f"{param}: uploaded file {source!r} was not resolved", param=param)
    if kind == "local":
        return _local(source, param)
    name, _, config = source.partition(":")
    return _hub(name, config, source, param)


def _local(source: str, param: str) -> datasets.DatasetDict:
    import datasets

    path = local_path(source)
    if path.is_dir():
        _checked(check_dataset_folder, path, param=param)
        return _folder_or_hub(str(path), config="", revision=None, source=source, param=param)
    if not path.is_file():
        raise DatasetError(f"{param}: file {source!r} does not exist", param=param)
    fmt = _FILE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DatasetError(f"{param}: unsupported file type {path.suffix!r}", param=param)
    try:
        return datasets.DatasetDict(
            {"train": datasets.load_dataset(fmt, data_files=str(path), split="train")}
        )
    except Exception as exc:  # a malformed file: report it, don't crash with a traceback
        raise DatasetError(f"{param}: cannot read {source!r}: {exc}", param=param) from exc


def _hub(name: str, config: str, source: str, param: str) -> datasets.DatasetDict:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if shadowed(name):
        raise DatasetError(
            f"{param}: {name!r} is a hub id that also names a path on this machine; write "
            f"./{name} for a local folder",
            param=param,
        )
    if not constants.is_offline_mode():
        revision = _checked_card_online(name, param)
        return _folder_or_hub(name, config, revision=revision, source=source, param=param)
    try:
        snapshot = Path(snapshot_download(name, repo_type="dataset", local_files_only=True))
    except LocalEntryNotFoundError:  # not in the hub cache: datasets' own Arrow cache, or fails
        return _folder_or_hub(name, config, revision=None, source=source, param=param)
    # A snapshot's files link into its repository folder's blobs/: inside, and nowhere else.
    _checked(check_dataset_folder, snapshot, param=param, within=snapshot.parent.parent)
    return _folder_or_hub(str(snapshot), config, revision=None, source=source, param=param)


def _checked_card_online(name: str, param: str) -> str | None:
    """The commit to load, its card checked (then loaded at that commit, not a newer one)."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        revision = HfApi().dataset_info(name, timeout=30).sha
    except Exception as exc:  # unknown, gated, or the hub unreachable: nothing checked, no load
        raise DatasetError(
            f"{param}: cannot load hub dataset {name!r}: {type(exc).__name__}: {exc}", param=param
        ) from exc
    cards = []
    for filename in CARD_FILES:
        try:
            cards.append(
                Path(hf_hub_download(name, filename, repo_type="dataset", revision=revision))
            )
        except EntryNotFoundError:
            continue
        except Exception as exc:
            raise DatasetError(
                f"{param}: cannot read the card of {name!r}: {exc}", param=param
            ) from exc
    _checked(check_card, cards, param=param)
    return revision


def _checked(check: Callable[..., None], *args: Any, param: str, **kwargs: Any) -> None:
    try:
        check(*args, param=param, **kwargs)
    except UnsafeSource as exc:
        raise DatasetError(str(exc), param=param) from None


def _folder_or_hub(
    name: str, config: str, *, revision: str | None, source: str, param: str
) -> datasets.DatasetDict:
    import datasets

    try:
        loaded = datasets.load_dataset(name, config or None, revision=revision)
    except Exception as exc:
        raise DatasetError(
            f"{param}: cannot load dataset {source!r} (offline or unknown?): {exc}", param=param
        ) from exc
    if not isinstance(loaded, datasets.DatasetDict) or "train" not in loaded:
        raise DatasetError(f"{param}: dataset {source!r} has no 'train' split", param=param)
    return loaded
