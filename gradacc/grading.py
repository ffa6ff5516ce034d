"""What a grading gets from this server (the graders themselves are the core's:
``trainer_core.graders``): the python grader's sandbox limits an operator sets
(``GRADACC_GRADER_*``), and the chat callable a training job's model graders call.

The chat callable asks an upstream OpenAI-compatible server (``GRADACC_SERVE_UPSTREAMS``,
``gradacc.upstreams``) directly over HTTP. A training process cannot reach this server's own
models (they answer on a worker's predict server, behind the API), so the API refuses a job whose
model grader names one (``gradacc.sources.graders``); a name no route serves fails here, as a
``model_grader_server_error`` of that sample."""

from __future__ import annotations

from typing import Any

import httpx

from gradacc.settings import Settings
from gradacc.upstreams import Upstreams
from trainer_core.graders import ChatFn, ChatReply, SandboxLimits


def sandbox_limits(settings: Settings) -> SandboxLimits:
    """The settings' limits, for every caller that grades: a training run's reward and
    ``/v1/fine_tuning/alpha/graders/run``; the disk limit stays the sandbox's own (1 GiB)."""
    return SandboxLimits(
        wall_s=settings.grader_wall_s,
        cpu_s=settings.grader_cpu_s,
        memory_bytes=settings.grader_memory_bytes,
        pids=settings.grader_pids,
        cpus=settings.grader_cpus,
        uid=settings.grader_uid,
        cgroup=settings.grader_cgroup,
    )


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
