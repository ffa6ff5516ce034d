"""POST /v1/files/import in-process on both databases: a 100-record stored-completions export,
built with the ``openai`` SDK's own types, becomes a fine-tune file of its 99 good records with the
bad one named by line; all-or-nothing and nothing-usable are 400s naming the lines and keep
nothing; the file is an upload like any (listed, its bytes what it trains). The training itself:
tests/e2e/test_file_import_training.py."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from api.services.files import upload_folder
from tests.stored_completions import MODEL, expected_row, export

TRUNCATED = 37  # the bad record's line: an answer cut at max_tokens


def _import(client: TestClient, data: bytes, name: str = "export.jsonl", **fields: str) -> Any:
    return client.post("/v1/files/import", files={"file": (name, data)}, data=fields)


def _nothing_kept(client: TestClient) -> bool:
    settings = client.app.state.settings  # type: ignore[attr-defined]
    leftovers = [p for p in upload_folder(settings).glob("*")]
    return client.get("/v1/files").json()["data"] == [] and leftovers == []


def test_an_export_of_100_records_imports_with_the_bad_one_named(client: TestClient) -> None:
    answer = _import(client, export(100, truncated=TRUNCATED))
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["object"] == "file" and body["purpose"] == "fine-tune"
    assert body["filename"] == "export.jsonl" and body["id"].startswith("file-")
    assert body["refused_rows"] == 1
    ((refused,),) = [body["refused"]]
    assert refused["line"] == TRUNCATED and "finish_reason 'length'" in refused["reason"]
    details = body["details"]
    assert details["rows"] == 99 and details["dataset_format"] == "messages"
    assert details["function_calling"] == ["tool_calls", "tools"]
    assert details["import"] | {"source": None} == {
        "format": "auto", "lines": 100, "rows": 99, "kind": "messages",
        "forms": {"stored-completions": 99}, "models": {MODEL: 99}, "refused_rows": 1,
        "refused": body["refused"], "source": None,
    }  # fmt: skip
    assert details["import"]["source"]["filename"] == "export.jsonl"
    content = client.get(f"/v1/files/{body['id']}/content").content
    assert [json.loads(line) for line in content.splitlines()] == [
        expected_row(i) for i in range(100) if i + 1 != TRUNCATED
    ]
    assert body["bytes"] == len(content)
    stored = client.get(f"/v1/files/{body['id']}").json()
    assert stored == {k: v for k, v in body.items() if k not in ("refused", "refused_rows")}
    assert [f["id"] for f in client.get("/v1/files?purpose=fine-tune").json()["data"]] == [
        body["id"]
    ]


def test_bad_rows_refuse_keeps_nothing_and_names_the_line(client: TestClient) -> None:
    answer = _import(client, export(100, truncated=TRUNCATED), bad_rows="refuse")
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "file"
    assert error["message"].startswith(
        f"file: 1 of 100 rows refused, and bad_rows is refuse: line {TRUNCATED}: choices[0]"
    )
    assert [e["message"].split(":")[0] for e in error["errors"]] == [f"line {TRUNCATED}"]
    assert _nothing_kept(client)


def test_no_usable_row_is_a_400_listing_the_lines(client: TestClient) -> None:
    data = b'{"messages": []}\n\n{"prompt": 1, "completion": "x"}\nnot json\n'
    error = _import(client, data).json()["error"]
    assert error["message"].startswith("file: no row of this file can be imported (3 lines read)")
    assert [e["message"] for e in error["errors"]] == [
        "line 1: messages: a non-empty list of messages",
        "line 3: prompt: a string",
        "line 4: not valid JSON (at column 1: Expecting value)",
    ]
    assert _import(client, b"").json()["error"]["message"].endswith("the file is empty")
    assert _nothing_kept(client)


def test_the_fields_are_checked(client: TestClient) -> None:
    data = export(2)
    wrong_format = _import(client, data, format="csv").json()["error"]
    assert (
        wrong_format["param"] == "format" and "'csv' is not one of auto" in wrong_format["message"]
    )
    wrong_mode = _import(client, data, bad_rows="maybe").json()["error"]
    assert wrong_mode["param"] == "bad_rows"
    unknown = _import(client, data, purpose="fine-tune")
    assert unknown.status_code == 400
    assert "send 'file', 'format' and 'bad_rows' only" in unknown.json()["error"]["message"]
    array = _import(client, json.dumps([json.loads(line) for line in data.splitlines()]).encode())
    assert "JSON array" in array.json()["error"]["message"]
    assert _nothing_kept(client)


def test_text_rows_are_a_dataset_file(client: TestClient) -> None:
    """OpenAI's fine-tune files have no text rows: Together's are kept as a dataset, which
    /v1/jobs and /v1/fine_tuning/jobs both train (every token)."""
    body = _import(client, b'{"text": "one two"}\n{"text": "three"}\n', "corpus.txt").json()
    assert body["purpose"] == "dataset" and body["filename"] == "corpus.jsonl"
    assert body["details"]["dataset_format"] == "text" and body["details"]["rows"] == 2


def test_the_route_is_documented(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/files/import"]["post"]
    schema = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["properties"]["format"]["enum"] == ["auto", "stored-completions", "openai", "together"]  # fmt: skip
    assert "201" in operation["responses"] and "400" in operation["responses"]


def test_fine_tuning_files_import_as_they_are(client: TestClient) -> None:
    """OpenAI's preference and legacy rows, and Together's weighted chat, stored and checked as
    any fine-tune upload (``details.dataset_format`` is what a job will read)."""
    user, answer = {"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4."}
    files = {
        "preference": {"input": {"messages": [user]}, "preferred_output": [answer],
                       "non_preferred_output": [{"role": "assistant", "content": "5."}]},
        "prompt-completion": {"prompt": "2 + 2 =", "completion": " 4"},
        "messages": {"messages": [{**user, "weight": 0}, {**answer, "weight": 1}]},
    }  # fmt: skip
    for kind, row in files.items():
        body = _import(client, (json.dumps(row) + "\n").encode() * 3, f"{kind}.jsonl").json()
        assert body["purpose"] == "fine-tune", body
        assert (body["details"]["dataset_format"], body["details"]["rows"]) == (kind, 3)
