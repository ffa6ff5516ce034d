"""Sends webhooks from the outbox (``webhook_deliveries``). Every API process and every worker runs
a sender, so webhooks go out while any of them runs (a job that finishes while no API is up
included): each polls for due rows, claims them (a conditional UPDATE: of several processes, one
sends a row, at least once), POSTs the job object (a fine-tuning job's: OpenAI's event object)
signed with its tenant's secret (``Gradacc-Signature`` and Standard Webhooks), and records
every attempt as a job event. A failure is retried with doubling delays up to
``webhook_max_attempts``; redirects are not followed, and the URL is checked again before each
attempt (an address may have changed since the job was accepted).

A receiver cannot hold the sender: each attempt is a task of its own with a total deadline
(``webhook_deadline_s``: connecting, sending and the answer's headers), and the answer's body is
never read, so a receiver that drips its answer, or sends gigabytes, costs one attempt its
deadline and nothing else; other rows go out meanwhile."""

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
from gradacc.jobs.standard_webhooks import message_id, standard_headers
from gradacc.jobs.webhook_outbox import SIGNATURE_HEADER, check_webhook_url, sign, tenant_secret
from gradacc.migrate import missing_schema
from gradacc.openai.events import fine_tuning_event
from gradacc.retry import Backoff
from gradacc.settings import Settings
from gradacc.tables import FINE_TUNING_API, Job, WebhookDelivery, utcnow

log = logging.getLogger(__name__)
LEASE_MARGIN_S = 30.0  # a claimed row is due again this long after its attempt's deadline
BATCH = 20  # attempts in flight per sender at most


@dataclass(frozen=True)
class Attempt:
    delivery_id: int
    job_id: str
    event: str
    attempt: int  # 1-based
    url: str
    body: bytes
    secret: str

    @property
    def message_id(self) -> str:
        """``webhook-id`` (and a fine-tuning event's id): the same on every attempt."""
        return message_id(self.job_id, self.delivery_id)


def claim_due(
    sessions: sessionmaker[Session], *, lease_s: float, limit: int = BATCH
) -> list[Attempt]:
    """Due rows, now this sender's for ``lease_s`` (if it dies mid-attempt, another takes them
    after that)."""
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
                .values(next_attempt_at=now + timedelta(seconds=lease_s))
            )
            if session.execute(claim).rowcount == 1:  # type: ignore[attr-defined]
                claimed.append(delivery_id)
        session.commit()
        return [_attempt(session, delivery_id) for delivery_id in claimed]


def _attempt(session: Session, delivery_id: int) -> Attempt:
    delivery = session.get_one(WebhookDelivery, delivery_id)
    job = session.get_one(Job, delivery.job_id)  # its deliveries go with it (ON DELETE CASCADE)
    secret = tenant_secret(session, tenant=job.tenant)
    assert job.webhook_url is not None  # rows are queued only for jobs with a webhook
    return Attempt(
        delivery_id,
        delivery.job_id,
        delivery.event,
        delivery.attempts + 1,
        job.webhook_url,
        _body(job, delivery),
        secret,
    )


def _body(job: Job, delivery: WebhookDelivery) -> bytes:
    """A fine-tuning job's: OpenAI's event object (the SDK's ``webhooks.unwrap`` parses it);
    any other job's: the job object."""
    if job.api != FINE_TUNING_API:
        return JobRead.of(job).model_dump_json().encode()
    return fine_tuning_event(
        event_id=message_id(job.id, delivery.id),
        event=delivery.event,
        created_at=int(delivery.created_at.timestamp()),
        job_id=job.id,
    )


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
    """POST one attempt; None when the receiver answered 2xx, else what went wrong. Over after
    ``webhook_deadline_s`` whatever the receiver does."""
    deadline = settings.webhook_deadline_s
    try:
        async with asyncio.timeout(deadline):
            return await _post(client, attempt, settings)
    except TimeoutError:
        return f"no answer within {deadline:g} s (GRADACC_WEBHOOK_DEADLINE_S)"


async def _post(client: httpx.AsyncClient, attempt: Attempt, settings: Settings) -> str | None:
    try:
        address = await asyncio.to_thread(check_webhook_url, attempt.url, settings)
    except InvalidRequest as exc:
        return exc.message
    url = httpx.URL(attempt.url)
    now = int(time.time())
    headers = {
        "content-type": "application/json",
        SIGNATURE_HEADER: sign(attempt.secret, attempt.body, now),
        **standard_headers(attempt.secret, attempt.message_id, now, attempt.body),
        "Gradacc-Event": attempt.event,
        "Gradacc-Delivery": str(attempt.delivery_id),
        "Host": url.netloc.decode("ascii"),
    }
    # Connect to the address just checked, never to a second resolution of the name; TLS still
    # names (SNI) and verifies the host.
    pinned = url.copy_with(host=address)
    request = client.build_request(
        "POST", pinned, content=attempt.body, headers=headers, extensions={"sni_hostname": url.host}
    )
    try:
        # Only the status counts: the body is never read (closing an unread answer drops the
        # connection instead of draining it).
        response = await client.send(request, stream=True)
        await response.aclose()
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}"
    return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"


class WebhookSender:
    """In an event loop (the API's: ``start``/``stop``), or in a thread of its own (a worker's:
    ``start_thread``)."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self.sessions, self.settings = sessions, settings
        self.task: asyncio.Task[None] | None = None
        self.in_flight: set[asyncio.Task[None]] = set()

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
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            try:
                await self._poll(client)
            finally:  # stopping: attempts in flight end with the client (leases run out)
                for task in list(self.in_flight):
                    task.cancel()
                await asyncio.gather(*self.in_flight, return_exceptions=True)

    async def _poll(self, client: httpx.AsyncClient) -> None:
        waiting_for_schema = False
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
        """Claim what is due (as many as there is room for) and start an attempt per row; the
        attempts run on their own, so a slow receiver holds its row only."""
        room = BATCH - len(self.in_flight)
        if room <= 0:
            return 0
        lease_s = self.settings.webhook_deadline_s + LEASE_MARGIN_S
        attempts = await asyncio.to_thread(claim_due, self.sessions, lease_s=lease_s, limit=room)
        for attempt in attempts:
            task = asyncio.create_task(self._deliver(client, attempt))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)
        return len(attempts)

    async def _deliver(self, client: httpx.AsyncClient, attempt: Attempt) -> None:
        error = await send(client, attempt, self.settings)
        try:
            await asyncio.to_thread(
                record_outcome, self.sessions, attempt, error=error, settings=self.settings
            )
        except Exception:  # the database is away: the lease runs out and the row goes again
            log.exception("could not record webhook attempt %d", attempt.delivery_id)
