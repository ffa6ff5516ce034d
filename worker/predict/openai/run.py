"""One OpenAI request on the predict server: the prompt (a chat rendered with the model's own
template, under the render limits), its sampling (``protocol.sampling_of``, the one builder), its
``n`` choices as rows of the batcher (``worker.predict.batcher``: they decode together with every
other request's rows of the same model), answered whole or streamed as Server-Sent Events. A
causal LM's ``/v1/jobs/{id}/predict`` is one too (``predict_generation``): the same path, the same
timeout (``GRADACC_SERVE_TIMEOUT_S``), its answer read back as ``/predict``'s."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from gradacc.serving.resolve import ServedModel
from worker.predict.batcher import Row, choices
from worker.predict.engine import Engine
from worker.predict.failpoints import hold_stream
from worker.predict.generation import Sampling
from worker.predict.openai.protocol import (
    CHAT,
    TEXT,
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
from worker.predict.render import RenderRefused, chat_prompt
from worker.predict.reply import Collected, Reply
from worker.predict.tool_calls import Held, parses_calls

if TYPE_CHECKING:
    from worker.predict.cache import Loaded

log = logging.getLogger(__name__)
TIMEOUT = "the generation ran past its deadline (GRADACC_SERVE_TIMEOUT_S)"
NO_TOOLS = "this model's chat template does not render tools"


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
    messages, tools = body.get("messages") or [], body.get("tools") or None
    template = str(tokenizer.chat_template)
    past_calls = any(isinstance(m, dict) and m.get("tool_calls") for m in messages)
    if past_calls and "tool_calls" not in template:
        raise invalid("messages", "this model's chat template does not render tool_calls")
    if tools and "tools" not in template:
        raise invalid("tools", NO_TOOLS)
    try:
        text = chat_prompt(tokenizer, messages, engine.limits, tools)
        if tools and text == chat_prompt(tokenizer, messages, engine.limits):
            raise invalid("tools", NO_TOOLS)  # it reads the name, renders nothing of them
    except RenderRefused as exc:
        raise invalid("messages", str(exc)) from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def parses_calls_for(loaded: Loaded, body: dict[str, Any]) -> bool:
    """Whether this answer's ``<tool_call>`` blocks become ``tool_calls``: tools were given,
    ``tool_choice`` is not "none", and the template writes calls that way (``tool_calls``)."""
    wanted = bool(body.get("tools")) and body.get("tool_choice") != "none"
    return wanted and parses_calls(loaded.tokenizer.chat_template)


def run_request(
    engine: Engine,
    kind: Kind,
    served: ServedModel,
    body: dict[str, Any],
    reply: Reply,
    *,
    deadline: float,
) -> None:
    """Answer one request: its model loaded (by the batcher's thread, between decode steps: a
    load may add an adapter to a base that a batch is using), its rows run in the batcher. The
    model is pinned from its load to the request's end: another request's load cannot evict it
    while this one renders its prompt."""

    def load_pinned() -> Loaded:
        loaded = engine.load(served)
        loaded.pin()
        return loaded

    loaded = engine.on_models(load_pinned)
    try:
        _run_loaded(engine, kind, served.name, body, reply, loaded, deadline)
    finally:
        loaded.unpin()


def predict_generation(
    engine: Engine, loaded: Loaded, request: dict[str, Any], *, deadline: float
) -> dict[str, Any]:
    """``/predict``'s request on a causal LM, run as the chat (``messages``) or text (``prompt``)
    completion it is: ``max_new_tokens`` as ``max_tokens``, greedy unless ``temperature``, seed
    0 unless given. Its answer: ``text``, and a chat's ``message``."""
    kind = CHAT if "messages" in request else TEXT
    body: dict[str, Any] = {key: request[key] for key in ("messages", "prompt") if key in request}
    body |= {
        "max_tokens": int(request.get("max_new_tokens", 64)),
        "temperature": float(request.get("temperature", 0.0)),
        "seed": int(request.get("seed", 0)),
    }
    collected = Collected()
    _run_loaded(engine, kind, "predict", body, collected, loaded, deadline)
    (choice,) = collected.body["choices"]
    if not kind.chat:
        return {"text": choice["text"]}
    text = choice["message"]["content"] or ""
    return {"text": text, "message": {"role": "assistant", "content": text}}


