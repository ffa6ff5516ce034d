"""A receiver cannot hold the webhook sender: while tenant A's receiver drips its answer, tenant
B's webhook arrives; A's attempt ends at GRADACC_WEBHOOK_DEADLINE_S and is retried; a receiver
that answers with hundreds of MiB costs the sender no memory; NAT64 and 6to4 addresses (an IPv4
address behind an IPv6 one) are refused like the private addresses they may lead to."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.webhook_sender import Attempt, send
from tests.api.test_webhooks import fast, finish
from tests.conftest import TINY
from tests.support import wait_until
from tests.webhook_receiver import Receiver, receiver

__all__ = ["receiver"]  # the fixture, used by the tests below
BIG = 200 * 2**20


class Dripping(ThreadingHTTPServer):
    """/drip: a status line, then a header one byte at a time until ``release`` is set (or the
    sender hangs up). /big: 200 MiB of body."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), DripHandler)
        self.release = threading.Event()
        self.requests = 0
        self.dripping = 0  # answers still being dripped

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class DripHandler(BaseHTTPRequestHandler):
    server: Dripping

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.server.requests += 1
        with contextlib.suppress(OSError):  # the sender hung up: what it should do
            self._big() if self.path == "/big" else self._drip()

    def _drip(self) -> None:
        self.server.dripping += 1
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            while not self.server.release.wait(0.2):
                self.wfile.write(b"a")
            self.wfile.write(b"\r\nContent-Length: 0\r\n\r\n")
        finally:
            self.server.dripping -= 1

    def _big(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(BIG))
        self.end_headers()
        chunk = b"x" * 2**20
        for _ in range(BIG // len(chunk)):
            self.wfile.write(chunk)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def dripping() -> Iterator[Dripping]:
    server = Dripping()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.release.set()
    server.shutdown()


def _events(client: TestClient, job_id: str, headers: dict[str, str]) -> str:
    return client.get(f"/v1/jobs/{job_id}/events", headers=headers).text


def test_a_dripping_receiver_holds_only_its_own_delivery(
    db_settings: Settings, receiver: Receiver, dripping: Dripping
) -> None:
    settings = fast(db_settings, require_auth=True, webhook_deadline_s=120.0)
    receiver.fail_first = 0
    with session_scope(settings) as session:
        keys = {t: create_api_key(session, tenant=t) for t in ("alice", "bob")}
    alice, bob = ({"Authorization": f"Bearer {keys[t]}"} for t in ("alice", "bob"))
    with TestClient(create_app(settings)) as client:
        slow = client.post("/v1/jobs", headers=alice,
                           json={**TINY, "webhook_url": f"{dripping.url}/drip"}).json()  # fmt: skip
        finish(settings, slow["id"], epoch=False)
        wait_until(lambda: dripping.dripping, what="alice's attempt dripping", timeout=30)
        quick = client.post("/v1/jobs", headers=bob,
                            json={**TINY, "webhook_url": f"{receiver.url}/ok"}).json()  # fmt: skip
        finish(settings, quick["id"], epoch=False)
        wait_until(lambda: "delivered" in _events(client, quick["id"], bob),
                   what="bob's webhook delivered", timeout=30, every=0.05)  # fmt: skip
        assert dripping.dripping == 1  # alice's answer is still coming
        assert "attempt 1" not in _events(client, slow["id"], alice)
        dripping.release.set()
        wait_until(lambda: "delivered" in _events(client, slow["id"], alice),
                   what="alice's webhook delivered once released", timeout=30)  # fmt: skip
    assert [h["Gradacc-Event"] for _, h, _ in receiver.received] == ["job.succeeded"]


def test_an_attempt_ends_at_its_deadline_and_is_retried(
    db_settings: Settings, dripping: Dripping
) -> None:
    settings = fast(db_settings, webhook_deadline_s=1.0, webhook_max_attempts=2)
    with TestClient(create_app(settings)) as client:
        job = client.post("/v1/jobs", json={**TINY, "webhook_url": f"{dripping.url}/drip"}).json()
        finish(settings, job["id"], epoch=False)
        wait_until(lambda: "giving up" in _events(client, job["id"], {}),
                   what="two attempts cut off, then giving up", timeout=60)  # fmt: skip
        events = _events(client, job["id"], {})
    assert "attempt 1: no answer within 1 s (GRADACC_WEBHOOK_DEADLINE_S); retry in" in events
    assert "attempt 2: no answer within 1 s" in events and dripping.requests == 2


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_huge_answer_is_not_read(dripping: Dripping) -> None:
    settings = Settings(webhook_allow_private=True, webhook_deadline_s=120.0)
    attempt = Attempt(1, "job_x", "job.succeeded", 1, f"{dripping.url}/big", b"{}", "whsec_x")
    peak, done = [_rss()], threading.Event()
    before = peak[0]

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.005)

    async def deliver() -> str | None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            return await send(client, attempt, settings)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        error = asyncio.run(deliver())
    finally:
        done.set()
        sampler.join()
    assert error is None
    assert peak[0] - before < 64 * 2**20, f"the sender grew by {(peak[0] - before) >> 20} MiB"


@pytest.mark.parametrize("address", ["64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1"])
def test_translated_ipv6_addresses_are_refused(db_settings: Settings, address: str) -> None:
    with TestClient(create_app(db_settings)) as client:
        reply = client.post("/v1/jobs", json={**TINY, "webhook_url": f"http://[{address}]/hook"})
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["param"] == "webhook_url" and "private or loopback" in error["message"]
