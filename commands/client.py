"""A Python client for the gradacc API over httpx: what ``gradacc submit``, ``jobs``, ``status``,
``metrics``, ``cancel``, ``logs``, ``upload``, ``download`` and ``gradacc demo`` use.

Example::

    from commands.client import Client

    with Client("http://127.0.0.1:8000", api_key=None) as client:
        job = client.submit({"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"})
        for kind, data in client.stream(job["id"]):
            if kind == "step":
                print(data["step"], data["train_loss"])
        print(client.get(job["id"])["status"], client.metrics(job["id"]))
"""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

from gradacc.retry import Backoff

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


class ApiError(Exception):
    """A 4xx/5xx answer: its status and the API's ``{"error": {code, message, param}}``."""

    def __init__(self, status: int, code: str, message: str, param: str | None) -> None:
        where = f" ({param})" if param else ""
        super().__init__(f"{status} {code}{where}: {message}")
        self.status, self.code, self.message, self.param = status, code, message, param


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code < 400:
        return response
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        error = {"code": "http_error", "message": response.text[:500] or response.reason_phrase}
    raise ApiError(
        response.status_code,
        error.get("code", "error"),
        error.get("message", ""),
        error.get("param"),
    )


class Client:
    def __init__(self, server: str, *, api_key: str | None = None, timeout: float = 30) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _json(self, method: str, url: str, **kwargs: Any) -> Any:
        return _checked(self.http.request(method, url, **kwargs)).json()

    def submit(self, spec: dict[str, Any], *, idempotency_key: str | None = None) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._json("POST", "/v1/jobs", json=spec, headers=headers)

    def jobs(
        self,
        *,
        status: str | None = None,
        limit: int = 20,
        name: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> list[Any]:
        params: dict[str, Any] = {"limit": limit} | ({"status": status} if status else {})
        params |= ({"name": name} if name else {}) | {
            f"metadata[{k}]": v for k, v in (metadata or {}).items()
        }
        return list(self._json("GET", "/v1/jobs", params=params)["data"])

    def get(self, job_id: str) -> Any:
        return self._json("GET", f"/v1/jobs/{job_id}")

    def metrics(self, job_id: str, *, granularity: str = "epoch") -> list[Any]:
        """Every record (step records are read page by page)."""
        url, params = f"/v1/jobs/{job_id}/metrics", {"granularity": granularity}
        page = self._json("GET", url, params=params)
        records = list(page["data"])
        while page.get("has_more"):
            page = self._json("GET", url, params=params | {"after": page["last_step"]})
            records += page["data"]
        return records

    def events(self, job_id: str) -> list[Any]:
        return list(self._json("GET", f"/v1/jobs/{job_id}/events")["data"])

    def cancel(self, job_id: str) -> Any:
        return self._json("POST", f"/v1/jobs/{job_id}/cancel")

    def stream(self, job_id: str, *, retries: int = 5) -> Iterator[tuple[str, Any]]:
        """(kind, data) of the job's stream: "event", "step", "epoch", "job"; ends after the final
        status. A dropped connection is resumed where it stopped (Last-Event-ID)."""
        last_id: str | None = None
        backoff = Backoff(first=0.5, cap=5.0)
        for _ in range(retries + 1):
            headers = {"Last-Event-ID": last_id} if last_id else {}
            try:
                with connect_sse(
                    self.http, "GET", f"/v1/jobs/{job_id}/stream", headers=headers, timeout=None
                ) as source:
                    if source.response.status_code >= 400:
                        source.response.read()
                        _checked(source.response)
                    for message in source.iter_sse():
                        if not message.data:
                            continue  # a keep-alive comment
                        last_id, data = message.id or last_id, message.json()
                        backoff.reset()
                        yield message.event, data
                        if message.event == "job" and data["status"] in TERMINAL:
                            return
            except httpx.TransportError:
                pass
            time.sleep(backoff.next_delay())  # the server ended it early or went away: resume
        raise ApiError(
            503, "stream_lost", f"the stream of {job_id} broke {retries + 1} times", None
        )

    def upload(self, path: Path, *, purpose: str = "dataset") -> Any:
        """``POST /v1/files`` (the file routes of issue 10)."""
        with path.open("rb") as body:
            files = {"file": (path.name, body)}
            return self._json("POST", "/v1/files", files=files, data={"purpose": purpose})

    def download(self, job_id: str, directory: Path) -> Path:
        """The job's final model (``GET /v1/jobs/{id}/artifacts/model``, a tar.gz) extracted into
        ``directory``; refuses links, absolute paths and ``..`` (tarfile's "data" filter)."""
        directory.mkdir(parents=True, exist_ok=True)
        url = f"/v1/jobs/{job_id}/artifacts/model"
        with tempfile.TemporaryFile() as archive:
            with self.http.stream("GET", url, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    _checked(response)
                for chunk in response.iter_bytes():
                    archive.write(chunk)
            archive.seek(0)
            with tarfile.open(fileobj=archive, mode="r:gz") as tar:
                tar.extractall(directory, filter="data")
        return directory
