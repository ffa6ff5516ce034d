"""Sends webhooks from the outbox (``webhook_deliveries``). Every API process and every worker runs
a sender, so webhooks go out while any of them runs (a job that finishes while no API is up
included): each polls for due rows, claims them (a conditional UPDATE: of several processes, one
sends a row, at least once), POSTs the job object signed with its tenant's secret, and records
every attempt as a job event. A failure is retried with doubling delays up to
``webhook_max_attempts``; redirects are not followed, and the URL is checked again before each
attempt (an address may have changed since the job was accepted)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from gradacc.errors import InvalidRequest
from gradacc.job_view import JobRead
from gradacc.jobs.records import add_event
from gradacc.jobs.webhook_outbox import SIGNATURE_HEADER, check_webhook_url, sign, tenant_secret
from gradacc.migrate import missing_schema
from gradacc.retry import Backoff
from gradacc.settings import Settings
from gradacc.tables import Job, WebhookDelivery, utcnow

log = logging.getLogger(__name__)
LEASE_S = 60.0  # a claimed row is due again after this if its sender died mid-attempt
BATCH = 20


@dataclass(frozen=True)
class Attempt:
    delivery_id: int
    job_id: str
    event: str
    attempt: int  # 1-based
    url: str
    body: bytes
    secret: str


def claim_due(sessions: sessionmaker[Session], *, limit: int = BATCH) -> list[Attempt]:
    now = utcnow()
    with sessions() as session:
        due = session.scalars(
            select(WebhookDelivery.id)
            .where(WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.id)
            .limit(limit)
        ).all()
        claimed = []
        for delivery_id in due:
            claim = (
                update(WebhookDelivery)
                .where(WebhookDelivery.id == delivery_id, WebhookDelivery.next_attempt_at <= now)
                .values(next_attempt_at=now + timedelta(seconds=LEASE_S))
            )
            if session.execute(claim).rowcount == 1:  # type: ignore[attr-defined]
                claimed.append(delivery_id)
        session.commit()
        return [_attempt(session, delivery_id) for delivery_id in claimed]


def _attempt(session: Session, delivery_id: int) -> Attempt:
    delivery = session.get_one(WebhookDelivery, delivery_id)
    job = session.get_one(Job, delivery.job_id)  # its deliveries go with it (ON DELETE CASCADE)
    body = JobRead.of(job).model_dump_json().encode()
    secret = tenant_secret(session, tenant=job.tenant)
    assert job.webhook_url is not None  # rows are queued only for jobs with a webhook
    return Attempt(delivery_id, delivery.job_id, delivery.event, delivery.attempts + 1,
                   job.webhook_url, body, secret)  # fmt: skip


def record_outcome(
    sessions: sessionmaker[Session], attempt: Attempt, *, error: str | None, settings: Settings
) -> None:
    """Delivered, retried later, or given up; an event on the job either way."""
    host = urlsplit(attempt.url).hostname
    what = f"{attempt.event} to {host}, attempt {attempt.attempt}"
    values: dict[str, object] = {"attempts": attempt.attempt}
    if error is None:
        values["status"], message = "delivered", f"{what}: delivered"
    elif attempt.attempt >= settings.webhook_max_attempts:
        values["status"], message = "failed", f"{what}: {error}; giving up"
    else:
        backoff = Backoff(first=settings.webhook_retry_first_s, cap=3600.0)
        backoff.failures = attempt.attempt - 1
        delay = backoff.next_delay()
        values["next_attempt_at"] = utcnow() + timedelta(seconds=delay)
        message = f"{what}: {error}; retry in {delay:.0f} s"
    with sessions() as session:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == attempt.delivery_id)
            .values(**values)
        )
        add_event(session, job_id=attempt.job_id, kind="webhook", message=message)
        session.commit()


async def send(client: httpx.AsyncClient, attempt: Attempt, settings: Settings) -> str | None:
    """POST one attempt; None when the receiver answered 2xx, else what went wrong."""
    try:
        address = await asyncio.to_thread(check_webhook_url, attempt.url, settings)
    except InvalidRequest as exc:
        return exc.message
    url = httpx.URL(attempt.url)
    headers = {
        "content-type": "application/json",
        SIGNATURE_HEADER: sign(attempt.secret, attempt.body, int(time.time())),
        "Gradacc-Event": attempt.event,
        "Gradacc-Delivery": str(attempt.delivery_id),
        "Host": url.netloc.decode("ascii"),
    }
    # Connect to the address just checked, never to a second resolution of the name; TLS still
    # names (SNI) and verifies the host.
    pinned = url.copy_with(host=address)
    try:
        response = await client.post(pinned, content=attempt.body, headers=headers,
                                     extensions={"sni_hostname": url.host})  # fmt: skip
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}"
    return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"


class WebhookSender:
    """In an event loop (the API's: ``start``/``stop``), or in a thread of its own (a worker's:
    ``start_thread``)."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self.sessions, self.settings = sessions, settings
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="gradacc-webhooks")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def start_thread(self, stop: threading.Event) -> threading.Thread:
        """Send from a daemon thread with its own event loop until ``stop`` is set."""

        async def until_stopped() -> None:
            self.start()
            while not stop.is_set():
                await asyncio.sleep(0.2)
            await self.stop()

        thread = threading.Thread(
            target=asyncio.run, args=(until_stopped(),), name="gradacc-webhooks", daemon=True
        )
        thread.start()
        return thread

    async def _run(self) -> None:
        timeout = httpx.Timeout(self.settings.webhook_timeout_s)
        waiting_for_schema = False
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            while True:
                try:
                    await self.run_once(client)
                    waiting_for_schema = False
                except Exception as exc:  # the database is away: try again next tick
                    if not missing_schema(exc):
                        log.exception("webhook pass failed")
                    elif not waiting_for_schema:  # said once: not a traceback per tick
                        log.warning("webhooks wait for the database schema (gradacc migrate)")
                        waiting_for_schema = True
                await asyncio.sleep(self.settings.webhook_poll_interval_s)

    async def run_once(self, client: httpx.AsyncClient) -> int:
        attempts = await asyncio.to_thread(claim_due, self.sessions)
        errors = await asyncio.gather(*(send(client, a, self.settings) for a in attempts))
        for attempt, error in zip(attempts, errors, strict=True):
            await asyncio.to_thread(
                record_outcome, self.sessions, attempt, error=error, settings=self.settings
            )
        return len(attempts)
