"""One completion of a prompt with ``model.generate`` itself (so greedy tokens are exactly what a
client gets from ``generate`` on the downloaded model), watched token by token:

- a streamer sees each new token, turns the tokens so far into the text a client may be shown
  (``worker.predict.deltas``: stop strings cut, their possible beginnings held back) and hands
  the new part to ``on_delta``;
- a stopping criterion ends the generation at a stop string, at the deadline, or when
  ``cancelled()`` says so (a client that went away);
- a logits processor placed before the sampling warpers records the model's own log-probabilities
  (OpenAI's ``logprobs``), not the ones temperature or top-p reshaped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.streamers import BaseStreamer

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


class DeadlinePassed(Exception):
    """The request's deadline came before its generation ended."""


OnDelta = Callable[[str, list[TokenLogprob]], None]


class _Recorder(LogitsProcessor):
    """The log-softmax of each step's logits, before any warper (first in the list)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.keep:
            self.steps.append(scores[0].float().log_softmax(-1).cpu())
        return scores


class _Watch(BaseStreamer, StoppingCriteria):
    """The streamer and the stopping criterion of one generation (both see every step)."""

    def __init__(self, tokenizer: Any, sampling: Sampling, recorder: _Recorder, *,
                 on_delta: OnDelta | None, cancelled: Callable[[], bool], deadline: float) -> None:  # fmt: skip
        self.tokenizer, self.sampling, self.recorder = tokenizer, sampling, recorder
        self.on_delta, self.cancelled, self.deadline = on_delta, cancelled, deadline
        self.deltas = TextDeltas(sampling.stop)
        self.done = Completion()
        self._prompt_seen, self._sent_logprobs = False, 0

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate hands the prompt over first
            self._prompt_seen = True
            return
        self.done.tokens.extend(int(t) for t in value.reshape(-1).tolist())
        self._emit(final=False)

    def end(self) -> None:
        self._emit(final=True)

    def _emit(self, *, final: bool) -> None:
        text = self.tokenizer.decode(self.done.tokens, skip_special_tokens=True)
        delta = self.deltas.update(text, final=final)
        new = self._new_logprobs(final)
        if self.on_delta is not None and (delta or new):
            self.on_delta(delta, new)

    def _new_logprobs(self, final: bool) -> list[TokenLogprob]:
        if self.sampling.top_logprobs is None:
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
        row, token = self.recorder.steps[i], self.done.tokens[i]
        k = self.sampling.top_logprobs or 0
        values, ids = row.topk(k) if k else (torch.empty(0), torch.empty(0, dtype=torch.long))
        top = [
            (self.tokenizer.decode([int(t)]), float(v)) for v, t in zip(values, ids, strict=True)
        ]
        return TokenLogprob(self.tokenizer.decode([token]), float(row[token]), top)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:  # fmt: skip
        if time.monotonic() >= self.deadline:
            self.done.timed_out = True
        stop = self.deltas.stopped or self.done.timed_out or self.cancelled()
        flags = torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)
        return flags  # type: ignore[return-value]


def _processors(sampling: Sampling, recorder: _Recorder) -> tuple[dict[str, Any], list[Any]]:
    """generate's sampling arguments and the processors after the recorder. The warpers are
    passed as processors (with generate's own turned off) so that the recorder comes first."""
    if sampling.greedy:
        return {"do_sample": False}, [recorder]
    warpers: list[Any] = [recorder]
    if sampling.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_p < 1.0:
        warpers.append(TopPLogitsWarper(sampling.top_p))
    return {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}, warpers


@torch.inference_mode()
def complete(loaded: Any, prompt_ids: list[int], sampling: Sampling, *, deadline: float,
             on_delta: OnDelta | None = None,
             cancelled: Callable[[], bool] = lambda: False) -> Completion:  # fmt: skip
    """One completion of ``prompt_ids`` (the caller seeds torch once for all of a request's
    choices, so ``n`` choices with a seed are reproducible)."""
    tokenizer, model = loaded.tokenizer, loaded.model
    recorder = _Recorder(sampling.top_logprobs is not None)
    watch = _Watch(tokenizer, sampling, recorder, on_delta=on_delta, cancelled=cancelled,
                   deadline=deadline)  # fmt: skip
    arguments, processors = _processors(sampling, recorder)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=loaded.device)
    model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=sampling.max_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        logits_processor=LogitsProcessorList(processors),
        stopping_criteria=StoppingCriteriaList([watch]),
        streamer=watch,
        **arguments,
    )
    done = watch.done
    done.text = watch.deltas.shown
    ended = bool(done.tokens) and done.tokens[-1] == tokenizer.eos_token_id
    done.finish_reason = "stop" if watch.deltas.stopped or ended else "length"
    return done
