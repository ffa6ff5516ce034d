"""Chat and instruction data checked where it arrives (both databases): an upload in the messages
or prompt-completion shape is read line by line and refused with its problems listed (nothing
kept); a job naming an uploaded file is checked against the columns recorded at upload; empty or
mixed labels are refused naming the row; a messages job needs a chat template."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from tests.api.test_files import _leftovers

GOOD = [
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "2 plus 2?"},
                  {"role": "assistant", "content": "4.", "weight": 0},
                  {"role": "user", "content": "and plus 1?"},
                  {"role": "assistant", "content": "5."}]},
    {"messages": [{"role": "user", "content": "1 plus 1?"},
                  {"role": "assistant", "content": "2."}]},
]  # fmt: skip
CHAT_JOB = {"model": "builtin:tiny-chat", "task": "causal-lm", "num_train_epochs": 1}


def jsonl(rows: list[Any]) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def upload(client: TestClient, name: str, data: bytes) -> Any:
    return client.post("/v1/files", files={"file": (name, data)})


def test_a_chat_file_records_its_format_and_a_job_on_it_says_so(client: TestClient) -> None:
    answer = upload(client, "chat.jsonl", jsonl(GOOD * 10))
    assert answer.status_code == 201, answer.text
    file = answer.json()
    assert file["details"]["dataset_format"] == "messages" and file["details"]["rows"] == 20
    job = client.post("/v1/jobs", json={**CHAT_JOB, "dataset": file["id"]})
    assert job.status_code == 201, job.text
    assert job.json()["dataset_format"] == "messages"
    pc = upload(client, "pc.jsonl", jsonl([{"prompt": "Q", "completion": " A"}] * 4)).json()
    assert pc["details"]["dataset_format"] == "prompt-completion"


def test_a_bad_chat_file_lists_its_problems_by_line_and_keeps_nothing(client: TestClient) -> None:
    before = _leftovers(client)
    bad = [
        GOOD[0],
        ["not", "an", "object"],
        {"messages": []},
        {"messages": [{"role": "robot", "content": "hi"}, {"role": "assistant", "content": "x"}]},
        {"messages": [{"role": "user", "content": 7}, {"role": "assistant", "content": "x"}]},
        {
            "messages": [
                {"role": "user", "content": "q", "weight": 1},
                {"role": "assistant", "content": "a", "weight": 2},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "weight": 0},
            ]
        },
    ]
    answer = upload(client, "bad.jsonl", jsonl(bad))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["param"] == "file"
    listed = [e["message"] for e in error["errors"]]
    assert listed == [
        "line 2: messages: a non-empty list of messages",
        "line 3: messages: a non-empty list of messages",
        "line 4: messages[0].role: one of system, developer, user, assistant, tool (got 'robot')",
        "line 5: messages[0].content: a string",
        "line 6: messages[0].weight: only assistant messages carry a weight",
        "line 6: messages[1].weight: 0 or 1 (got 2)",
        "line 7: messages: at least one assistant message to train (weight not 0)",
    ], listed
    assert _leftovers(client) == before
    assert all(f["filename"] != "bad.jsonl" for f in client.get("/v1/files").json()["data"])


def test_at_most_twenty_problems_are_listed(client: TestClient) -> None:
    answer = upload(client, "many.jsonl", jsonl([{"messages": []}] * 30))
    error = answer.json()["error"]
    assert answer.status_code == 422 and len(error["errors"]) == 20
    assert "30 problems" in error["message"]
    assert error["message"].endswith("; and 10 more not listed")


def test_empty_and_mixed_labels_are_refused_naming_the_row(client: TestClient) -> None:
    empty = upload(client, "e.csv", b"text,label\na,pos\nb,\nc,neg\n")
    assert empty.status_code == 422 and "row 2 of column 'label' is empty" in empty.text
    mixed = upload(client, "m.csv", b"text,label\na,1\nb,2\nc,pos\nd,1\n")
    assert (
        mixed.status_code == 422 and "row 3 of column 'label' mixes text into numbers" in mixed.text
    )
    lines = upload(client, "m.jsonl", b'{"text": "a", "label": 1}\n{"text": "b", "label": "x"}\n')
    assert lines.status_code == 422 and "line 2 of column 'label' mixes" in lines.text
    # Another label column is read when a job names it.
    ok = upload(client, "other.csv", b"text,label,grade\na,x,1\nb,y,\nc,x,2\n").json()
    refused = client.post("/v1/jobs", json={"model": "builtin:tiny-bert", "dataset": ok["id"],
                                            "label_column": "grade"})  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["param"] == "label_column"
    assert "row 2 of column 'grade' is empty" in refused.json()["error"]["message"]


def test_a_job_is_checked_against_the_columns_recorded_at_upload(client: TestClient) -> None:
    text_file = upload(client, "t.csv", b"review,label\nnice,1\nbad,0\n").json()
    wrong = client.post("/v1/jobs", json={"model": "builtin:tiny-bert", "dataset": text_file["id"]})
    error = wrong.json()["error"]
    assert wrong.status_code == 422 and error["param"] == "text_column"
    assert "'text'" in error["message"] and "review, label" in error["message"]
    chat = upload(client, "c.jsonl", jsonl(GOOD)).json()
    misnamed = client.post("/v1/jobs", json={**CHAT_JOB, "dataset": chat["id"],
                                             "dataset_format": "prompt-completion"})  # fmt: skip
    assert misnamed.status_code == 422 and misnamed.json()["error"]["param"] == "prompt_column"


def test_a_messages_job_needs_a_chat_template(client: TestClient) -> None:
    chat = upload(client, "c.jsonl", jsonl(GOOD)).json()
    plain = {**CHAT_JOB, "model": "builtin:tiny-gpt2", "dataset": chat["id"]}
    refused = client.post("/v1/jobs", json=plain)
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "chat_template"
    assert "'chatml'" in refused.json()["error"]["message"]
    assert client.post("/v1/jobs", json={**plain, "chat_template": "chatml"}).status_code == 201
    builtin = client.post("/v1/jobs", json={**plain, "dataset": "builtin:chat-arithmetic"})
    assert builtin.status_code == 422 and builtin.json()["error"]["param"] == "chat_template"
