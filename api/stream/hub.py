"""The job stream's fan-out: one reader per API process polls the database for every watched
job together and hands each new item to the subscribers' queues.

A subscriber reads its history at connect, a page at a time (``api.stream.reads.read_page``),
then registers with the cursor it reached; the hub re-reads from the lowest cursor of a job's
subscribers, and each subscriber drops what it already has (by row id), so nothing falls between
history and live. A tenant holds at most ``max_streams_per_tenant`` streams of a process at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from api.schemas.jobs import JobRead
from api.services.fine_tuning import to_openai
from api.stream.reads import HISTORY_PAGE, Cursor, Item, read_new, read_page, read_snapshots
from gradacc.errors import TooManyStreams
from gradacc.tables import TERMINAL_STATUSES

log = logging.getLogger(__name__)
QUEUE_SIZE = 10_000  # a subscriber this far behind is dropped; it resumes with Last-Event-ID
# A job snapshot's shape, by the API a stream belongs to: /v1/jobs shows its job object, the
# fine-tuning API the fine_tuning.job that its retrieve returns (the same function's output).
SHAPES: dict[str, Callable[[Any], str]] = {
    "job": lambda row: JobRead.of(row).model_dump_json(),
    "fine_tuning.job": lambda row: to_openai(row).model_dump_json(),
}


@dataclass(eq=False)
class Subscriber:
    job_id: str
    cursor: Cursor
    queue: asyncio.Queue[Item | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    shape: str = "job"  # a key of SHAPES

    def wants(self, item: Item) -> bool:
        """Not already sent (history and live may overlap); advances the cursor."""
        if item.kind == "job":
            return True
        moved = self.cursor.past(item.kind, item.row_id)
        if moved == self.cursor:
            return False
        self.cursor = moved
        return True


class StreamSlot:
    """One open stream of a tenant; given back once, when the stream ends or is dropped unsent
    (a generator never started holds it only until it is collected)."""

    def __init__(self, slots: Counter[str], tenant: str) -> None:
        self.slots, self.tenant, self.held = slots, tenant, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots[self.tenant] -= 1
            if self.slots[self.tenant] <= 0:
                del self.slots[self.tenant]

    def __del__(self) -> None:
        self.release()


class StreamHub:
    def __init__(self, engine: Engine, interval_s: float) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.page_size = HISTORY_PAGE  # rows of each table per history read
        self.open_streams: Counter[str] = Counter()  # per tenant, in this process
        self.subscribers: dict[str, set[Subscriber]] = {}
        self.cursors: dict[str, Cursor] = {}  # where the next poll reads from, per job
        # The last job row sent (status, progress, metrics): a new one is sent when it changes.
        self.snapshots: dict[str, tuple[Any, ...]] = {}
        self.task: asyncio.Task[None] | None = None
        self.polls = 0  # database round trips of the reader (the benchmark reads it)

    def take_slot(self, tenant: str, *, limit: int) -> StreamSlot:
        """A stream for ``tenant``, or ``TooManyStreams`` when it holds ``limit`` already."""
        if self.open_streams[tenant] >= limit:
            raise TooManyStreams(limit)
        self.open_streams[tenant] += 1
        return StreamSlot(self.open_streams, tenant)

    def subscribe(self, subscriber: Subscriber, row: Any) -> None:
        job_id, cursor = subscriber.job_id, subscriber.cursor
        self.subscribers.setdefault(job_id, set()).add(subscriber)
        known = self.cursors.get(job_id)
        self.cursors[job_id] = cursor if known is None else known.low(cursor)
        # The row this subscriber last saw: a newer one the hub sent while it read its history
        # differs from it, so the next poll sends it again.
        self.snapshots[job_id] = tuple(row)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name="gradacc-stream-hub")

    def unsubscribe(self, subscriber: Subscriber) -> None:
        watchers = self.subscribers.get(subscriber.job_id, set())
        watchers.discard(subscriber)
        if not watchers:
            self.subscribers.pop(subscriber.job_id, None)
            self.cursors.pop(subscriber.job_id, None)
            self.snapshots.pop(subscriber.job_id, None)

    async def _run(self) -> None:
        while self.subscribers:
            try:
                await self.poll_once()
            except Exception:  # a database blip: keep the streams open, try again next tick
                log.exception("stream poll failed")
            await asyncio.sleep(self.interval_s)

    async def poll_once(self) -> None:
        cursors = dict(self.cursors)
        # Rows first, then what they follow: a final status read here was committed after the
        # job's last metrics, so the reads below see those metrics.
        rows = await asyncio.to_thread(read_snapshots, self.engine, list(cursors))
        items = await asyncio.to_thread(read_new, self.engine, cursors)
        self.polls += 2
        for item in items:
            self._advance(item)
            self._publish(item)
        for job_id, row in rows.items():
            if self.snapshots.get(job_id) != tuple(row) and job_id in self.subscribers:
                self.snapshots[job_id] = tuple(row)
                # Each shape its subscribers want, rendered once for all of them.
                shapes = {subscriber.shape for subscriber in self.subscribers[job_id]}
                texts = {shape: SHAPES[shape](row) for shape in shapes}
                self._publish(
                    Item(job_id, "job", 0, {"json": texts, "status": row.status, "row": row})
                )

    def _advance(self, item: Item) -> None:
        c = self.cursors.get(item.job_id)
        if c is not None:
            self.cursors[item.job_id] = c.past(item.kind, item.row_id)

    def _publish(self, item: Item) -> None:
        for subscriber in list(self.subscribers.get(item.job_id, ())):
            try:
                subscriber.queue.put_nowait(item)
            except asyncio.QueueFull:
                self.unsubscribe(subscriber)
                with contextlib.suppress(asyncio.QueueFull):
                    subscriber.queue.put_nowait(None)  # ends that stream


async def messages(
    hub: StreamHub, *, job_id: str, row: Any, since: Cursor, slot: StreamSlot, shape: str = "job"
) -> AsyncIterator[dict[str, Any]]:
    """SSE messages for one subscriber: its history, the job's snapshot (in ``shape``), then
    live items, until the job's final status has been sent. ``row`` was read first: a final
    status in it was committed after the job's last rows, so the history read after it holds
    them all."""
    subscriber = Subscriber(job_id, since, shape=shape)
    try:
        more = True
        while more:
            page, more = await asyncio.to_thread(
                read_page, hub.engine, job_id=job_id, since=subscriber.cursor, limit=hub.page_size
            )
            for item in page:
                if subscriber.wants(item):
                    yield _message(item, subscriber)
        snapshot = SHAPES[shape](row)
        yield {"event": "job", "id": str(subscriber.cursor), "data": snapshot}
        if row.status in TERMINAL_STATUSES:
            return
        hub.subscribe(subscriber, row)  # from where its history ended
        while (live := await subscriber.queue.get()) is not None:
            item = live
            if not subscriber.wants(item):
                continue
            yield _message(item, subscriber)
            if item.kind == "job" and item.data["status"] in TERMINAL_STATUSES:
                return
    finally:
        hub.unsubscribe(subscriber)
        slot.release()


def _message(item: Item, subscriber: Subscriber) -> dict[str, Any]:
    if item.kind == "job":
        shape = subscriber.shape
        data = item.data["json"].get(shape) or SHAPES[shape](item.data["row"])
    else:
        data = json.dumps(item.data)
    return {"event": item.kind, "id": str(subscriber.cursor), "data": data}
