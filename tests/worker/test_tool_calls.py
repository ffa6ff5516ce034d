"""Tools on the predict server: a model whose chat template renders tools gets them (the prompt
is exactly ``apply_chat_template(messages, tools=...)``, tool calls and tool turns rendered as
training renders them), one whose template does not is a 400 naming ``tools``; an answer's
``<tool_call>`` blocks become OpenAI ``tool_calls`` (malformed JSON stays content), whole or
streamed (content up to a possible call goes out at once, the calls at the end)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from trainer_core.builtin.models import builtin_tokenizer
from worker.predict.generation import Completion
from worker.predict.openai.protocol import CHAT, ServeError, answer
from worker.predict.openai.run import _last, prompt_ids
from worker.predict.render import RenderLimits
from worker.predict.tool_calls import Held, parse, parses_calls

TOOLS: Any = [{"type": "function", "function": {"name": "weather", "description": "now",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
NO_TOOLS = ("{% for m in messages %}{{ m['role'] + ': ' + (m['content'] or '') + '\\n' }}"
            "{% endfor %}")  # fmt: skip
ENGINE = SimpleNamespace(limits=RenderLimits(timeout_s=5.0, memory_bytes=512 * 2**20))


def _ids(template: str | None, body: dict[str, Any]) -> list[int]:
    tokenizer = builtin_tokenizer("builtin:tiny-chat")
    if template is not None:
        tokenizer.chat_template = template
    return prompt_ids(ENGINE, SimpleNamespace(tokenizer=tokenizer), CHAT, body)  # type: ignore[arg-type]


def test_a_template_that_renders_tools_gets_them_as_training_renders_them() -> None:
    tokenizer = builtin_tokenizer("builtin:tiny-chat")
    ids = _ids(None, {"messages": CONVERSATION, "tools": TOOLS})
    text = str(tokenizer.decode(ids))
    assert '<tools>\n{"type": "function", "function": {"name": "weather"' in text
    assert '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>tool\nsunny<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    # What apply_chat_template makes of it, the arguments as the object they encode.
    shown = [*CONVERSATION[:2], {**CONVERSATION[2], "tool_calls": [
        {**CALL, "function": {"name": "weather", "arguments": {"city": "Paris"}}}]}, CONVERSATION[3]]  # fmt: skip
    expected = tokenizer.apply_chat_template(shown, tools=TOOLS, add_generation_prompt=True,
                                             tokenize=False)  # fmt: skip
    assert ids == tokenizer(expected, add_special_tokens=False)["input_ids"]
    assert ids != _ids(None, {"messages": CONVERSATION})  # the tools are in the prompt


@pytest.mark.parametrize(
    ("template", "param"),
    [
        (NO_TOOLS, "tools"),  # never names tools
        ("{# tools #}" + NO_TOOLS, "tools"),  # names them, renders nothing of them
    ],
)
def test_a_template_that_does_not_render_tools_is_a_400_naming_tools(template: str,
                                                                     param: str) -> None:  # fmt: skip
    with pytest.raises(ServeError) as refused:
        _ids(template, {"messages": CONVERSATION[:2], "tools": TOOLS})
    assert (refused.value.status, refused.value.param) == (400, param)
    assert "does not render tools" in refused.value.message
    assert _ids(template, {"messages": CONVERSATION[:2]})  # without tools it serves


def test_tool_calls_in_history_need_a_template_that_renders_them() -> None:
    with pytest.raises(ServeError) as refused:
        _ids(NO_TOOLS, {"messages": CONVERSATION})
    assert refused.value.param == "messages"


def test_the_parser_splits_calls_from_content() -> None:
    text = ('Let me look.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "weather", "arguments": "{\\"city\\": \\"Rome\\"}"}'
            "\n</tool_call>")  # fmt: skip
    parsed = parse(text)
    assert parsed.content == "Let me look."
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [
        {"city": "Paris"}, {"city": "Rome"}]  # fmt: skip
    first = parsed.tool_calls[0]
    assert first["type"] == "function" and first["function"]["name"] == "weather"
    assert first["id"].startswith("call_") and first["id"] != parsed.tool_calls[1]["id"]
    only = parse('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert only.content is None and only.tool_calls[0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    "text",
    [
        "plain answer",
        "",
        '<tool_call>{"name": "weather", "arguments": {"city": </tool_call>',  # malformed JSON
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',  # arguments not an object
        '<tool_call>{"name": "f", "arguments": {}}',  # never closed
    ],
)
def test_what_is_not_a_call_stays_content(text: str) -> None:
    parsed = parse(text)
    assert (parsed.content, parsed.tool_calls) == (text, [])


def test_a_stream_holds_text_from_a_possible_call_to_its_end() -> None:
    pieces = [
        "Sure",
        " <",
        "tool",
        "_call>",
        '{"name": "f", ',
        '"arguments": {"a": 1}}',
        "</tool_call>",
    ]
    held = Held()
    sent = [held.take(p) for p in pieces]
    assert sent == ["Sure", " ", "", "", "", "", ""]
    parsed = held.finish()
    assert parsed.content is None and parsed.tool_calls[0]["function"]["arguments"] == '{"a": 1}'
    # A "<" that starts no tag is released once it cannot.
    other = Held()
    assert [other.take(p) for p in ["a <", "b> c"]] == ["a ", "<b> c"]
    assert (other.finish().content, other.finish().tool_calls) == ("", [])


def test_the_known_format_is_read_from_the_template() -> None:
    assert parses_calls(builtin_tokenizer("builtin:tiny-chat").chat_template)
    assert not parses_calls(NO_TOOLS) and not parses_calls(None)


def test_an_answer_with_calls_is_openais_tool_calls_message() -> None:
    called = Completion(text='<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
                        finish_reason="stop")  # fmt: skip
    plain = Completion(text="hello", finish_reason="stop")
    body = answer(CHAT, "m", [called, plain], 5, False, calls=True)
    first, second = (c for c in body["choices"])
    assert first["finish_reason"] == "tool_calls" and first["message"]["content"] is None
    assert first["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert second["finish_reason"] == "stop" and second["message"]["content"] == "hello"
    assert "tool_calls" not in second["message"]
    # tool_choice "none" (calls=False): the text stays as the model wrote it.
    kept = answer(CHAT, "m", [called], 5, False)["choices"][0]
    assert kept["message"]["content"] == called.text and kept["finish_reason"] == "stop"


def test_a_streamed_choice_ends_with_its_held_content_and_whole_calls() -> None:
    held = Held()
    assert held.take('ok <tool_call>{"name": "f", "arguments": {}}</tool_call> done') == "ok "
    last = _last(CHAT, 0, "stop", held)
    assert last["finish_reason"] == "tool_calls" and last["delta"]["content"] == "done"
    (call,) = last["delta"]["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "f", "arguments": "{}"}
    plain = _last(CHAT, 1, "length", Held())
    assert plain["finish_reason"] == "length" and plain["delta"] == {}


def test_parallel_tool_calls_false_ends_the_answer_at_its_first_call() -> None:
    two = ('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call> then '
           '<tool_call>{"name": "g", "arguments": {}}</tool_call> bye')  # fmt: skip
    assert [c["function"]["name"] for c in parse(two).tool_calls] == ["f", "g"]
    first = parse(two, one_call=True)
    assert [c["function"]["name"] for c in first.tool_calls] == ["f"] and first.content is None
    body = answer(CHAT, "m", [Completion(text=two, finish_reason="stop")], 5, False,
                  calls=True, one_call=True)  # fmt: skip
    assert len(body["choices"][0]["message"]["tool_calls"]) == 1
    held = Held(one_call=True)
    held.take(two)
    assert [c["function"]["name"] for c in held.finish().tool_calls] == ["f"]
