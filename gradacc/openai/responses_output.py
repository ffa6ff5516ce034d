"""OpenAI's Responses API, its answer side: a chat completion (or its stream of chunks) becomes a
``response`` object (or its typed events: ``response.created``, ``response.output_text.delta``,
..., ``response.completed``). Pure: the API and the batch runner share it."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Mapping
from typing import Any

from gradacc.ids import time_ordered_id

RESPONSE_PREFIX = "resp_"


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def skeleton(given: Mapping[str, Any], response_id: str) -> dict[str, Any]:
    """The response object before any output: what the request set, echoed."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": given["model"],
        "output": [],
        "instructions": given.get("instructions"),
        "max_output_tokens": given.get("max_output_tokens"),
        "temperature": given.get("temperature"),
        "top_p": given.get("top_p"),
        "tools": list(given.get("tools") or []),
        "tool_choice": given.get("tool_choice") or "auto",
        "parallel_tool_calls": given.get("parallel_tool_calls", True) is not False,
        "previous_response_id": given.get("previous_response_id"),
        "store": given.get("store", True) is not False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": dict(given.get("metadata") or {}),
        "user": given.get("user"),
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }


def new_response_id() -> str:
    return time_ordered_id(RESPONSE_PREFIX)


def usage_of(chat_usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not chat_usage:
        return None
    prompt, completion = chat_usage["prompt_tokens"], chat_usage["completion_tokens"]
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [part],
    }


def call_item(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call["function"]
    return {
        "id": new_item_id("fc"),
        "type": "function_call",
        "status": "completed",
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function.get("arguments") or "{}",
    }


def finish(response: dict[str, Any], finish_reason: str | None, usage: Any) -> dict[str, Any]:
    """Status, incomplete details and usage set from the chat answer's end."""
    cut = finish_reason == "length"
    response["status"] = "incomplete" if cut else "completed"
    response["incomplete_details"] = {"reason": "max_output_tokens"} if cut else None
    response["usage"] = usage_of(usage)
    response["completed_at"] = int(time.time())
    return response


def from_completion(response: dict[str, Any], completion: Mapping[str, Any]) -> dict[str, Any]:
    """A whole chat completion (choice 0) as the response's output."""
    choice = completion["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls") or []
    status = "incomplete" if choice["finish_reason"] == "length" else "completed"
    output = []
    if message.get("content") or not calls:
        output.append(message_item(new_item_id("msg"), message.get("content") or "", status))
    output += [call_item(call) for call in calls]
    response["output"] = output
    return finish(response, choice["finish_reason"], completion.get("usage"))


class StreamEvents:
    """A chat completion's stream chunks in, the Responses stream's typed events out. The text
    arrives as ``response.output_text.delta`` events of one message item; the calls, which the
    chat stream gives whole at the end, as ``function_call`` items after it."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.sequence = 0
        self.text = ""
        self.message_id: str | None = None
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> Iterator[dict[str, Any]]:
        yield self._event("response.created", response=dict(self.response))
        yield self._event("response.in_progress", response=dict(self.response))

    def _open_message(self) -> Iterator[dict[str, Any]]:
        self.message_id = new_item_id("msg")
        item = message_item(self.message_id, "", "in_progress") | {"content": []}
        yield self._event("response.output_item.added", output_index=0, item=item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        yield self._event(
            "response.content_part.added",
            item_id=self.message_id,
            output_index=0,
            content_index=0,
            part=part,
        )

    def chunk(self, chunk: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The events one chat chunk makes."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if text := delta.get("content"):
                if self.message_id is None:
                    yield from self._open_message()
                self.text += text
                yield self._event(
                    "response.output_text.delta",
                    item_id=self.message_id,
                    output_index=0,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            for call in delta.get("tool_calls") or []:
                self._add_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def _add_call(self, delta: Mapping[str, Any]) -> None:
        found = self.calls.setdefault(
            int(delta.get("index", 0)), {"id": None, "function": {"name": "", "arguments": ""}}
        )
        found["id"] = delta.get("id") or found["id"]
        function = delta.get("function") or {}
        found["function"]["name"] += function.get("name") or ""
        found["function"]["arguments"] += function.get("arguments") or ""

    def end(self) -> Iterator[dict[str, Any]]:
        """The closing events: the items done, then ``response.completed`` (``incomplete`` when
        cut at ``max_output_tokens``; ``failed`` when the model server broke off)."""
        if self.finish_reason is None:
            self.response |= {
                "status": "failed",
                "error": {
                    "code": "server_error",
                    "message": "the model server broke off the answer",
                },
            }
            yield self._event("response.failed", response=self.response)
            return
        status = "incomplete" if self.finish_reason == "length" else "completed"
        output: list[dict[str, Any]] = []
        if self.message_id is None and not self.calls:
            yield from self._open_message()
        if self.message_id is not None:
            item = message_item(self.message_id, self.text, status)
            part = item["content"][0]
            yield self._event(
                "response.output_text.done",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                text=self.text,
                logprobs=[],
            )
            yield self._event(
                "response.content_part.done",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                part=part,
            )
            yield self._event("response.output_item.done", output_index=0, item=item)
            output.append(item)
        for _, call in sorted(self.calls.items()):
            item, index = call_item(call), len(output)
            yield self._event(
                "response.output_item.added",
                output_index=index,
                item=item | {"status": "in_progress", "arguments": ""},
            )
            yield self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=item["arguments"],
            )
            yield self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
            )
            yield self._event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        self.response["output"] = output
        finish(self.response, self.finish_reason, self.usage)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        yield self._event(kind, response=self.response)