def _run_loaded(
    engine: Engine,
    kind: Kind,
    name: str,
    body: dict[str, Any],
    reply: Reply,
    loaded: Loaded,
    deadline: float,
) -> None:
    ids = prompt_ids(engine, loaded, kind, body)
    sampling = sampling_of(
        body,
        kind,
        prompt_tokens=len(ids),
        context=context_of(loaded),
        limit=engine.settings.serve_max_completion_tokens,
    )
    n = body.get("n") or 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 8:
        raise invalid("n", "must be from 1 to 8")
    seed, calls = body.get("seed"), kind.chat and parses_calls_for(loaded, body)
    one_call = body.get("parallel_tool_calls") is False
    if body.get("stream"):
        rows = choices(
            loaded,
            ids,
            sampling,
            n=n,
            seed=_seed(seed),
            deadline=deadline,
            cancelled=lambda: _parked_or_gone(reply),
        )
        _stream(engine, kind, name, rows, sampling, body, reply, calls=calls, one_call=one_call)
        return
    rows = choices(
        loaded, ids, sampling, n=n, seed=_seed(seed), deadline=deadline, cancelled=reply.gone
    )
    done = engine.batcher.complete(rows)
    if any(c.timed_out for c in done):
        raise ServeError(504, "timeout", TIMEOUT)
    if reply.gone():
        return  # nobody to answer
    wanted = sampling.top_logprobs is not None
    reply.json(200, answer(kind, name, done, len(ids), wanted, calls=calls, one_call=one_call))


def _seed(seed: Any) -> int | None:
    """The request's seed: choice i of a seeded request draws from (seed, i), reproducibly."""
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _parked_or_gone(reply: Reply) -> bool:
    """A stream's cancellation, asked after each token (the test failpoint parks it there)."""
    hold_stream(reply.gone)
    return reply.gone()


def _stream(
    engine: Engine,
    kind: Kind,
    model: str,
    rows: list[Row],
    sampling: Sampling,
    body: dict[str, Any],
    reply: Reply,
    *,
    calls: bool,
    one_call: bool = False,
) -> None:
    """The rows' events as chunks as they come; the choices' pieces interleave (by index).
    ``calls``: each choice's text passes through a ``Held`` (its calls come whole at its end;
    ``one_call``: the first only)."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    wanted = sampling.top_logprobs is not None
    ident, spent, offsets = new_id(kind), 0, [0] * len(rows)
    held = [Held(one_call=one_call) for _ in rows] if calls else None

    def send(choice: dict[str, Any]) -> None:
        reply.event(chunk(kind, ident, model, [choice], include_usage))

    reply.start_stream()
    if kind.chat:
        for row in rows:
            send(chunk_choice(kind, row.index, "", role=True))
    started, timed_out = time.monotonic(), False
    for event in engine.batcher.run(rows):
        if event.text or event.logprobs:
            logprobs = logprobs_of(kind, event.logprobs, wanted=wanted, offset=offsets[event.index])
            offsets[event.index] += sum(len(t.token) for t in event.logprobs)
            text = held[event.index].take(event.text) if held else event.text
            if held is None or text or logprobs:
                send(chunk_choice(kind, event.index, text, logprobs=logprobs))
        done = event.done
        if done is None:
            continue
        if done.cancelled:
            log.info(
                "a stream stopped: its client went away after %d of %d tokens (%.2f s)",
                len(done.tokens),
                sampling.max_tokens,
                time.monotonic() - started,
            )
        elif done.timed_out:
            timed_out = True
        else:
            send(_last(kind, event.index, done.finish_reason, held[event.index] if held else None))
            spent += len(done.tokens)
    if reply.closed:
        return  # nobody to tell
    if timed_out:
        reply.event(ServeError(504, "timeout", TIMEOUT).body())
    if include_usage:
        reply.event(
            chunk(kind, ident, model, [], False) | {"usage": usage(len(rows[0].prompt), spent)}
        )
    reply.finish_stream()


def _last(kind: Kind, index: int, finish_reason: str, held: Held | None) -> dict[str, Any]:
    """A choice's closing chunk: with what a ``Held`` kept back (content, whole calls)."""
    if held is None:
        return chunk_choice(kind, index, None, finish_reason=finish_reason)
    parsed = held.finish()
    reason = "tool_calls" if parsed.tool_calls else finish_reason
    return chunk_choice(
        kind, index, parsed.content or None, finish_reason=reason, tool_calls=parsed.tool_calls
    )
