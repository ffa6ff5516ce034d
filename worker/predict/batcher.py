"""Concurrent requests batched into one decode (docs/serving.md, "Batching").

One scheduler thread owns the use of the models. A request thread turns its request into rows
(one per choice of ``n``), submits them and reads their events (text pieces, then the
completion) from a queue. Rows of the same loaded model (and adapter) run as one batch
(``worker.predict.decode``); a row joins a running batch at the next step boundary (continuous
batching) and leaves it at its last token, when its deadline passes, or when its client has gone.
Rows of different models are different batches, stepped in turn. Work that must not run beside a
decode (a classifier's forward pass) is handed over as a call and runs between steps.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from worker.predict.decode import Decode
from worker.predict.generation import Completion, RowText, Sampling, TokenLogprob, choose

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ROWS = 32  # rows in one batch; more wait for a place
GRACE_S = 30.0  # how long past its deadline a request waits for the scheduler before giving up


@dataclass(frozen=True)
class Event:
    index: int  # the row's choice index
    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    done: Completion | None = None  # set on a row's last event


class GenerationFailed(Exception):
    """The batch a row ran in failed (its cause chained)."""


@dataclass(eq=False)
class Row:
    loaded: Any  # worker.predict.cache.Loaded
    prompt: list[int]
    sampling: Sampling
    deadline: float  # time.monotonic()
    events: queue.SimpleQueue[Event | BaseException]
    index: int = 0
    seed: int = 0
    cancelled: Callable[[], bool] = lambda: False  # asked after each token

    def __post_init__(self) -> None:
        self.text = RowText(self.loaded.tokenizer, self.sampling)
        self.generator: torch.Generator | None = None
        if not self.sampling.greedy:  # its own draws: the same whatever runs beside it
            self.generator = torch.Generator(device=self.loaded.device)
            self.generator.manual_seed((self.seed * 8 + self.index) % 2**63)


def choices(
    loaded: Any,
    prompt: list[int],
    sampling: Sampling,
    *,
    n: int = 1,
    seed: int | None = None,
    deadline: float,
    cancelled: Callable[[], bool] = lambda: False,
) -> list[Row]:
    """The ``n`` rows of one request, sharing one event queue. Choice ``i`` draws from
    ``seed`` and ``i`` (a random seed when none is given)."""
    events: queue.SimpleQueue[Event | BaseException] = queue.SimpleQueue()
    base = seed if seed is not None else random.getrandbits(63)
    return [Row(loaded, prompt, sampling, deadline, events, i, base, cancelled) for i in range(n)]


def events(rows: list[Row]) -> Iterator[Event]:
    """The events of submitted ``rows`` (sharing a queue) until each has its completion."""
    left = len(rows)
    while left:
        wait = max(0.0, max(r.deadline for r in rows) - time.monotonic()) + GRACE_S
        try:
            event = rows[0].events.get(timeout=wait)
        except queue.Empty:
            raise GenerationFailed("the scheduler did not answer in time") from None
        if isinstance(event, BaseException):
            raise GenerationFailed("the generation failed") from event
        left -= event.done is not None
        yield event


@dataclass(eq=False)
class _Call:
    fn: Callable[[], Any]
    result: Future[Any]


class _Group:
    """The running and waiting rows of one loaded model (and adapter). It pins its model for as
    long as it has rows (``worker.predict.cache``): another model's load evicts others first."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self.decode = Decode(loaded)
        self.rows: list[Row] = []
        self.waiting: list[Row] = []
        _pin(loaded, "pin")

    def close(self) -> None:
        """Its rows are all gone: the cache may evict its model again."""
        _pin(self.loaded, "unpin")


def _pin(loaded: Any, how: str) -> None:
    """``loaded.pin()`` or ``unpin()``, where it has them (a cached model; not a bare one)."""
    change = getattr(loaded, how, None)
    if callable(change):
        change()


def activate(loaded: Any) -> None:
    """Make ``loaded`` the model its modules compute: a LoRA adapter on a base it shares with
    others is put on (``worker.predict.cache``); a plain model needs nothing."""
    adapter, base = getattr(loaded, "adapter", None), getattr(loaded, "base", None)
    if adapter is not None and adapter not in getattr(base, "adapters", {adapter}):
        # Evicted from the cache while its rows ran: never answer them with the bare base.
        raise RuntimeError(f"the adapter {adapter} was unloaded while in use")
    put_on = getattr(loaded, "activate", None)
    if callable(put_on):
        put_on()


