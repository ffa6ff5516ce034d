"""Rendering a chat template under limits (``chat_prompt``: a conversation as the model's template
renders it, what every chat request and ``/predict`` starts from). Jinja's sandbox stops a template from reaching Python,
not from computing: ``"A" * 10**10`` allocates, nested ``range`` loops multiply. A template comes
with the model (the job's ``chat_template``, an uploaded model's own), so the predict server
renders it in a forked child with an address-space limit and a wall-clock deadline: a template
that loops or grows fails its own request, and the server answers the next one.

The child is a fork of the predict server (the tokenizer is already loaded, nothing to import
again); it runs only the template (pure Python: no torch, no CUDA) and leaves with ``os._exit``.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer_core.spec.fields import MAX_TEMPLATE_CHARS

MAX_RENDERED_BYTES = 4 * 2**20  # a rendered prompt larger than this is refused


class RenderRefused(Exception):
    """The template ran past a limit (or failed): the request's answer, not the server's end."""


@dataclass(frozen=True)
class RenderLimits:
    timeout_s: float
    memory_bytes: int  # address space the child may add to what the fork gave it


def render_limited(render: Callable[[], str], limits: RenderLimits) -> str:
    """``render()`` in a forked child under ``limits``; its text, or ``RenderRefused``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(render, limits, write_end)
    os.close(write_end)
    data, finished = b"", False
    try:
        data, finished = _read(read_end, deadline=time.monotonic() + limits.timeout_s)
    finally:
        os.close(read_end)
        if not finished:  # past the deadline or the size cap: stopped where it is
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # its end closed: it is leaving (or killed), reaped at once
    if not finished:
        if len(data) > MAX_RENDERED_BYTES:
            raise RenderRefused(f"the chat template rendered more than {MAX_RENDERED_BYTES} bytes")
        raise RenderRefused(
            f"the chat template did not render within {limits.timeout_s:g} s "
            "(GRADACC_PREDICT_RENDER_TIMEOUT_S)"
        )
    try:
        answer = json.loads(data)
    except ValueError:  # killed mid-write (the CPU limit), or nothing at all
        raise RenderRefused("the chat template's render was stopped (a resource limit)") from None
    if "error" in answer:
        raise RenderRefused(f"the chat template failed: {answer['error']}")
    return str(answer["text"])


def _child(render: Callable[[], str], limits: RenderLimits, out: int) -> None:
    code = 0
    try:
        _limit(limits)
        payload = json.dumps({"text": render()})
    except MemoryError:
        payload = json.dumps({"error": "it ran out of memory (GRADACC_PREDICT_RENDER_MEMORY_MB)"})
    except BaseException as exc:  # the template's own error (raise_exception, a bad key, ...)
        payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    try:
        encoded = memoryview(payload.encode())
        while encoded:
            encoded = encoded[os.write(out, encoded) :]
    except OSError:  # the server stopped reading (past the size cap): nothing more to say
        code = 1
    os._exit(code)  # not the server's exit handlers, nor its buffered output


def _limit(limits: RenderLimits) -> None:
    with open("/proc/self/statm") as statm:  # the address space the fork inherited
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = mapped + limits.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (soft if hard < 0 else min(soft, hard), hard))
    cpu = int(limits.timeout_s) + 2  # a backstop: the server kills it at the deadline anyway
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _read(fd: int, *, deadline: float) -> tuple[bytes, bool]:
    """What the child writes until it closes its end (True), or the deadline or the size cap
    comes first (False)."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_RENDERED_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return b"".join(chunks), False
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def chat_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    limits: RenderLimits,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """What ``apply_chat_template`` makes of the conversation (and ``tools``), rendered under
    ``limits``: the template is the model's, so the tenant's (``worker.predict.render``). A tool
    call's ``arguments`` reach it as the object they encode, as in training
    (``trainer_core.data.chat_tools``), so a conversation renders as it was trained."""
    from trainer_core.data.chat_tools import template_messages  # pyarrow: not for the engine

    template = tokenizer.chat_template
    if isinstance(template, str) and len(template) > MAX_TEMPLATE_CHARS:
        raise RenderRefused(f"the model's chat template is over {MAX_TEMPLATE_CHARS} characters")
    shown = template_messages(messages)

    def render() -> str:
        return str(
            tokenizer.apply_chat_template(
                shown, tools=tools or None, tokenize=False, add_generation_prompt=True
            )
        )

    return render_limited(render, limits)
