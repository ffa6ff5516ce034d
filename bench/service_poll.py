"""Poll throughput with a realistic table: 10,000 jobs (3 epoch records each) in PostgreSQL.

One API process (uvicorn, no worker needed), ``--clients`` keep-alive connections on random
job ids, for each of GET /v1/jobs/{id} and GET /v1/jobs/{id}/metrics (and /healthz, the
ceiling of this server and client on these cores):
  - closed loop: every connection sends again as soon as it is answered: the most requests/s.
    With 50 connections always busy, Little's law ties latency to throughput (mean latency =
    50 / requests/s): p99 <= 20 ms needs >= 2,500 requests/s at the very least.
  - open loop: the connections together offer a fixed ``--rate`` (default 1,500/s); latency is
    counted from each request's scheduled send time (see bench/load.py): the latency a poller
    sees at that load.
The closed loop uses wrk when it is on PATH (``apt-get install wrk``), else Python threads,
which compete with the server for the same 2 cores; the table names the client. Then list
pagination deep into the table: the latency of one keyset page (limit 100) at increasing depths.
Prints tables; asserts nothing.

    .venv/bin/python bench/service_poll.py [--jobs 10000] [--clients 50] [--seconds 8]
        [--rate 1500] [--auth] [--uvicorn-args "--loop asyncio --http h11"] [--checkpoints 2]

``--checkpoints N`` gives every job the output folder a finished job has (``model/``, the latest
checkpoint and N-1 older kept ones, the logs and summary), and records its sizes on the row as
the worker does: what a poll costs when it reads the row, against walking the folder.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from load import closed_loop, open_loop
from service_latency import PG_ADMIN, ROOT, free_port, wait_ready

from gradacc.auth import create_api_key
from gradacc.jobs.states import new_job_id
from gradacc.tables import EpochMetric, Job, utcnow
from trainer_core.spec.job import JobSpec, example_spec

CHECKPOINT_FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                    "trainer_state.json", "gradacc_state.json")  # fmt: skip


def write_outputs(jobs_dir: Path, job_id: str, checkpoints: int) -> dict[str, int]:
    """A finished job's folder (tiny files: the walk, not the bytes, is what a poll paid for)."""
    folder = jobs_dir / job_id
    files = {f"model/{name}": 64 for name in ("config.json", "model.safetensors", "tokenizer.json")}
    for n in range(checkpoints):
        name = "checkpoint" if n == 0 else f"checkpoint-{n * 100}"
        files |= {f"{name}/{file}": 32 for file in CHECKPOINT_FILES}
    files |= {"metrics.jsonl": 300, "summary.json": 500, "train.log": 2000}
    totals: dict[str, int] = {}
    for relative, size in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        top = relative.split("/", 1)[0]
        totals[top] = totals.get(top, 0) + size
    return totals


def seed(url: str, jobs: int, jobs_dir: Path | None = None, checkpoints: int = 0) -> list[str]:
    spec = JobSpec.model_validate(example_spec())
    now = utcnow()
    ids = [new_job_id() for _ in range(jobs)]
    ids.sort()
    record = {"train_loss": 0.5, "eval_loss": 0.4, "eval_accuracy": 0.8, "eval_f1": 0.79, "learning_rate": 1e-4,
              "optimizer_steps": 63, "samples_per_second": 1500.0, "peak_memory_bytes": 5 * 10**8}  # fmt: skip
    job_rows = [{"id": i, "tenant": "default", "status": "succeeded", "spec": spec.model_dump(),
                 "effective_batch_size": spec.effective_batch_size, "created_at": now - timedelta(seconds=jobs - n),
                 "updated_at": now, "finished_at": now, "attempts": 1, "epoch": 3, "step": 189, "total_steps": 189,
                 "latest_metrics": {**record, "epoch": 3}} for n, i in enumerate(ids)]  # fmt: skip
    if jobs_dir is not None and checkpoints:
        for row in job_rows:
            sizes = write_outputs(jobs_dir, row["id"], checkpoints)
            if hasattr(Job, "outputs"):  # recorded on the row, as the worker does
                row["outputs"] = sizes
    metric_rows = [{"job_id": i, "epoch": e, "train_loss": 0.5, "eval_loss": 0.4, "record": {**record, "epoch": e},
                    "created_at": now} for i in ids for e in (1, 2, 3)]  # fmt: skip
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(Job), job_rows)
        conn.execute(insert(EpochMetric), metric_rows)
    engine.dispose()
    return ids


