"""File transfer: a large dataset upload and a large model download, with the API process's memory.

Starts the API alone (uvicorn, embedded SQLite, no workers) in a temporary home and measures:
- POST /v1/files of a generated CSV of ``--upload-mb`` MB (streamed from disk by the client, with
  its Content-Length), until the 201: wall time, MB/s (the server's CSV check included);
- GET /v1/jobs/{id}/artifacts/model (tar.gz built while sent) and GET .../model/model.safetensors
  (a plain file) of a finished job whose model folder holds ``--model-mb`` MB of incompressible
  weights (written straight to the job's folder; the job row is inserted directly);
and for each the API process's VmRSS (``/proc/<pid>/status``) before and its peak during the
transfer, sampled every 20 ms. Goals: growth <= 64 MB both ways, upload >= 200 MB/s on loopback.
Client and server share this machine's cores. Prints numbers; asserts nothing.

    .venv/bin/python bench/file_transfer.py [--upload-mb 1024] [--model-mb 1024]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from commands.demo import free_port, wait_ready  # noqa: E402
from gradacc.db import session_scope  # noqa: E402
from gradacc.jobs.states import new_job_id  # noqa: E402
from gradacc.settings import Settings  # noqa: E402
from gradacc.tables import Job, JobStatus  # noqa: E402

MB = 1024 * 1024
BOUNDARY = "gradacc-bench-boundary"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class PeakRss:
    """Samples a process's RSS in a thread while the ``with`` block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.before = pid, 0.0, rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self.pid))


def write_csv(path: Path, size_mb: int) -> None:
    row = b"a fairly ordinary sentence about a film that someone watched once,pos\n"
    block = b"text,label\n" + row * (MB // len(row))
    with path.open("wb") as out:
        for _ in range(size_mb):
            out.write(block if out.tell() == 0 else row * (MB // len(row)))


def multipart_body(path: Path, name: str) -> tuple[Iterator[bytes], int]:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    def chunks() -> Iterator[bytes]:
        yield head
        with path.open("rb") as source:
            while piece := source.read(MB):
                yield piece
        yield tail

    return chunks(), len(head) + path.stat().st_size + len(tail)


def fake_finished_job(settings: Settings, model_mb: int) -> str:
    job_id = new_job_id()
    model = settings.jobs_dir / job_id / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "bert"}')
    block = os.urandom(16 * MB)  # incompressible, like trained weights
    with (model / "model.safetensors").open("wb") as out:
        for _ in range(model_mb // 16):
            out.write(block)
    with session_scope(settings) as session:
        spec = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
        session.add(Job(id=job_id, status=JobStatus.SUCCEEDED, spec=spec, effective_batch_size=8))
        session.commit()
    return job_id


def report(what: str, size_mb: float, seconds: float, rss: PeakRss) -> None:
    growth = rss.peak - rss.before
    print(
        f"{what:<34} {size_mb:8.0f} MB {seconds:7.2f} s {size_mb / seconds:8.1f} MB/s   "
        f"API RSS {rss.before:6.1f} -> peak {rss.peak:6.1f} MB (growth {growth:+.1f} MB)"
    )


def upload(client: httpx.Client, csv: Path, name: str, pid: int, what: str) -> httpx.Response:
    body, length = multipart_body(csv, name)
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    headers["content-length"] = str(length)
    with PeakRss(pid) as rss:
        started = time.perf_counter()
        answer = client.post("/v1/files", content=body, headers=headers)
        seconds = time.perf_counter() - started
    report(what, length / MB, seconds, rss)
    return answer


def download(client: httpx.Client, url: str, pid: int, what: str) -> None:
    received = 0
    with PeakRss(pid) as rss:
        started = time.perf_counter()
        with client.stream("GET", url) as answer:
            answer.raise_for_status()
            for piece in answer.iter_raw(MB):
                received += len(piece)
        seconds = time.perf_counter() - started
    report(what, received / MB, seconds, rss)


def run(upload_mb: int, model_mb: int, tmp: Path) -> None:
    settings = Settings(home=tmp / "home")
    env = {
        **os.environ,
        "GRADACC_HOME": str(settings.home),
        "GRADACC_MAX_UPLOAD_BYTES": str(8 << 30),
    }
    subprocess.run([sys.executable, "-m", "commands.cli", "migrate"], cwd=ROOT, env=env, check=True)
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "api.main:app",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(argv, cwd=ROOT, env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            wait_ready(client, workers=False)  # the API alone: no worker to wait for
            client.get("/v1/files")  # first-request imports happen before the baseline
            csv = tmp / "upload.csv"
            write_csv(csv, upload_mb)
            # As .txt it is received whole, then refused (422) before any check reads it.
            upload(client, csv, "upload.txt", server.pid, "upload, receive only (422 after)")
            answer = upload(client, csv, "upload.csv", server.pid, "upload (CSV, checked)")
            print(f"  server counted {answer.json()['details']['rows']} rows")
            csv.unlink()
            job_id = fake_finished_job(settings, model_mb)
            download(
                client,
                f"/v1/jobs/{job_id}/artifacts/model",
                server.pid,
                "download model (tar.gz stream)",
            )
            path = f"/v1/jobs/{job_id}/artifacts/model/model.safetensors"
            download(client, path, server.pid, "download model.safetensors (file)")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upload-mb", type=int, default=1024)
    parser.add_argument("--model-mb", type=int, default=1024)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()} (client and server on the same machine)")
    with tempfile.TemporaryDirectory() as tmp:
        run(args.upload_mb, args.model_mb, Path(tmp))


if __name__ == "__main__":
    main()