def _key(loaded: Any) -> tuple[int, str | None]:
    """One batch per model and adapter. Adapters share their base's modules: the base object
    names it (its ``model`` is wrapped when a first adapter is added)."""
    return id(getattr(loaded, "base", loaded.model)), getattr(loaded, "adapter", None)


class Batcher:
    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._inbox: queue.SimpleQueue[Row | _Call] = queue.SimpleQueue()
        self._groups: dict[tuple[int, str | None], _Group] = {}
        self._thread = threading.Thread(target=self._loop, name="predict-batcher", daemon=True)
        self._thread.start()
        self.steps = 0  # decode steps run (for tests and the bench)

    def submit(self, rows: list[Row]) -> None:
        """Hand ``rows`` over: they join a batch at its next step (read them with ``events``)."""
        for row in rows:
            self._inbox.put(row)

    def run(self, rows: list[Row]) -> Iterator[Event]:
        """Submit ``rows`` (one request's, sharing a queue) and yield their events until every
        row has its completion."""
        self.submit(rows)
        yield from events(rows)

    def complete(self, rows: list[Row]) -> list[Completion]:
        """Every row's completion, in row order."""
        done = {e.index: e.done for e in self.run(rows) if e.done is not None}
        return [done[row.index] for row in rows]

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` run by the scheduler between steps (nothing else uses the models then)."""
        result: Future[T] = Future()
        self._inbox.put(_Call(fn, result))
        return result.result()

    def _loop(self) -> None:
        while True:
            try:
                self._collect(block=not self._groups)
                for key, group in list(self._groups.items()):
                    self._step(group)
                    if not group.rows and not group.waiting:
                        del self._groups[key]
                        group.close()
            except Exception:  # never leave the thread: every request would wait forever
                log.exception("the batcher's loop failed")

    def _collect(self, *, block: bool) -> None:
        """Take what was submitted; wait for something when idle."""
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                return
            block = False
            if isinstance(item, _Call):
                _run_call(item)
            elif item.sampling.max_tokens < 1:
                _finish(item)
            else:
                key = _key(item.loaded)
                if key not in self._groups:
                    self._groups[key] = _Group(item.loaded)
                self._groups[key].waiting.append(item)

    def _step(self, group: _Group) -> None:
        """One token for every running row of ``group``, then newcomers join."""
        try:
            activate(group.loaded)
            with torch.inference_mode():
                if group.rows:
                    self._decode_step(group)
                self._admit(group)
        except Exception as exc:
            log.exception("a batch of %d rows failed", len(group.rows))
            for row in group.rows + group.waiting:
                row.events.put(exc)
            group.rows, group.waiting, group.decode = [], [], Decode(group.loaded)

    def _decode_step(self, group: _Group) -> None:
        logits = group.decode.logits
        going = [i for i, row in enumerate(group.rows) if _take(row, logits[i])]
        group.decode.keep(going)
        group.rows = [group.rows[i] for i in going]
        if group.rows:
            group.decode.advance([row.text.done.tokens[-1] for row in group.rows])
            self.steps += 1

    def _admit(self, group: _Group) -> None:
        now = time.monotonic()
        for row in [r for r in group.waiting if r.deadline <= now]:
            group.waiting.remove(row)
            _finish(row, timed_out=True)
        joining = group.waiting[: max(0, self.max_rows - len(group.rows))]
        if joining and group.decode.admit([r.prompt for r in joining], group.loaded.device):
            group.rows += joining
            del group.waiting[: len(joining)]


def _run_call(call: _Call) -> None:
    try:
        call.result.set_result(call.fn())
    except Exception as exc:
        call.result.set_exception(exc)


def _take(row: Row, logits: torch.Tensor) -> bool:
    """Choose ``row``'s next token and pass its text on; False when the row has ended."""
    token = choose(logits, row.sampling, row.generator)
    text, found = row.text.add(token, logits)
    if text or found:
        row.events.put(Event(row.index, text, found))
    eos = row.loaded.tokenizer.eos_token_id
    if (
        token == eos
        or row.text.deltas.stopped
        or len(row.text.done.tokens) >= row.sampling.max_tokens
    ):
        _finish(row)
    elif time.monotonic() >= row.deadline:
        _finish(row, timed_out=True)
    elif row.cancelled():
        _finish(row, cancelled=True)
    else:
        return True
    return False


def _finish(row: Row, *, timed_out: bool = False, cancelled: bool = False) -> None:
    text, found = row.text.finish(row.loaded.tokenizer.eos_token_id)
    done = row.text.done
    done.timed_out, done.cancelled = timed_out, cancelled
    row.events.put(Event(row.index, text, found, done))