def page_latency(client: httpx.Client, ids: list[str], depth: int, repeats: int = 20) -> float:
    """Median ms for one page of 100 that starts ``depth`` jobs from the newest."""
    newest_first = ids[::-1]
    after = newest_first[depth - 1] if depth else None
    params = {"limit": 100, **({"after": after} if after else {})}
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        page = client.get("/v1/jobs", params=params).json()
        times.append(time.perf_counter() - t0)
        assert len(page["data"]) == min(100, len(ids) - depth)
    return statistics.median(times) * 1000


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux): the server's cost per request, which
    other load on the machine does not inflate the way it does wall-clock numbers."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(pid: int, measure: Callable[[], dict[str, float | str]]) -> dict[str, float | str]:
    before = cpu_seconds(pid)
    result = measure()
    return result | {"cpu_us": (cpu_seconds(pid) - before) / float(result["requests"]) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=float, default=1500.0, help="open loop: requests/s offered")
    parser.add_argument("--auth", action="store_true", help="GRADACC_REQUIRE_AUTH=true, a key")
    parser.add_argument("--uvicorn-args", default="", help='e.g. "--loop asyncio --http h11"')
    parser.add_argument("--checkpoints", type=int, default=0, help="kept checkpoints per job")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="gradacc-poll-"))
    load_before = os.getloadavg()[0]
    database = f"gradacc_bench_{secrets.token_hex(4)}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    env = {
        **os.environ,
        "GRADACC_DATABASE_URL": url,
        "GRADACC_BROKER_URL": "redis://127.0.0.1:6379/0",
        "GRADACC_REQUIRE_AUTH": str(args.auth).lower(),
        "GRADACC_HOME": str(home),
    }
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    server = None
    try:
        subprocess.run(
            [sys.executable, "-m", "commands.cli", "migrate"],
            env=env,
            check=True,
            capture_output=True,
        )
        ids = seed(url, args.jobs, home / "jobs", args.checkpoints)
        headers = {}
        if args.auth:
            with Session(create_engine(url)) as session:
                headers["Authorization"] = f"Bearer {create_api_key(session, tenant='default')}"
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "api.main:app", "--port", str(port), "--log-level", "warning",
                                   *shlex.split(args.uvicorn_args)], cwd=ROOT, env=env)  # fmt: skip
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30
        ) as client:
            wait_ready(client, workers=False)  # the API alone, no worker
            depths = sorted({d for d in (0, 1_000, 5_000, args.jobs - 100) if 0 <= d < args.jobs})
            pages = {d: page_latency(client, ids, d) for d in depths}
        routes = {"GET /v1/jobs/{id}": [f"/v1/jobs/{i}" for i in ids],
                  "GET /v1/jobs/{id}/metrics": [f"/v1/jobs/{i}/metrics" for i in ids]}  # fmt: skip
        rows = []
        for name, paths in [*routes.items(), ("GET /healthz (ceiling)", ["/healthz"])]:
            closed = with_cpu(server.pid, lambda p=paths: closed_loop(port, p, args.clients, args.seconds, headers))  # fmt: skip
            rows.append((name, "closed loop", closed))
        for name, paths in routes.items():
            offered = with_cpu(server.pid, lambda p=paths: open_loop(port, p, args.clients, args.rate, args.seconds, headers))  # fmt: skip
            rows.append((name, f"open loop, {args.rate:,.0f}/s offered", offered))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(home, ignore_errors=True)
    print(
        f"# poll throughput: {args.jobs:,} jobs in PostgreSQL, one uvicorn process "
        f"({args.uvicorn_args or 'auto: uvloop + httptools'}), auth {'on' if args.auth else 'off'}, "
        f"{args.checkpoints} kept checkpoints per job, "
        f"{args.clients} connections, {args.seconds:.0f} s per row; "
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print("| route | load | client | requests/s | p50 ms | p99 ms | server CPU µs/request |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, load, r in rows:
        print(f"| {name} | {load} | {r['client']} | {r['rps']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_us']:.0f} |")  # fmt: skip
    print("\n| list page (limit 100) starting at job # | median ms |\n|---:|---:|")
    for depth, ms in pages.items():
        print(f"| {depth:,} | {ms:.1f} |")
    print(json.dumps({"pages_ms": pages}), file=sys.stderr)


if __name__ == "__main__":
    main()
