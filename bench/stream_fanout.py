"""Stream fan-out: N concurrent SSE subscribers to one job on one API process.

Starts one uvicorn process (the app on the embedded SQLite database, a query counter installed),
creates a running job, then a writer adds an event every ``--interval`` seconds (its message is
the time it was written) while N subscribers read ``/v1/jobs/{id}/stream``. Prints, per N: the
event delay (write -> received by a subscriber, p50/p99/max), the server's CPU share, and the
server's SQL statements per second (flat in N: one reader fans out). Asserts nothing.
Usage: .venv/bin/python bench/stream_fanout.py [--subscribers 1 50 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from httpx_sse import aconnect_sse
from sqlalchemy import update

from commands.demo import free_port, wait_ready
from gradacc.db import session_scope
from gradacc.jobs.records import add_event
from gradacc.migrate import alembic_config
from gradacc.settings import Settings
from gradacc.tables import Job

ROOT = Path(__file__).resolve().parent.parent
TINY = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment", "num_train_epochs": 1}
SERVER = """
import signal, sys, uvicorn
from sqlalchemy import Engine, event
count = [0]
event.listen(Engine, "before_cursor_execute", lambda *a: count.__setitem__(0, count[0] + 1))
signal.signal(signal.SIGUSR1, lambda *a: open(sys.argv[1], "w").write(str(count[0])))
uvicorn.run("api.main:app", host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def statements(pid: int, path: Path) -> int:
    """The server's SQL statements so far (it writes the count on SIGUSR1)."""
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    while not path.exists() or not path.read_text():
        time.sleep(0.01)
    return int(path.read_text())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def subscribe(
    client: httpx.AsyncClient, job_id: str, delays: list[float], ready: asyncio.Event
) -> None:
    async with aconnect_sse(client, "GET", f"/v1/jobs/{job_id}/stream") as source:
        ready.set()
        async for message in source.aiter_sse():
            if message.event == "event" and "bench:" in message.data:
                sent = float(message.data.split("bench:")[1].split('"')[0])
                delays.append(time.time() - sent)


def write_events(settings: Settings, job_id: str, seconds: float, interval: float) -> int:
    written, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        with session_scope(settings) as session:
            add_event(session, job_id=job_id, kind="log", message=f"bench:{time.time()}")
            session.commit()
        written += 1
        time.sleep(interval)
    with session_scope(settings) as session:  # the final status ends every stream
        session.execute(update(Job).where(Job.id == job_id).values(status="succeeded"))
        session.commit()
    return written


async def one_round(
    url: str, settings: Settings, pid: int, n: int, args: argparse.Namespace
) -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as client:
        job_id = (await client.post("/v1/jobs", json=TINY)).json()["id"]
        with session_scope(settings) as session:
            session.execute(update(Job).where(Job.id == job_id).values(status="running"))
            session.commit()
        delays: list[float] = []
        readies = [asyncio.Event() for _ in range(n)]
        tasks = [asyncio.create_task(subscribe(client, job_id, delays, r)) for r in readies]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        await asyncio.sleep(0.5)  # every subscriber's history read is done
        queries0, cpu0, wall0 = statements(pid, args.queries), cpu_seconds(pid), time.perf_counter()
        written = await asyncio.to_thread(
            write_events, settings, job_id, args.seconds, args.interval
        )
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        cpu, wall = cpu_seconds(pid) - cpu0, time.perf_counter() - wall0
        queries = statements(pid, args.queries) - queries0
    delays.sort()
    p99 = delays[min(len(delays) - 1, int(0.99 * len(delays)))]
    print(f"| {n} | {written} | {len(delays)} | {statistics.median(delays) * 1000:.0f} | "
          f"{p99 * 1000:.0f} | {delays[-1] * 1000:.0f} | {100 * cpu / wall:.0f}% | "
          f"{queries / wall:.1f} |", flush=True)  # fmt: skip


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp))
        from alembic import command

        command.upgrade(alembic_config(settings.resolved_database_url()), "head")
        port = free_port()
        args.queries = Path(tmp) / "queries"
        env = {**os.environ, "GRADACC_HOME": tmp, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(args.queries), str(port)], env=env
        )
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url) as client:
                wait_ready(client)
            print("| subscribers | events written | messages received | p50 delay ms | "
                  "p99 delay ms | max delay ms | server CPU | server SQL statements/s |")  # fmt: skip
            print("|---|---|---|---|---|---|---|---|")
            for n in args.subscribers:
                await one_round(url, settings, server.pid, n, args)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 50, 200])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=0.1, help="between two events")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
