"""Preference pairs where they arrive (both databases, no worker): OpenAI's and TRL's rows are
recorded as preference data, a malformed pair file is refused line by line naming the field (400
for a fine-tune upload, 422 for a dataset), and a job's method must fit its data (a dpo job on a
chat file, a supervised one on pairs: refused naming the data's field, nothing made)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from gradacc.db import session_scope
from gradacc.tables import File
from tests.api.test_chat_data import GOOD, jsonl, upload
from tests.api.test_files import _leftovers

OPENAI_PAIR: dict[str, Any] = {
    "input": {"messages": [{"role": "user", "content": "what is 2 plus 2?"}]},
    "preferred_output": [{"role": "assistant", "content": "2 plus 2 is 4."}],
    "non_preferred_output": [{"role": "assistant", "content": "2 plus 2 is 5."}],
}
TRL_PAIR = {"prompt": "2 plus 2 is", "chosen": " 4.", "rejected": " 5."}
DPO_JOB = {"model": "builtin:tiny-chat", "task": "causal-lm", "num_train_epochs": 1,
           "method": "dpo"}  # fmt: skip


def _file(client: TestClient, rows: list[Any], purpose: str = "fine-tune") -> Any:
    data = jsonl(rows)
    answer = client.post("/v1/files", files={"file": ("pairs.jsonl", data)},
                         data={"purpose": purpose})  # fmt: skip
    return answer


@pytest.mark.parametrize("row", [OPENAI_PAIR, TRL_PAIR], ids=["openai", "trl"])
def test_pairs_are_recorded_as_preference_data(client: TestClient, row: dict[str, Any]) -> None:
    answer = _file(client, [row] * 6)
    assert answer.status_code == 201, answer.text
    details = answer.json()["details"]
    assert details["dataset_format"] == "preference" and details["rows"] == 6
    job = client.post("/v1/jobs", json={**DPO_JOB, "dataset": answer.json()["id"]})
    assert job.status_code == 201, job.text
    assert job.json()["spec"]["method"] == "dpo"


BAD_PAIRS = [
    OPENAI_PAIR,
    {**OPENAI_PAIR, "preferred_output": [{"role": "user", "content": "2 plus 2 is 4."}]},
    {**OPENAI_PAIR, "non_preferred_output": [OPENAI_PAIR["non_preferred_output"][0]] * 2},
    {**OPENAI_PAIR, "input": {"messages": []}},
]
LISTED = [
    "line 2: preferred_output[0].role: must be 'assistant' (got 'user')",
    "line 3: non_preferred_output: one assistant message (a list of one), or a string",
    "line 4: input.messages: a non-empty list of messages",
]


@pytest.mark.parametrize(("purpose", "status"), [("fine-tune", 400), ("dataset", 422)])
def test_a_malformed_pair_file_names_each_line_and_field(
    client: TestClient, purpose: str, status: int
) -> None:
    before = _leftovers(client)
    answer = _file(client, BAD_PAIRS, purpose)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == "file"
    assert [e["message"] for e in error["errors"]] == LISTED
    assert error["message"].startswith("file: 3 problems in this preference file: line 2: ")
    assert _leftovers(client) == before  # nothing kept


def test_a_job_whose_method_does_not_fit_its_data_is_refused(client: TestClient) -> None:
    chat = upload(client, "chat.jsonl", jsonl(GOOD * 3)).json()["id"]
    pairs = _file(client, [OPENAI_PAIR] * 3).json()["id"]
    jobs_before = client.get("/v1/jobs").json()["data"]
    # An uploaded file's format is known from its columns at upload (the data's field is named);
    # a built-in's is known to the spec itself (its own check names the method).
    cases = [
        ({**DPO_JOB, "dataset": chat}, "dataset", "method dpo trains preference pairs"),
        ({**DPO_JOB, "method": "sft", "dataset": pairs}, "dataset", "train it with method dpo"),
        ({**DPO_JOB, "method": "sft", "dataset": "builtin:preference-arithmetic"}, "method",
         "preference data trains with method 'dpo'"),
    ]  # fmt: skip
    for body, param, said in cases:
        answer = client.post("/v1/jobs", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"]["param"] == param, answer.text
        assert said in answer.json()["error"]["message"]
    assert client.get("/v1/jobs").json()["data"] == jobs_before
    builtin = client.post("/v1/jobs", json={**DPO_JOB, "dataset": "builtin:preference-arithmetic"})
    assert builtin.status_code == 201, builtin.text


ONE_SIDED = [
    ({k: v for k, v in OPENAI_PAIR.items() if k != "non_preferred_output"}, "non_preferred_output"),
    ({k: v for k, v in TRL_PAIR.items() if k != "rejected"}, "rejected"),
]


@pytest.mark.parametrize(("row", "missing"), ONE_SIDED, ids=["openai", "trl"])
@pytest.mark.parametrize(("purpose", "status"), [("fine-tune", 400), ("dataset", 422)])
def test_a_pair_file_without_its_rejected_side_is_refused_naming_it(
    client: TestClient, row: dict[str, Any], missing: str, purpose: str, status: int
) -> None:
    """Pairs missing a side on every line were kept as a text file, and a dpo job on it said
    "text_column: column 'text' is not in file-…". Now the upload names the missing field."""
    before = _leftovers(client)
    answer = _file(client, [row] * 4, purpose)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == "file" and f"no row has {missing}" in error["message"], error
    assert "preference rows need" in error["message"]
    assert _leftovers(client) == before


def test_a_job_on_an_older_one_sided_pair_file_names_the_preference_fields(
    client: TestClient,
) -> None:
    """A file recorded before such files were refused (its columns as the upload found them):
    a dpo job on it names what the pairs lack, not a text column."""
    kept = _file(client, [OPENAI_PAIR] * 4).json()["id"]
    app: Any = client.app
    with session_scope(app.state.settings) as session:  # as recorded back then
        file = session.get_one(File, kept)
        file.details = {**file.details, "columns": ["input", "preferred_output"],
                        "dataset_format": None}  # fmt: skip
        session.commit()
    answer = client.post("/v1/jobs", json={**DPO_JOB, "dataset": kept})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["param"] == "dataset" and "no row has non_preferred_output" in error["message"]
