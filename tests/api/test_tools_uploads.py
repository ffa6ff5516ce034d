"""Function-calling files where they arrive (issue 31): OpenAI's rows (line-level ``tools`` and
``parallel_tool_calls``, assistant ``tool_calls``, ``tool`` messages) upload as a fine-tune file
and a job takes them; a wrong row is refused line by line naming its field (400 through the SDK,
422 on /v1/files); a chat template that never reads tools is refused at POST naming ``tools``
(400 on /v1/fine_tuning/jobs, 422 on /v1/jobs), not dropped without a word."""

from __future__ import annotations

import copy
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from tests.api.test_chat_data import CHAT_JOB, jsonl, upload
from tests.api.test_files import _leftovers
from tests.tools_rows import tool_row, tool_rows

# Reads messages and never tools or tool_calls: it would train the rows as if they had none.
BLIND = (
    "{% for message in messages %}{{ message['role'] + ': ' + (message['content'] or '') }}"
    "{% generation %}{{ '.' }}{% endgeneration %}{% endfor %}"
)


@pytest.fixture
def sdk(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0
    )


def _mixed_schemas() -> list[dict[str, Any]]:
    """Two rows whose tools' schemas differ in kind (a default that is a number, then text):
    no one Arrow type holds both, and the rows are still good."""
    rows = tool_rows(2)
    for row, default in zip(rows, (3, "c"), strict=True):
        row["tools"] = copy.deepcopy(row["tools"])
        props = row["tools"][0]["function"]["parameters"]["properties"]
        props["unit"] = {"type": "string", "default": default}
    return rows


def test_a_function_calling_file_uploads_and_trains(sdk: openai.OpenAI, client: TestClient) -> None:
    file = sdk.files.create(file=("tools.jsonl", jsonl(tool_rows(10))), purpose="fine-tune")
    details = client.get(f"/v1/files/{file.id}").json()["details"]
    assert details["function_calling"] == ["tool_calls", "tools"]
    assert details["dataset_format"] == "messages"
    assert "tools" in details["columns"] and "parallel_tool_calls" in details["columns"]
    job = sdk.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id)
    assert job.status == "queued"
    chatml = client.post("/v1/jobs", json={**CHAT_JOB, "model": "builtin:tiny-gpt2",
                                          "dataset": file.id, "chat_template": "chatml"})  # fmt: skip
    assert chatml.status_code == 201, chatml.text
    # pyarrow cannot type these rows as one table; they are good rows, and the core reads them.
    mixed = sdk.files.create(file=("mixed.jsonl", jsonl(_mixed_schemas())), purpose="fine-tune")
    details = client.get(f"/v1/files/{mixed.id}").json()["details"]
    assert details["rows"] == 2 and details["function_calling"] == ["tool_calls", "tools"]
    assert details["columns"] == ["messages", "tools", "parallel_tool_calls"]
    mixed_job = client.post("/v1/jobs", json={**CHAT_JOB, "dataset": mixed.id})
    assert mixed_job.status_code == 201, mixed_job.text


def test_a_file_of_plain_chat_records_no_function_calling(client: TestClient) -> None:
    plain = [r for r in tool_rows(10) if "tools" not in r]
    details = upload(client, "plain.jsonl", jsonl(plain)).json()["details"]
    assert "function_calling" not in details


def _bad_rows() -> list[dict[str, Any]]:
    rows = [copy.deepcopy(tool_row(i)) for i in range(5)]
    rows[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"city": "Rome"}
    rows[2]["messages"][2]["tool_call_id"] = "call_nobody_made"
    rows[3]["parallel_tool_calls"] = False  # row 3 makes two calls in one message
    rows[4]["tools"][0]["type"] = "retrieval"
    return [tool_row(0), *rows[1:]]


REFUSED = [
    "line 2: messages[1].tool_calls[0].function.arguments: must be a JSON string of an object, "
    """like '{"city": "Paris"}' (got {'city': 'Rome'})""",
    "line 3: messages[2].tool_call_id: no earlier assistant tool call has id 'call_nobody_made'",
    "line 4: messages[2].tool_calls: 2 calls in one message, but parallel_tool_calls is false "
    "(one call a message)",
    "line 5: tools[0].type: 'function' (got 'retrieval')",
]


def test_wrong_rows_are_refused_by_line_and_field(sdk: openai.OpenAI, client: TestClient) -> None:
    before = _leftovers(client)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.files.create(file=("bad.jsonl", jsonl(_bad_rows())), purpose="fine-tune")
    assert refused.value.param == "file"
    said = "file: 4 problems in this messages file: " + "; ".join(REFUSED)
    assert refused.value.message.endswith(f" - {said}")  # the SDK puts "Error code: 400" first
    answer = upload(client, "bad.jsonl", jsonl(_bad_rows()))
    assert answer.status_code == 422, answer.text
    assert [e["message"] for e in answer.json()["error"]["errors"]] == REFUSED
    assert _leftovers(client) == before


def test_a_template_that_never_reads_tools_is_refused_at_post(
    sdk: openai.OpenAI, client: TestClient
) -> None:
    file = sdk.files.create(file=("tools.jsonl", jsonl(tool_rows(5))), purpose="fine-tune")
    answer = client.post("/v1/jobs", json={**CHAT_JOB, "dataset": file.id, "chat_template": BLIND})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["param"] == "tools"
    assert error["message"] == (
        f"tools: {file.id}: the chat template never reads `tools`: the file's tools would not be "
        "rendered; give chat_template 'chatml' or a template that renders tools"
    )
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=file.id,
                                    extra_body={"gradacc": {"chat_template": BLIND}})  # fmt: skip
    assert refused.value.param == "tools"
    assert "never reads `tools`" in refused.value.message
    calls_only = [{**r, "tools": None} for r in tool_rows(5) if "tools" in r]
    calls = upload(client, "calls.jsonl", jsonl([{k: v for k, v in r.items() if k != "tools"}
                                                 for r in calls_only])).json()  # fmt: skip
    assert calls["details"]["function_calling"] == ["tool_calls"]
    reads_tools = "{{ tools | tojson }}" + BLIND
    answer = client.post("/v1/jobs", json={**CHAT_JOB, "dataset": calls["id"],
                                           "chat_template": reads_tools})  # fmt: skip
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["param"] == "tools"
    assert "never reads a message's `tool_calls`" in answer.json()["error"]["message"]
    assert client.get("/v1/jobs").json()["data"] == []  # no half-made job
