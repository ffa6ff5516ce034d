"""One OpenAI request on the predict server, with the engine's lock held: the prompt (a chat
rendered with the model's own template, under the render limits), its sampling, its ``n``
choices, answered whole or streamed as Server-Sent Events."""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

import torch

from gradacc.serving import ServedModel
from worker.predict.engine import Engine
from worker.predict.failpoints import hold_stream
from worker.predict.generation import Completion, Sampling, TokenLogprob, complete
from worker.predict.models import chat_prompt
from worker.predict.openai_protocol import (
    Kind,
    ServeError,
    answer,
    chunk,
    chunk_choice,
    invalid,
    logprobs_of,
    new_id,
    sampling_of,
    usage,
)
from worker.predict.render import RenderRefused

if TYPE_CHECKING:
    from worker.predict.cache import Loaded
    from worker.predict.reply import Reply

log = logging.getLogger(__name__)
TIMEOUT = "the generation ran past its deadline (GRADACC_SERVE_TIMEOUT_S)"


def context_of(loaded: Loaded) -> int:
    """The most tokens the model attends to: its position table, else the tokenizer's length."""
    config = loaded.model.config
    for name in ("max_position_embeddings", "n_positions"):
        if isinstance(getattr(config, name, None), int):
            return int(getattr(config, name))
    return int(loaded.tokenizer.model_max_length)


def prompt_ids(engine: Engine, loaded: Loaded, kind: Kind, body: dict[str, Any]) -> list[int]:
    tokenizer = loaded.tokenizer
    if not kind.chat:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise invalid("prompt", "must be one string")
        return list(tokenizer(prompt)["input_ids"])
    if not tokenizer.chat_template:
        raise invalid("model", "this model has no chat template; use /v1/completions")
    try:
        text = chat_prompt(tokenizer, body.get("messages") or [], engine.limits)
    except RenderRefused as exc:
        raise invalid("messages", str(exc)) from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def run_request(engine: Engine, kind: Kind, served: ServedModel, body: dict[str, Any],
                reply: Reply, *, deadline: float) -> None:  # fmt: skip
    loaded = engine.load(served)
    ids = prompt_ids(engine, loaded, kind, body)
    sampling = sampling_of(body, kind, prompt_tokens=len(ids), context=context_of(loaded),
                           limit=engine.settings.serve_max_completion_tokens)  # fmt: skip
    n = body.get("n") or 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 8:
        raise invalid("n", "must be from 1 to 8")
    seed = body.get("seed")
    # One seed for the whole request: its n choices follow one another from it, reproducibly.
    torch.manual_seed(seed if isinstance(seed, int) else random.getrandbits(63))
    if body.get("stream"):
        _stream(loaded, kind, served.name, ids, sampling, n, body, reply, deadline)
        return
    done = [complete(loaded, ids, sampling, deadline=deadline) for _ in range(n)]
    if any(c.timed_out for c in done):
        raise ServeError(504, "timeout", TIMEOUT)
    wanted = sampling.top_logprobs is not None
    reply.json(200, answer(kind, served.name, done, len(ids), wanted))


def _stream(loaded: Loaded, kind: Kind, model: str, ids: list[int], sampling: Sampling, n: int,
            body: dict[str, Any], reply: Reply, deadline: float) -> None:  # fmt: skip
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    ident, spent = new_id(kind), 0

    def send(choice: dict[str, Any]) -> None:
        reply.event(chunk(kind, ident, model, [choice], include_usage))

    reply.start_stream()
    for index in range(n):
        done = _stream_choice(loaded, kind, index, ids, sampling, send, reply, deadline)
        if reply.closed:
            return  # nobody to tell
        if done.timed_out:
            reply.event(ServeError(504, "timeout", TIMEOUT).body())
            break
        send(chunk_choice(kind, index, None, finish_reason=done.finish_reason))
        spent += len(done.tokens)
    if include_usage:
        reply.event(chunk(kind, ident, model, [], False) | {"usage": usage(len(ids), spent)})
    reply.finish_stream()


def _stream_choice(loaded: Loaded, kind: Kind, index: int, ids: list[int], sampling: Sampling,
                   send: Any, reply: Reply, deadline: float) -> Completion:  # fmt: skip
    wanted, offset = sampling.top_logprobs is not None, [0]
    if kind.chat:
        send(chunk_choice(kind, index, "", role=True))

    def on_delta(text: str, found: list[TokenLogprob]) -> None:
        logprobs = logprobs_of(kind, found, wanted=wanted, offset=offset[0])
        offset[0] += sum(len(t.token) for t in found)
        send(chunk_choice(kind, index, text, logprobs=logprobs))

    def cancelled() -> bool:  # asked after each token
        hold_stream(reply.gone)
        return reply.gone()

    started = time.monotonic()
    done = complete(loaded, ids, sampling, deadline=deadline, on_delta=on_delta,
                    cancelled=cancelled)  # fmt: skip
    if reply.closed:
        log.info("a stream stopped: its client went away after %d of %d tokens (%.2f s)",
                 len(done.tokens), sampling.max_tokens, time.monotonic() - started)  # fmt: skip
    return done
