"""``GET /metrics`` in Prometheus's text format (prometheus-client).

Job figures are read from the database at scrape time, so every API process answers alike and
nothing is lost when a worker restarts: jobs by status, queue depth, running jobs, the job
duration and time-to-start histograms (over every job the database holds, so they only grow),
and the training samples/s of running jobs. HTTP latency by route is measured in this process;
under several uvicorn workers, ``PROMETHEUS_MULTIPROC_DIR`` switches prometheus-client to its
multi-process mode and a scrape sums every worker's figures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, case, func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradacc.tables import Job, JobStatus

REQUEST_SECONDS = Histogram(
    "gradacc_http_request_duration_seconds",
    "Time to the response's first byte, by route template, method and status",
    ["route", "method", "status"],
)
JOB_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)
START_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class TimingMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware): times each request to its response start, so a long
    stream counts its wait for the first byte, not its whole life."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                route = route_template(scope)
                REQUEST_SECONDS.labels(route, scope["method"], str(message["status"])).observe(
                    time.perf_counter() - started
                )
            await send(message)

        await self.app(scope, receive, timed_send)


def route_template(scope: Scope) -> str:
    """The matched route's path with its router's prefix: FastAPI keeps an included router's
    routes relative to it, so the prefix is what the request path has before the route's part
    (``/v1`` + ``/jobs/{job_id}``). Unmatched requests share one label (no unbounded paths)."""
    template = getattr(scope.get("route"), "path", None)
    if not isinstance(template, str):
        return "unmatched"
    path: str = scope["path"]
    try:
        concrete = template.format(**scope.get("path_params", {}))
    except (KeyError, IndexError, ValueError):
        return template
    return path.removesuffix(concrete) + template if path.endswith(concrete) else template


def _seconds(dialect: str, later: Any, earlier: Any) -> Any:
    if dialect == "postgresql":
        return func.extract("epoch", later - earlier)
    return (func.julianday(later) - func.julianday(earlier)) * 86400.0  # SQLite


class JobCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(Job.status, func.count()).group_by(Job.status))
            counts: dict[str, int] = {status: n for status, n in rows}
            dialect = self.engine.dialect.name
            durations = self._histogram(
                connection, dialect, Job.finished_at, Job.started_at, JOB_BUCKETS
            )
            waits = self._histogram(
                connection, dialect, Job.started_at, Job.created_at, START_BUCKETS
            )
            live = connection.scalars(
                select(Job.live_progress).where(Job.status == JobStatus.RUNNING)
            )
            rate = sum(float((p or {}).get("samples_per_second") or 0) for p in live)
        jobs = GaugeMetricFamily("gradacc_jobs", "Jobs by status", labels=["status"])
        for status in JobStatus:
            jobs.add_metric([str(status)], counts.get(status, 0))
        yield jobs
        yield GaugeMetricFamily("gradacc_queue_depth", "Jobs queued", counts.get("queued", 0))
        yield GaugeMetricFamily("gradacc_running_jobs", "Jobs running", counts.get("running", 0))
        yield GaugeMetricFamily(
            "gradacc_training_samples_per_second",
            "Training samples/s of all running jobs (their latest step records)",
            rate,
        )
        yield self._family("gradacc_job_duration_seconds", "Started to finished", durations)
        yield self._family("gradacc_job_time_to_start_seconds", "Created to started", waits)

    @staticmethod
    def _histogram(
        connection: Any, dialect: str, later: Any, earlier: Any, buckets: tuple[float, ...]
    ) -> tuple[list[tuple[str, int]], float]:
        """Cumulative bucket counts and the sum, in one query."""
        seconds = _seconds(dialect, later, earlier)
        done = later.is_not(None) & earlier.is_not(None)
        columns: list[Any] = [func.count(case((done & (seconds <= b), 1))) for b in buckets]
        columns += [func.count(case((done, 1))), func.coalesce(func.sum(case((done, seconds))), 0)]
        row = connection.execute(select(*columns).select_from(Job)).one()
        counts = [(str(float(b)), int(n)) for b, n in zip(buckets, row, strict=False)]
        return [*counts, ("+Inf", int(row[len(buckets)]))], float(row[-1])

    @staticmethod
    def _family(name: str, doc: str, data: tuple[list[tuple[str, int]], float]) -> Metric:
        buckets, total = data
        return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


def build_registry(engine: Engine, multiproc_dir: str | None) -> CollectorRegistry:
    """One registry per scrape: the database's job figures plus this process's (or, in
    multi-process mode, every process's) HTTP latencies."""
    registry = CollectorRegistry()
    if multiproc_dir:
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)  # type: ignore[no-untyped-call]
    else:
        registry.register(REQUEST_SECONDS)
    registry.register(JobCollector(engine))
    return registry
