"""One row of a generation (one choice of one request), apart from the batch it runs in
(``worker.predict.batcher``): how it chooses each token from its logits, and what text a client
may be shown as its tokens arrive.

- Greedy is ``generate``'s argmax over the float32 logits; sampling is ``generate``'s too
  (temperature, then top-p, then a draw from the softmax), drawn from the row's own
  ``torch.Generator`` so that a seeded choice does not depend on the rows beside it.
- The log-probabilities kept for OpenAI's ``logprobs`` are the model's own (a log-softmax of the
  logits before temperature or top-p reshape them).
- The text is the tokens so far, decoded, with stop strings cut and their possible beginnings
  held back (``worker.predict.deltas``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

from worker.predict.deltas import TextDeltas


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    top_logprobs: int | None = None  # None: no logprobs; 0..20: that many alternatives

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_p == 0


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: list[tuple[str, float]]


@dataclass
class Completion:
    text: str = ""
    tokens: list[int] = field(default_factory=list)  # generated, the end-of-text token included
    finish_reason: str = "length"
    logprobs: list[TokenLogprob] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False  # its client went away before the end


OnDelta = Callable[[str, list[TokenLogprob]], None]
_NO_IDS = torch.empty((1, 0), dtype=torch.long)  # the warpers take input ids and ignore them


def choose(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """The next token from one row's float32 logits, as ``generate`` would choose it."""
    if sampling.greedy:
        return int(logits.argmax())
    scores = logits.unsqueeze(0)
    if sampling.temperature != 1.0:
        scores = TemperatureLogitsWarper(sampling.temperature)(_NO_IDS, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(sampling.top_p)(_NO_IDS, scores)
    probs = scores.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


class RowText:
    """A row's tokens as they arrive, and what of them a client may be shown."""

    def __init__(self, tokenizer: Any, sampling: Sampling) -> None:
        self.tokenizer, self.sampling = tokenizer, sampling
        self.deltas = TextDeltas(sampling.stop)
        self.done = Completion()
        self._steps: list[torch.Tensor] = []  # each token's log-softmax, when logprobs are wanted
        self._sent_logprobs = 0

    @property
    def wants_logprobs(self) -> bool:
        return self.sampling.top_logprobs is not None

    def add(self, token: int, logits: torch.Tensor) -> tuple[str, list[TokenLogprob]]:
        """Take one token: the newly safe text and log-probabilities."""
        if self.wants_logprobs:
            self._steps.append(logits.log_softmax(-1).cpu())
        self.done.tokens.append(token)
        return self._emit(final=False)

    def finish(self, eos: int | None) -> tuple[str, list[TokenLogprob]]:
        """The end: what was held back, and the completion filled in."""
        last = self._emit(final=True)
        self.done.text = self.deltas.shown
        ended = bool(self.done.tokens) and self.done.tokens[-1] == eos
        self.done.finish_reason = "stop" if self.deltas.stopped or ended else "length"
        return last

    def _emit(self, *, final: bool) -> tuple[str, list[TokenLogprob]]:
        text = self.tokenizer.decode(self.done.tokens, skip_special_tokens=True)
        return self.deltas.update(text, final=final), self._new_logprobs(final)

    def _new_logprobs(self, final: bool) -> list[TokenLogprob]:
        if not self.wants_logprobs:
            return []
        # Each token's log-probabilities go out with the text that holds it: none while it is
        # held back (it may be the start of a stop string), all at the end.
        ready = len(self.done.tokens) if final or not self.deltas.holding else self._sent_logprobs
        if self.deltas.stopped:
            ready = len(self.done.tokens)
        found = [self._logprob(i) for i in range(self._sent_logprobs, ready)]
        self._sent_logprobs = ready
        self.done.logprobs.extend(found)
        return found

    def _logprob(self, i: int) -> TokenLogprob:
        row, token = self._steps[i], self.done.tokens[i]
        k = self.sampling.top_logprobs or 0
        values, ids = row.topk(k) if k else (torch.empty(0), torch.empty(0, dtype=torch.long))
        top = [
            (self.tokenizer.decode([int(t)]), float(v)) for v, t in zip(values, ids, strict=True)
        ]
        return TokenLogprob(self.tokenizer.decode([token]), float(row[token]), top)
