"""The one place that reads the environment: every setting is ``GRADACC_<NAME>``."""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gradacc.alias_setting import Aliases, parse_aliases
from gradacc.upstreams import Upstreams, parse_upstreams
from trainer_core.spec.outputs import DATA_CACHE_DIR

# A job's priority lies in [-PRIORITY_BOUND, PRIORITY_BOUND] (the schema's bounds); what a
# tenant may ask above 0 is ``Settings.max_priority``.
PRIORITY_BOUND = 1000
# The names a browser uses for this machine's loopback: the Host headers answered without keys.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


class Settings(BaseSettings):
    """Embedded defaults (SQLite + a filesystem broker under ``home``) unless URLs are given."""

    model_config = SettingsConfigDict(env_prefix="GRADACC_", extra="ignore", populate_by_name=True)

    home: Path = Field(default=Path("var"), description="Database, broker folders and job outputs")
    database_url: str | None = Field(default=None, description="Default: SQLite under home")
    broker_url: str | None = Field(default=None, description="Default: filesystem:// under home")
    queue: str = "gradacc"
    # The embedded broker polls; 0.1 s keeps enqueue -> start near 60-90 ms (docs/service.md).
    broker_polling_interval: float = Field(default=0.1, gt=0)
    # Redis re-delivers an unacked message after this long; it must exceed any job's run time,
    # or a long job would be handed to a second worker while the first still trains it.
    visibility_timeout_s: int = Field(default=7 * 24 * 3600, ge=60)
    # The worker refreshes a running job's heartbeat this often; a job whose heartbeat is older
    # than ``stale_after_s`` lost its worker and is handed to another one.
    heartbeat_interval_s: float = Field(default=2.0, gt=0)
    stale_after_s: float = Field(default=60.0, gt=0)
    # A worker's registry row (gradacc.workers) is refreshed every heartbeat_interval_s; the API
    # counts it alive while it is younger than this (a few missed beats, a slow database).
    worker_alive_s: float = Field(default=15.0, gt=0)
    # A queued job not started this long after its last enqueue is enqueued again (duplicates
    # are harmless: only one task can claim a job).
    requeue_after_s: float = Field(default=300.0, gt=0)
    reconcile_interval_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    # torch threads per training process; 0 keeps torch's default (every core). Two processes
    # that both use every core of a small CPU box spin against each other: ~25x slower here.
    train_threads: int = Field(default=0, ge=0)
    # Fork each job's training process from a fork server that imported torch and transformers
    # once (worker/fork_server/), so a job's start does not wait ~4 s for them. Off: a cold
    # ``python -m worker.child.entry`` per job.
    fork_server: bool = True
    # Devices this worker trains a job on: GPUs, or gloo CPU processes where there is none. A job
    # with num_processes n goes to queue "<queue>.devices-n"; this worker takes n <= devices.
    devices: int = Field(default=1, ge=1, le=1024)
    # The memory of one training device of this server's workers (GiB): a job whose weights,
    # gradients and optimizer state cannot fit it is refused at POST (gradacc.sources.memory),
    # and the memory plan a preview shows is against it. Unset: no check (a CPU box).
    device_memory_gb: float | None = Field(default=None, gt=0, le=65536)
    # Gang scheduling (docs/distributed.md): the machine this worker is on (workers of one
    # machine share it; a job over M machines holds a slot on M distinct ones), the address other
    # machines reach it at (node 0's is the torchrun rendezvous endpoint), the rendezvous port
    # node 0 listens on (0: a free one per job), and how long a gang's slots are held while
    # it gathers before they are released and the job is queued again (so no two gang jobs
    # hold each other's devices for ever).
    machine: str = Field(default_factory=socket.gethostname, min_length=1, max_length=255)
    advertise_host: str | None = Field(default=None, description="Default: the machine name")
    rdzv_port: int = Field(default=0, ge=0, le=65535)
    gang_wait_s: float = Field(default=60.0, gt=0)
    # A gang released this many times while fewer live machines could hold it than it needs
    # fails (error gang_unsatisfiable); each such release backs its next try off (doubling).
    gang_max_releases: int = Field(default=5, ge=1)
    # What runs a claimed job (gradacc.executors, docs/distributed.md Executors): "local", this
    # worker's own processes, a gang gathering workers of several machines; "ray", a placement
    # group on the Ray cluster at ray_address (unset: Ray's own choice, RAY_ADDRESS or the
    # cluster started on this machine). Another name stops the process at start.
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    # ``gradacc serve`` and its workers: "info" prints one line per component ready and per job
    # event (libraries at WARNING); "debug" brings back every library's log and Celery's banner.
    log_level: Literal["info", "debug"] = "info"
    # Tokenized datasets are cached under ``home/cache/data`` (trainer_core/data/cache.py) up to this
    # size; the least recently used entries go first. ``gradacc cache`` shows and clears it.
    data_cache_max_bytes: int = Field(default=20 * 1024**3, ge=0)
    # DataLoader worker processes per training process that build batches off the training
    # thread. Unset: 0, on it, on a GPU too (a worker's process hop cost 4-7 % on an H200 and
    # 20 % on a 2-core CPU: docs/benchmarks.md); heavy custom collation may want 1.
    loader_workers: int | None = Field(default=None, ge=0, le=64)
    # After SIGTERM to a cancelled job's process group, SIGKILL follows this long after.
    kill_grace_s: float = Field(default=3.0, ge=0)

    # Limits on what a client may ask for (see docs/security.md). The body limit is enforced
    # before the body is parsed.
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    # POST /v1/files streams its body to disk, so its limit is on disk space, not memory.
    max_upload_bytes: int = Field(default=8 * 1024**3, ge=1024)
    # An uploaded model archive may unpack to at most this much, in at most this many files:
    # past either it is refused as an archive bomb.
    max_model_unpacked_bytes: int = Field(default=32 * 1024**3, ge=1024)
    max_model_files: int = Field(default=1000, ge=1)
    # What one tenant's stored files (uploads, unpacked models) and job outputs may take on
    # disk; an upload that would pass it is 413 storage_quota_exceeded. 0: no limit.
    max_storage_bytes_per_tenant: int = Field(default=100 * 1024**3, ge=0)
    max_epochs: int = Field(default=100, ge=1)
    # max_steps overrides the epochs, so it has its own cap (a 422 naming max_steps).
    max_steps: int = Field(default=1_000_000, ge=1)
    # A job that trains longer than this (from its claim, per run) is stopped, its checkpoint
    # kept, and fails with error time_limit. 0: no limit.
    max_job_seconds: float = Field(default=7 * 24 * 3600, ge=0)
    max_samples: int = Field(default=10_000_000, ge=1, description="max_train/eval_samples cap")
    # /v1/fine_tuning/jobs trains each row whole, up to the model's context capped by this (a
    # longer row fails the job naming it): the tokens one row may hold on this server's devices.
    max_seq_length: int = Field(default=32768, ge=2, le=32768)
    # Local model and dataset paths must lie under one of these directories (``os.pathsep``
    # separated). Default: ``home/data``. Builtins and hub ids are not paths.
    data_roots: str | None = None
    # Hub repositories a spec may name (model, dataset, an adapter's base), as comma-separated
    # patterns (``meta-llama/*,gpt2``); unset: any. The workers' HF_TOKEN and shared HF_HOME
    # act for every tenant: this is what limits them (docs/sources.md). A hub id neither in
    # the cache nor known to the hub is refused at POST; the hub is asked with this timeout.
    hub_allow: str | None = None
    hub_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # Bearer API keys, one tenant each. Off for the embedded local default; on in compose and
    # in the image.
    require_auth: bool = False
    # Without keys, ``gradacc serve`` refuses an address other than loopback unless this says
    # so: anyone who reaches the port would own every job, file and model.
    allow_insecure_bind: bool = False
    # Host headers the API answers (comma-separated; ``*.example.com`` matches subdomains).
    # Unset: loopback names only without keys (a page cannot rebind its DNS name to us), any
    # host with keys. ``*``: any.
    allowed_hosts: str | None = None
    # Tenants that see the workers' host names and pids in /v1/workers (comma-separated). With
    # keys off there is one tenant, and it is the operator.
    operator_tenants: str = ""
    # The API remembers a key's tenant this long (per process) instead of a lookup per request:
    # a revoked key keeps working for up to this many seconds. 0: look up every request.
    api_key_cache_s: float = Field(default=5.0, ge=0)
    # Jobs one tenant may have waiting, queued or paused (a POST or a resume past it: 429).
    max_queued_per_tenant: int = Field(default=1000, ge=1)
    max_running_per_tenant: int = Field(default=8, ge=1)
    # Open GET /v1/jobs/{id}/stream connections one tenant may hold, per API process (more: 429).
    max_streams_per_tenant: int = Field(default=16, ge=1)
    # A queued job's queue_position replays at most this many jobs of the queue per read (one
    # poll, one list page); a job further back reads as this plus one (docs/scheduling.md).
    queue_position_limit: int = Field(default=1000, ge=1)
    # The highest ``priority`` a job may ask for (above: 422). Lower than 0 is always allowed:
    # it only lets the tenant's own job wait behind others (docs/scheduling.md).
    max_priority: int = Field(default=10, ge=0, le=PRIORITY_BOUND)
    # A queued job that no free worker can take stops the lowest-priority running job of lower
    # priority (a checkpoint, then queued again); checked on each reconciler pass.
    preempt: bool = False
    # POST /v1/jobs/{id}/predict: a worker's predict server keeps this many loaded models (least
    # recently used out first); an answer that takes longer than GRADACC_SERVE_TIMEOUT_S is a
    # 504. Both sides poll the predictions table this often.
    predict_cache_models: int = Field(default=2, ge=1, le=64)
    # Of those models, LoRA adapters share their base (one copy of it): at most this many
    # adapters stay on the loaded bases, least recently used out first.
    predict_cache_adapters: int = Field(default=16, ge=1, le=1024)
    predict_poll_interval_s: float = Field(default=0.02, gt=0)
    # A chat template renders in a child of the predict server with this much more address space
    # and this long (wall clock); past either, that request fails and the next one is answered.
    predict_render_timeout_s: float = Field(default=10.0, gt=0)
    predict_render_memory_mb: int = Field(default=1024, ge=64)
    # Predict requests one tenant may have waiting at once (more: 429).
    max_predicts_per_tenant: int = Field(default=16, ge=1)
    # Dataset previews run at once in the API (POST /v1/files/{id}/preview: a child process each).
    max_previews: int = Field(default=2, ge=1)
    max_previews_per_tenant: int = Field(default=1, ge=1)
    # Each preview child's address space (RLIMIT_AS, imports included: a normal preview of the
    # built-in chat model peaked at ~2.2 GiB, most of it mapped, not resident) and wall clock;
    # past either, that preview is a 422 naming rows and the API carries on.
    preview_memory_mb: int = Field(default=8192, ge=64)
    preview_timeout_s: float = Field(default=120.0, gt=0)
    predict_server: bool = Field(default=True, description="Workers start a predict server")
    # OpenAI's /v1/chat/completions and /v1/completions (docs/serving.md): each predict server
    # also answers them over HTTP on serve_host (loopback unless the API runs elsewhere) and
    # serve_port (0: a free port), recorded in its worker's row for the API to forward to. A
    # request there needs serve_token (unset: each server makes one and records it beside its
    # address). max_completion_tokens above serve_max_completion_tokens is a 400; a request
    # still generating after serve_timeout_s stops (504, or an error event in a stream).
    serve_host: str = "127.0.0.1"
    serve_port: int = Field(default=0, ge=0, le=65535)
    serve_token: str | None = Field(default=None, min_length=16)
    serve_max_completion_tokens: int = Field(default=1024, ge=1)
    # One deadline for every generation a predict server runs: a chat or text completion, and a
    # /v1/jobs/{id}/predict (the API's wait for its answer too). GRADACC_PREDICT_TIMEOUT_S, its
    # name before the two ways in shared one, is still read.
    serve_timeout_s: float = Field(
        default=120.0,
        gt=0,
        validation_alias=AliasChoices(
            "serve_timeout_s", "gradacc_serve_timeout_s", "gradacc_predict_timeout_s"
        ),
    )
    # A tenant's share of chat and completion requests in flight through one API process, and of
    # the tokens they may generate (n x max tokens each, the default max when none is asked):
    # past either, a 429 naming it while other tenants are served.
    max_chats_per_tenant: int = Field(default=8, ge=1)
    max_chat_tokens_per_tenant: int = Field(default=16384, ge=1)
    # Models answered by external OpenAI-compatible servers (vLLM, SGLang): a JSON object from a
    # model pattern (a name, "prefix*", "*") to {base_url, api_key | api_key_env, model}
    # (gradacc.upstreams; docs/serving.md). Checked at start: a bad entry stops the process.
    serve_upstreams: Annotated[Upstreams, NoDecode] = Field(default_factory=Upstreams)
    # Old model names answered by this server's models: a JSON object from a tenant (or "*") to
    # {pattern: model} (gradacc.alias_setting; docs/serving.md, "Aliases"). A tenant's own
    # aliases (/v1/aliases) come first.
    serve_aliases: Annotated[Aliases, NoDecode] = Field(default_factory=Aliases)
    # How long a worker holds a batch without renewing it (before each line): past it, after a
    # worker died, another worker goes on with the batch (worker.consumer.batch_runner).
    batch_lease_s: float = Field(default=30.0, gt=0, le=3600)
    # The Tinker API (docs/tinker.md): a model no request reached for this long is closed (a
    # parked one's file deleted); a retrieve_future waits this long for its answer before "try
    # again".
    tinker_idle_s: float = Field(default=1800.0, gt=0)
    tinker_poll_wait_s: float = Field(default=25.0, gt=0, le=40)
    # A session's host job with no call for this long parks its models and ends, giving its
    # worker back (the session's next call queues another host job, which swaps them back in).
    tinker_host_linger_s: float = Field(default=30.0, gt=0)
    # The Tinker training models one worker's host keeps in memory; past it, the least recently
    # used is swapped to disk whole and back at its next request. (Samplers: 4, reloaded.)
    tinker_models_per_host: int = Field(default=4, ge=1)
    # The micro-batch a host cuts a forward_backward chunk into for memory (0: the chunk whole);
    # the window's update does not depend on it.
    tinker_micro_batch: int = Field(default=0, ge=0)
    # Each python grader call's sandbox (trainer_core.graders.sandbox, docs/reinforcement.md): CPU
    # seconds, wall-clock seconds and address space; OpenAI's limits by default. A training
    # run's graders and /v1/fine_tuning/alpha/graders/run both take them.
    grader_cpu_s: int = Field(default=120, ge=1, le=3600)
    grader_wall_s: float = Field(default=120.0, gt=0, le=3600)
    grader_memory_bytes: int = Field(default=2 << 30, ge=64 << 20)
    # One grading's budget over all its processes (trainer_core.graders.budget, docs/security.md):
    # processes and threads at once, CPUs' worth of time, the uid the grader runs as when the
    # server is root, and where its cgroup is made ("auto", "off", or a delegated v2 directory).
    grader_pids: int = Field(default=8, ge=1, le=4096)
    grader_cpus: float = Field(default=1.0, gt=0, le=1024)
    grader_uid: int = Field(default=65534, ge=1)
    grader_cgroup: str = "auto"
    # POST /v1/fine_tuning/alpha/graders/run, per API process: gradings at once (in threads of
    # their own, not the API's pool), per tenant, and the whole of one request's grading.
    max_grader_runs: int = Field(default=4, ge=1, le=256)
    max_grader_runs_per_tenant: int = Field(default=2, ge=1)
    grader_run_deadline_s: float = Field(default=300.0, gt=0, le=3600)
    # The job stream's one reader per API process polls the database this often: the delay of
    # a stream message is at most about this plus the training process's own write interval.
    stream_poll_interval_s: float = Field(default=0.25, gt=0)
    # Webhooks: hosts a job's webhook_url may name (comma-separated; unset: any public host);
    # private and loopback addresses only when allowed (a local receiver in tests).
    webhook_allowed_hosts: str | None = None
    webhook_allow_private: bool = False
    webhook_max_attempts: int = Field(default=6, ge=1)
    webhook_retry_first_s: float = Field(default=2.0, gt=0, description="doubles per attempt")
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    # The whole of one attempt (connect, send, the answer's headers): a receiver that drips its
    # answer is cut off here. A claimed row is leased for this plus 30 s.
    webhook_deadline_s: float = Field(default=30.0, gt=0, le=600)
    webhook_poll_interval_s: float = Field(default=1.0, gt=0)
    # /metrics shows aggregates only and answers anyone who can reach it; set this and a scrape
    # needs ``Authorization: Bearer <token>`` (Prometheus: ``authorization.credentials``).
    metrics_token: str | None = Field(default=None, min_length=16)
    # prometheus-client's own variable: set (an empty directory, shared by the API's uvicorn
    # workers) it switches /metrics to multi-process mode.
    prometheus_multiproc_dir: str | None = Field(
        default=None, validation_alias=AliasChoices("prometheus_multiproc_dir")
    )

    @field_validator("serve_aliases", mode="before")
    @classmethod
    def _parse_aliases(cls, raw: Any) -> Any:
        return parse_aliases(raw) if isinstance(raw, str) else raw

    @field_validator("serve_upstreams", mode="before")
    @classmethod
    def _parse_upstreams(cls, raw: Any) -> Any:
        return parse_upstreams(raw, environ=os.environ) if isinstance(raw, str) else raw

    @property
    def is_embedded(self) -> bool:
        return self.database_url is None

    @property
    def jobs_dir(self) -> Path:
        return self.home / "jobs"

    @property
    def files_dir(self) -> Path:
        """Uploaded files: ``files/<file id>/`` each (see ``gradacc.sources.files``)."""
        return self.home / "files"

    @property
    def data_cache_dir(self) -> Path:
        return self.home / DATA_CACHE_DIR  # the core's CLI uses the same one

    @property
    def tinker_dir(self) -> Path:
        """Tinker checkpoints: ``tinker/<tenant>/<run>/<kind>/<name>.pt``."""
        return self.home / "tinker"

    @property
    def broker_dir(self) -> Path:
        return self.home / "broker"

    def webhook_allowed_host_list(self) -> set[str] | None:
        if self.webhook_allowed_hosts is None:
            return None
        return {h.strip().lower() for h in self.webhook_allowed_hosts.split(",") if h.strip()}

    def is_operator(self, tenant: str) -> bool:
        if not self.require_auth:
            return True
        return tenant in {t.strip() for t in self.operator_tenants.split(",") if t.strip()}

    def host_patterns(self) -> list[str] | None:
        """The Host names the API answers (``None``: any)."""
        if self.allowed_hosts is None:
            open_door = self.require_auth or self.allow_insecure_bind
            return None if open_door else list(LOOPBACK_HOSTS)
        names = [h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()]
        return None if "*" in names else names

    def hub_allow_patterns(self) -> list[str]:
        return [part.strip() for part in (self.hub_allow or "").split(",") if part.strip()]

    def resolved_data_roots(self) -> list[Path]:
        if not self.data_roots:
            return [self.home / "data"]
        return [Path(part) for part in self.data_roots.split(os.pathsep) if part.strip()]

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'gradacc.db').resolve()}"

    def resolved_advertise_host(self) -> str:
        return self.advertise_host or self.machine

    def resolved_broker_url(self) -> str:
        return self.broker_url or "filesystem://"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
