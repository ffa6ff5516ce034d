"""Load generators for the service benchmarks: GETs on random paths against one server.

- ``closed_loop``: ``connections`` keep-alive clients, each sending its next request as soon as
  the last one is answered, for ``seconds``: the most requests/s the server gives. wrk when it
  is on PATH (C, a fraction of the CPU of a Python client on the same 2 cores), with
  ``poll.lua`` picking the paths; else the threaded ``http.client`` of service_latency.py.
- ``open_loop``: the same connections together *offer* a fixed ``rate``, as wrk2 does (wrk2 is
  not packaged here): connection n sends its k-th request at ``start + (k + n / connections) *
  connections / rate``, and a request's latency counts from that scheduled time, not from when
  it was sent. A server that stalls is then charged for the requests that queued up behind the
  stall, which a closed loop (or a client that times from the actual send) silently leaves out
  ("coordinated omission"). The client runs on uvloop; its timers wake within ~1 ms, which can
  add up to ~1 ms to a latency.

Each returns ``{"client", "requests", "rps", "p50_ms", "p99_ms"}``; nothing asserts.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import uvloop
from service_latency import poll_throughput

LUA = Path(__file__).resolve().parent / "poll.lua"


def closed_loop(
    port: int, paths: list[str], connections: int, seconds: float, headers: dict[str, str]
) -> dict[str, float | str]:
    if shutil.which("wrk") is None:
        result: dict[str, float | str] = {"client": "python http.client threads"}
        base_url = f"http://127.0.0.1:{port}"
        return result | poll_throughput(base_url, paths, connections, seconds, headers)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as listing:
        listing.write("\n".join(paths) + "\n")
        listing.flush()
        header_args = [arg for k, v in headers.items() for arg in ("-H", f"{k}: {v}")]
        command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:.0f}s", "--latency",
                   "-s", str(LUA), *header_args, f"http://127.0.0.1:{port}"]  # fmt: skip
        env = {**os.environ, "POLL_PATHS": listing.name}
        output = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    summary = json.loads(output.stdout.strip().splitlines()[-1])
    if summary["errors"] or summary["non_2xx"]:
        raise RuntimeError(f"wrk saw failures: {summary}")
    return {
        "client": "wrk",
        "requests": summary["requests"],
        "rps": summary["requests"] / (summary["duration_us"] / 1e6),
        "p50_ms": summary["p50_us"] / 1000,
        "p99_ms": summary["p99_us"] / 1000,
    }


def open_loop(
    port: int,
    paths: list[str],
    connections: int,
    rate: float,
    seconds: float,
    headers: dict[str, str],
) -> dict[str, float | str]:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        latencies, elapsed = runner.run(_offer(port, paths, connections, rate, seconds, headers))
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "client": "python asyncio (uvloop), fixed rate",
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": quantiles[49] * 1000,
        "p99_ms": quantiles[98] * 1000,
    }


async def _offer(
    port: int,
    paths: list[str],
    connections: int,
    rate: float,
    seconds: float,
    headers: dict[str, str],
) -> tuple[list[float], float]:
    """Latencies from the scheduled send times, and the seconds until the last answer. Times
    come from perf_counter: uvloop's own clock counts whole milliseconds."""
    interval = connections / rate  # between two requests of one connection
    start = time.perf_counter() + 0.5  # every connection is open by then
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    latencies: list[float] = []

    async def client(n: int) -> None:
        rng = random.Random(n)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        k = 0
        while (scheduled := start + (k + n / connections) * interval) < start + seconds:
            await asyncio.sleep(scheduled - time.perf_counter())  # at once when late
            path = rng.choice(paths)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{extra}\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"GET {path}: {head[:40]!r}")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - scheduled)
            k += 1
        writer.close()

    await asyncio.gather(*(client(n) for n in range(connections)))
    return latencies, time.perf_counter() - start
