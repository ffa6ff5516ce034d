"""What a Ray job's node processes get of their driver's settings, and how (docs/distributed.md).

Whatever is a task argument sits in Ray's GCS, readable by anyone with access to the cluster. So
a node gets, as arguments, only the settings its training processes read (``NODE_SETTINGS``,
an allowlist: not the API's keys, the serving token or the metrics token), the hub's non-secret
variables, and the home as an absolute path (the shared jobs directory, the same path on every
node). The secrets it needs (the database URL, the upstream servers with their keys, the hub
token) go into a file readable by the worker's user only (0600) in the job's folder on that
shared directory; the task gets its path, its launcher reads it, and the driver deletes it when
the job's group goes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from gradacc.settings import Settings
from worker.consumer.executors.ray_node import SECRETS_FILE

# The settings the training processes read (worker.child and what it imports; a test keeps this
# list whole), by their field names. Not LOCAL_ONLY's: a node has its own machine.
# (A table: left to the formatter, thirty names one a line would double the file.)
NODE_SETTINGS = frozenset({
    "data_cache_max_bytes", "data_roots", "executor", "gang_max_releases", "gang_wait_s",
    "grader_cgroup", "grader_cpu_s", "grader_cpus", "grader_memory_bytes", "grader_pids",
    "grader_uid", "grader_wall_s", "heartbeat_interval_s", "hub_allow", "hub_timeout_s",
    "kill_grace_s", "loader_workers", "log_level", "max_epochs", "max_job_seconds",
    "max_running_per_tenant", "max_samples", "max_seq_length", "max_steps", "queue",
    "serve_aliases", "serve_timeout_s", "stale_after_s", "train_threads",
    "webhook_allow_private", "webhook_allowed_hosts", "worker_alive_s",
    # A Tinker session's host job (worker.tinker.host)
    "batch_lease_s", "tinker_host_linger_s", "tinker_idle_s", "tinker_micro_batch",
    "tinker_models_per_host",
})  # fmt: skip
# Test-only switches (trainer_core.testing.failpoints): a test holds a node's run as any other.
FAILPOINTS = "GRADACC_FAILPOINT_"
# The hub's variables that say where its cache is and whether to go online: no secret in them.
HUB_VARIABLES = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_CACHE",
    "HF_DATASETS_OFFLINE",
    "HF_ENDPOINT",
    "TRANSFORMERS_OFFLINE",
)


@dataclass(frozen=True)
class NodeEnvironment:
    plain: dict[str, str]  # task arguments
    secrets: dict[str, str]  # the 0600 file's


def node_environment(settings: Settings, environ: dict[str, str]) -> NodeEnvironment:
    """From the driver's settings and environment (``os.environ``)."""
    names = {f"GRADACC_{field.upper()}" for field in NODE_SETTINGS}
    plain = {
        name: value
        for name, value in environ.items()
        if name in names or name.startswith(FAILPOINTS)
    }
    plain |= {name: environ[name] for name in HUB_VARIABLES if name in environ}
    plain["GRADACC_HOME"] = str(settings.home.resolve())
    secrets = {"GRADACC_DATABASE_URL": settings.resolved_database_url()}
    if settings.serve_upstreams.routes:  # their keys resolved: the names in api_key_env are ours
        secrets["GRADACC_SERVE_UPSTREAMS"] = json.dumps(
            {
                route.pattern: route.server.model_dump(mode="json", exclude_none=True)
                | (
                    {"api_key": route.server.api_key.get_secret_value()}
                    if route.server.api_key
                    else {}
                )
                for route in settings.serve_upstreams.routes
            }
        )
    if environ.get("HF_TOKEN"):
        secrets["HF_TOKEN"] = environ["HF_TOKEN"]
    return NodeEnvironment(plain, secrets)


def write_secrets(job_dir: Path, secrets: dict[str, str]) -> Path:
    """The secrets file of a job's nodes, readable by this user only, replaced whole."""
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / SECRETS_FILE
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(secrets, out)
    partial.replace(path)
    return path


def remove_secrets(job_dir: Path) -> None:
    (job_dir / SECRETS_FILE).unlink(missing_ok=True)
