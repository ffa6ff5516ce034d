"""The chat callable a training job's model graders call: an upstream OpenAI-compatible server
(``GRADACC_SERVE_UPSTREAMS``, ``gradacc.upstreams``), asked directly over HTTP. A training
process cannot reach this server's own models (they answer on a worker's predict server, behind
the API), so the API refuses a job whose model grader names one (``gradacc.sources.graders``);
a name no route serves fails here, as a ``model_grader_server_error`` of that sample.
"""

from __future__ import annotations

from typing import Any

import httpx

from gradacc.graders.models import ChatFn, ChatReply
from gradacc.upstreams import Upstreams


def upstream_chat(upstreams: Upstreams, *, timeout_s: float = 120.0) -> ChatFn:
    """``chat(model, messages, sampling)`` posting to the model's upstream ``/chat/completions``
    with the server's own key; raises on a name no route serves or an answer other than 200."""

    def chat(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> ChatReply:
        route = upstreams.match(model)
        if route is None:
            raise LookupError(f"no upstream serves {model!r} (GRADACC_SERVE_UPSTREAMS)")
        if route.own_names(model):  # no tenant to check them against here: never sent
            raise LookupError(f"{model!r} names this server's own model, not an upstream's")
        sent = {k: v for k, v in sampling.items() if v is not None}
        body = {**sent, "model": route.upstream_model(model), "messages": messages}
        url = route.server.base_url.rstrip("/") + "/chat/completions"
        answer = httpx.post(url, json=body, headers=route.headers(), timeout=timeout_s)
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code}: {answer.text[:300]}")
        data = answer.json()
        message = data["choices"][0]["message"]
        usage = {k: v for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
        return ChatReply(message.get("content") or "", usage, message.get("refusal"))

    return chat
