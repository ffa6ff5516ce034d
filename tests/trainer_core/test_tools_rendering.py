"""Function calling rendered and masked by the core: a row's tools reach the chat template, an
assistant's tool calls are trained with its turn, tool results are not; builtin:tiny-chat's
template renders rows without tools byte for byte as it did before tools; a template that
cannot render tools is refused naming them, never a silent drop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tests.tools_rows import reference, tool_row, tool_rows, write_jsonl
from tests.trainer_core.helpers import CHAT, make_spec
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.chat import CHATML_TEMPLATE
from trainer_core.spec.errors import DatasetError

ROWS = 20
# builtin:tiny-chat's (and 'chatml''s) template as it was before function calling, verbatim but
# for its markers, which now leave the newline after "<|im_end|>" out (data.turns: one rule).
BEFORE_TOOLS = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Renders tools but drops every tool call (and fails on content null without them).
TOOLS_ONLY = "{%- for tool in tools or [] -%}{{- tool | tojson -}}{%- endfor -%}" + BEFORE_TOOLS


def _render(template: str, messages: list[Any], prompt: bool) -> tuple[str, Any]:
    texts, spans = render_jinja_template(  # type: ignore[str-unpack]  # annotated -> str
        conversations=[messages], chat_template=template, add_generation_prompt=prompt,
        return_assistant_tokens_mask=True,
    )  # fmt: skip
    return texts[0], spans[0]


@pytest.mark.parametrize("split", ["train", "validation"])
def test_rows_without_tools_render_as_before(split: str) -> None:
    """Every conversation of builtin:chat-arithmetic: the same text and the same trained spans,
    with and without the generation prompt, as the template before tools made."""
    conversations: list[Any] = chat_arithmetic(split)["messages"]
    assert len(conversations) > 50
    for conversation in conversations:
        for prompt in (False, True):
            before = _render(BEFORE_TOOLS, conversation, prompt)
            assert _render(CHATML_TEMPLATE, conversation, prompt) == before


def test_the_reference_template_differs_once_tools_are_given() -> None:
    """Negative control: the byte-for-byte test above could fail (tools change the text)."""
    row = tool_row(0)
    plain = [m for m in row["messages"] if "tool_calls" not in m and m["role"] != "tool"]
    texts = render_jinja_template(conversations=[plain], chat_template=CHATML_TEMPLATE,
                                  tools=row["tools"])[0]  # fmt: skip
    assert texts[0] != _render(BEFORE_TOOLS, plain, False)[0]


def _split(path: Path, **spec: Any) -> Any:
    job = make_spec(
        CHAT, dataset=str(path), validation_split_percentage=0, max_seq_length=512, **spec
    )
    return load_job_data(job, load_tokenizer(job)).train


def test_tool_calls_are_trained_and_tool_results_are_not(tmp_path: Path) -> None:
    rows = tool_rows(ROWS)
    split = _split(write_jsonl(tmp_path / "tools.jsonl", rows))
    tokenizer = load_tokenizer(make_spec(CHAT))
    assert split.loss_mask is not None and len(split) == ROWS
    for i, row in enumerate(rows):
        ids, mask = reference(tokenizer, row)
        assert [int(t) for t in split.input_ids[i]] == ids
        assert [int(m) for m in split.loss_mask[i]] == mask
        assert split.items[i] == sum(mask[1:])
        trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        context = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
        if "tools" in row:
            calls = [c for m in row["messages"] for c in m.get("tool_calls") or []]
            assert trained.count("<tool_call>") == len(calls)
            for c in calls:
                assert json.loads(c["function"]["arguments"])["city"] in trained
            assert "get_weather" in context  # the tools: context, not trained
            results = [m["content"] for m in row["messages"] if m["role"] == "tool"]
            assert all(r in context and r not in trained for r in results)


def test_a_template_that_ignores_tools_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "tools.jsonl", tool_rows(3))
    with pytest.raises(DatasetError, match="does not render the row's `tools`") as caught:
        _split(path, chat_template=BEFORE_TOOLS.replace("content']", "content'] or ''"))
    assert caught.value.param == "chat_template"
    assert "row 1" in str(caught.value)


def test_a_template_that_drops_tool_calls_is_refused(tmp_path: Path) -> None:
    """Tools rendered, so that check passes; the calls are not: named by message and call."""
    rows = [tool_row(3)]  # content beside its calls: renders, but without them
    with pytest.raises(DatasetError, match=r"messages\[2\]") as caught:
        _split(write_jsonl(tmp_path / "a.jsonl", rows),
               chat_template=TOOLS_ONLY.replace("content']", "content'] or ''"))  # fmt: skip
    assert caught.value.param == "chat_template"
    assert "tool_calls" in str(caught.value)
    with pytest.raises(DatasetError, match="fails on this row's function calling") as failed:
        _split(write_jsonl(tmp_path / "b.jsonl", [tool_row(1)]), chat_template=TOOLS_ONLY)
    assert failed.value.param == "chat_template"


def test_a_bad_row_is_named_by_line_and_field(tmp_path: Path) -> None:
    rows = tool_rows(4)
    rows[2]["messages"][-2]["tool_call_id"] = "call_nobody_made"
    with pytest.raises(DatasetError, match="no earlier assistant tool call") as caught:
        _split(write_jsonl(tmp_path / "bad.jsonl", rows))
    assert "row 3: messages[2].tool_call_id" in str(caught.value)  # no system message
    assert caught.value.param == "messages_column"


def test_tools_whose_schemas_differ_in_kind_render_as_given(tmp_path: Path) -> None:
    """``datasets`` stores such tools as JSON text (no one Arrow type holds both); decoded,
    each row's tools reach the template as the row gave them."""
    rows = tool_rows(2)
    for row, default in zip(rows, (3, "c"), strict=True):
        row["tools"] = json.loads(json.dumps(row["tools"]))
        row["tools"][0]["function"]["parameters"]["properties"]["unit"] = {"default": default}
    split = _split(write_jsonl(tmp_path / "mixed.jsonl", rows))
    tokenizer = load_tokenizer(make_spec(CHAT))
    for i, row in enumerate(rows):
        assert [int(t) for t in split.input_ids[i]] == reference(tokenizer, row)[0]
    assert '"default": 3' in tokenizer.decode(split.input_ids[0])
