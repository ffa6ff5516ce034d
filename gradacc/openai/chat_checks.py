"""Chat completion and completion requests checked before they are answered, as the live routes
and the batch runner both check them: what is not served is refused naming it (a 400), tools are
well made, and the messages are made plain for a chat template (the predict server renders
them)."""

from __future__ import annotations

from typing import Any

from gradacc.errors import InvalidRequest
from gradacc.openai.chat_requests import ChatCompletionRequest, ChatMessage, CompletionRequest
from gradacc.settings import Settings
from trainer_core.spec.tools import answer_problems, tool_call_problems, tools_problems

# OpenAI's fields that would change the answer in ways this server cannot: named when given.
UNSERVED = {
    "functions": "function calls are not served",
    "function_call": "function calls are not served",
    "audio": "audio output is not served",
    "prediction": "predicted outputs are not served",
    "web_search_options": "web search is not served",
    "reasoning_effort": "these models do not reason apart from their answer",
    "logit_bias": "logit_bias is not served",
    "echo": "echo is not served",
    "suffix": "suffix (insertion) is not served",
}


def check_served(body: ChatCompletionRequest | CompletionRequest, settings: Settings) -> None:
    given = body.model_dump(exclude_none=True)
    for field, why in UNSERVED.items():
        if field in given and given[field] not in (False, [], {}):
            raise InvalidRequest(why, param=field)
    check_tools(given)
    for field in ("presence_penalty", "frequency_penalty"):
        if given.get(field, 0) != 0:
            raise InvalidRequest("penalties are not served; leave it 0", param=field)
    if given.get("best_of", 1) != 1:
        raise InvalidRequest("best_of is not served; use n", param="best_of")
    if (given.get("response_format") or {"type": "text"}).get("type") != "text":
        raise InvalidRequest("only text answers are served", param="response_format")
    if set(given.get("modalities") or ["text"]) != {"text"}:
        raise InvalidRequest("only text answers are served", param="modalities")
    if given.get("stream_options") and not given.get("stream"):
        raise InvalidRequest("only with stream: true", param="stream_options")
    for field in ("max_completion_tokens", "max_tokens"):
        if given.get(field, 0) > settings.serve_max_completion_tokens:
            raise InvalidRequest(
                f"at most {settings.serve_max_completion_tokens} "
                "(GRADACC_SERVE_MAX_COMPLETION_TOKENS)",
                param=field,
            )


def check_tools(given: dict[str, Any]) -> None:
    """``tools`` well made (the predict server decides whether the model's template renders
    them: a 400 naming ``tools`` if not); ``tool_choice`` only what is honoured: "auto" (the
    model decides) and "none" (tools shown, the answer left text). Forcing a call is not.
    ``parallel_tool_calls: false`` is: the answer ends with its first call."""
    tools = given.get("tools") or None
    if problems := tools_problems(tools):
        raise InvalidRequest(problems[0], param="tools")
    choice = given.get("tool_choice")
    if choice is not None and not tools:
        raise InvalidRequest("only with tools", param="tool_choice")
    if choice not in (None, "auto", "none"):
        shown = repr(choice) if isinstance(choice, str) else "a named function"
        raise InvalidRequest(
            f"{shown} is not served: a forced call needs decoding constrained to the "
            "template's call format, which this server does not do, so it could not promise "
            "the call; send 'auto' (the model decides: finish_reason 'tool_calls' when it "
            "calls) or 'none'",
            param="tool_choice",
        )


def _plain(message: ChatMessage, index: int, call_ids: set[str]) -> dict[str, Any]:
    """``{role, content}`` as a chat template reads it: text parts joined, ``developer`` as
    ``system`` (OpenAI treats them alike for models without the distinction). An assistant's
    ``tool_calls`` and a ``tool`` message's ``tool_call_id`` pass in the shape training renders
    (``trainer_core.spec.tools`` checks them; ``call_ids``: the calls made so far)."""
    where = f"messages.{index}"
    if message.role == "function" or message.function_call:
        raise InvalidRequest("function messages are not served; use tools", param=where)
    if message.audio is not None:
        raise InvalidRequest("audio is not served", param=f"{where}.audio")
    content = message.content
    if isinstance(content, list):
        for j, part in enumerate(content):
            if part.type != "text":
                raise InvalidRequest(
                    f"{part.type} content is not served; only text",
                    param=f"{where}.content.{j}.type",
                )
        content = "".join(part.text or "" for part in content)
    role = "system" if message.role == "developer" else message.role
    plain: dict[str, Any] = {"role": role, "content": content or ""}
    if message.tool_calls is not None:
        if role != "assistant":
            raise InvalidRequest("only an assistant message makes tool calls", param=where)
        field = f"{where}.tool_calls"
        if problems := tool_call_problems(message.tool_calls, field, call_ids, parallel=True):
            raise InvalidRequest(problems[0], param=field)
        plain |= {"content": content or None, "tool_calls": message.tool_calls}
    if role == "tool":
        if problems := answer_problems(message.model_dump(), where, call_ids):
            raise InvalidRequest(problems[0], param=f"{where}.tool_call_id")
        plain["tool_call_id"] = message.tool_call_id
    return plain


def forwarded_body(body: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
    """What the predict server (or an upstream) gets: the client's fields, messages plain."""
    sent = body.model_dump(exclude_none=True, exclude={"messages", "user", "store", "metadata"})
    if isinstance(body, ChatCompletionRequest):
        call_ids: set[str] = set()
        sent["messages"] = [_plain(m, i, call_ids) for i, m in enumerate(body.messages)]
    return sent
