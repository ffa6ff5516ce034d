"""Hub ids a spec names: allowed by ``GRADACC_HUB_ALLOW``, and there to be had, checked at POST
(and again by the worker before a job starts) instead of failing a job after ~50 s of retries.

A hub id is had when its snapshot is in this server's Hugging Face cache (``HF_HOME``, shared by
the API and the workers: docs/models.md), or, with the hub enabled (``HF_HUB_OFFLINE`` unset),
when the hub knows it: one short ``model_info``/``dataset_info`` call, remembered for a minute.
A cached model that is an adapter has its base checked the same way (``trainer_core.spec.cards``).
``huggingface_hub`` only: no torch, no transformers.
"""

from __future__ import annotations

import fnmatch
import os
import threading
import time
from pathlib import Path
from typing import Literal

from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from trainer_core.spec.cards import ADAPTER_CONFIG, UnsafeSource, adapter_base

RepoType = Literal["model", "dataset"]
_REMEMBER_S = 60.0
_known: dict[tuple[str, RepoType], tuple[float, str | None]] = {}
_lock = threading.Lock()


def check_hub_source(
    value: str, settings: Settings, *, param: str, adapter_base_of: bool = False
) -> None:
    """422 naming ``param`` unless the hub id in ``value`` (``owner/name``; a dataset's may end
    in ``:config``) is allowed and to be had; for a cached adapter, its base too, which must be
    a whole model (``adapter_base_of``: ``value`` is one such base)."""
    repo_type: RepoType = "model" if param == "model" else "dataset"
    repo_id = value if repo_type == "model" else value.partition(":")[0]
    check_allowed(repo_id, settings, param=param)
    snapshot = cached_snapshot(repo_id, repo_type)
    if snapshot is None:
        problem = _hub_answer(repo_id, repo_type, settings)
        if problem is not None:
            raise InvalidRequest(
                f"{repo_type} {repo_id!r} is not in this server's Hugging Face cache and {problem}"
                "; upload it (POST /v1/files) and name its file-… id, or have the operator put "
                "it in the server's cache (docs/models.md)",
                param=param,
            )
    elif repo_type == "model" and (snapshot / ADAPTER_CONFIG).is_file():
        if adapter_base_of:
            raise InvalidRequest("an adapter's base model is an adapter itself", param=param)
        try:
            base = adapter_base(snapshot / ADAPTER_CONFIG, param=param)
        except UnsafeSource as exc:
            raise InvalidRequest(str(exc).removeprefix(f"{param}: "), param=param) from None
        check_hub_source(base, settings, param=param, adapter_base_of=True)


def check_allowed(repo_id: str, settings: Settings, *, param: str) -> None:
    patterns = settings.hub_allow_patterns()
    if patterns and not any(fnmatch.fnmatchcase(repo_id, pattern) for pattern in patterns):
        raise InvalidRequest(
            f"hub repository {repo_id!r} is not among those this server allows (GRADACC_HUB_ALLOW)",
            param=param,
        )


def cached_snapshot(repo_id: str, repo_type: RepoType) -> Path | None:
    """The snapshot of the repository's main revision in the Hugging Face cache, or None."""
    from huggingface_hub import constants, snapshot_download

    # Read now, not at import: a process forked from one that imported huggingface_hub earlier
    # (a fork server, a predict server) would otherwise look in its parent's cache.
    cache = os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
    try:
        return Path(
            snapshot_download(repo_id, repo_type=repo_type, local_files_only=True, cache_dir=cache)
        )
    except Exception:  # not cached (LocalEntryNotFoundError), or a name the hub would refuse
        return None


def _hub_answer(repo_id: str, repo_type: RepoType, settings: Settings) -> str | None:
    """None when the hub knows the repository; else why it cannot be had."""
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return "this server has no hub access (HF_HUB_OFFLINE)"
    key = (repo_id, repo_type)
    with _lock:
        remembered = _known.get(key)
    if remembered is not None and time.monotonic() - remembered[0] < _REMEMBER_S:
        return remembered[1]
    problem = _ask_hub(repo_id, repo_type, settings.hub_timeout_s)
    with _lock:
        _known[key] = (time.monotonic(), problem)
    return problem


def _ask_hub(repo_id: str, repo_type: RepoType, timeout: float) -> str | None:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    api = HfApi()
    try:
        if repo_type == "model":
            api.model_info(repo_id, timeout=timeout)
        else:
            api.dataset_info(repo_id, timeout=timeout)
    except GatedRepoError:
        return "the hub refuses this server access to it (gated)"
    except RepositoryNotFoundError:
        return "the hub has no such repository"
    except Exception as exc:  # no route, DNS, timeout, the hub's 5xx
        return f"the hub cannot be reached ({type(exc).__name__})"
    return None


def stated_hub_ids(repo_type: RepoType) -> list[str] | None:
    """What the OpenAPI document can state of the hub ids accepted now: None with the hub
    enabled (any id it knows), else the ids in the cache (each allowed by GRADACC_HUB_ALLOW)."""
    from huggingface_hub import constants, scan_cache_dir

    if not constants.is_offline_mode():
        return None
    try:
        repos = scan_cache_dir().repos
    except Exception:  # no cache folder yet
        return []
    return sorted(repo.repo_id for repo in repos if repo.repo_type == repo_type)
