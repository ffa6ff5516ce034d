"""What a user coming from OpenAI reads when a request is wrong (issue 31): a hyperparameter out
of range names its field and states its bound (not a branch of the schema's union); a file's
lines are counted from 1 in every refusal, problems are counted in good English and the ones not
listed are counted right; a ``fine-tune`` file is JSONL, as OpenAI's."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from api.errors import _param_of
from tests.api.test_chat_data import GOOD, jsonl, upload


@pytest.fixture
def sdk(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0
    )


def _refusal(sdk: openai.OpenAI, **body: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file="file-x", **body)
    return refused.value


BOUNDS = [
    ("n_epochs", 0, "n_epochs must be 'auto' or an integer from 1 to 50 (got 0)"),
    ("n_epochs", 51, "n_epochs must be 'auto' or an integer from 1 to 50 (got 51)"),
    ("batch_size", 0, "batch_size must be 'auto' or an integer from 1 to 256 (got 0)"),
    ("batch_size", 257, "batch_size must be 'auto' or an integer from 1 to 256 (got 257)"),
    ("batch_size", "big", "batch_size must be 'auto' or an integer from 1 to 256 (got 'big')"),
    (
        "learning_rate_multiplier",
        0,
        "learning_rate_multiplier must be 'auto' or a number above 0 and at most 10 (got 0)",
    ),
    (
        "learning_rate_multiplier",
        10.5,
        "learning_rate_multiplier must be 'auto' or a number above 0 and at most 10 (got 10.5)",
    ),
]


@pytest.mark.parametrize(("field", "value", "said"), BOUNDS)
def test_an_out_of_range_hyperparameter_names_its_field_and_bound(
    sdk: openai.OpenAI, field: str, value: object, said: str
) -> None:
    method = {"type": "supervised", "supervised": {"hyperparameters": {field: value}}}
    for body, param in (
        ({"method": method}, f"method.supervised.hyperparameters.{field}"),
        ({"hyperparameters": {field: value}}, f"hyperparameters.{field}"),
    ):
        error = _refusal(sdk, **body)
        assert error.param == param, error.body
        assert isinstance(error.body, dict)
        assert error.body["message"] == f"{param}: {said}"
        assert error.body["errors"] == [{"param": param, "message": said}]  # one, not a branch each


def test_every_wrong_hyperparameter_is_listed_once_by_its_own_name(sdk: openai.OpenAI) -> None:
    wrong = {"n_epochs": 99, "batch_size": 0, "learning_rate_multiplier": -1}
    error = _refusal(sdk, hyperparameters=wrong)
    assert isinstance(error.body, dict)
    listed = {e["param"]: e["message"] for e in error.body["errors"]}
    assert listed == {
        "hyperparameters.n_epochs": "n_epochs must be 'auto' or an integer from 1 to 50 (got 99)",
        "hyperparameters.batch_size": (
            "batch_size must be 'auto' or an integer from 1 to 256 (got 0)"
        ),
        "hyperparameters.learning_rate_multiplier": (
            "learning_rate_multiplier must be 'auto' or a number above 0 and at most 10 (got -1)"
        ),
    }


def test_a_line_that_is_not_json_is_named_by_its_line_from_one(client: TestClient) -> None:
    rows = jsonl(GOOD[:2])  # lines 1 and 2
    for name, data, line in (
        ("a.jsonl", rows + b'{"messages": [\n', 3),
        ("b.jsonl", rows + b"\n\n" + rows + b"not json\n", 7),  # blank lines are lines too
        ("c.json", rows + b"{oops}\n" + rows, 3),  # JSON lines under a .json name
        ("d.jsonl", jsonl(GOOD[:1] * 5000) + b"[1,\n", 5001),  # past pyarrow's first block
    ):
        answer = upload(client, name, data)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["param"] == "file"
        assert f"line {line} is not valid JSON (at column " in error["message"], error["message"]
        assert "row" not in error["message"]


def test_one_problem_is_one_problem(client: TestClient) -> None:
    error = upload(client, "one.jsonl", jsonl([GOOD[0], {"messages": []}])).json()["error"]
    assert error["message"] == (
        "file: 1 problem in this messages file: line 2: messages: a non-empty list of messages"
    )
    two = upload(client, "two.jsonl", jsonl([{"messages": []}] * 2)).json()["error"]
    assert two["message"].startswith("file: 2 problems in this messages file: line 1: ")


def test_the_problems_not_listed_are_counted_right(client: TestClient) -> None:
    rows = [{"messages": []}] * 30 + [GOOD[0]] + [{"prompt": 1, "completion": "a"}] * 3
    error = upload(client, "many.jsonl", jsonl(rows[:30])).json()["error"]
    listed = error["errors"]
    assert len(listed) == 20 and listed[0]["message"].startswith("line 1: ")
    assert listed[-1]["message"].startswith("line 20: ")
    assert error["message"].startswith("file: 30 problems in this messages file: line 1: ")
    assert error["message"].endswith("; and 10 more not listed")  # 20 listed + 10 = 30
    assert "(and" not in error["message"]
    exactly = upload(client, "twenty.jsonl", jsonl(rows[:20])).json()["error"]
    assert "20 problems" in exactly["message"] and "more" not in exactly["message"]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("train.csv", b"prompt,completion\nq,a\n"),
        ("train.json", b'[{"prompt": "q", "completion": "a"}]'),
        ("train", b'{"prompt": "q", "completion": "a"}\n'),
    ],
)
def test_a_fine_tune_file_is_jsonl(
    sdk: openai.OpenAI, client: TestClient, name: str, data: bytes
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.files.create(file=(name, data), purpose="fine-tune")
    assert refused.value.param == "file"
    assert "a fine-tune file is JSONL" in refused.value.message
    assert "purpose=dataset" in refused.value.message
    assert sdk.files.list(purpose="fine-tune").data == []
    if name != "train":  # gradacc's own purpose keeps the other formats
        kept = client.post("/v1/files", files={"file": (name, data)}, data={"purpose": "dataset"})
        assert kept.status_code == 201, kept.text
    jsonl_file = sdk.files.create(file=("train.jsonl", jsonl(GOOD)), purpose="fine-tune")
    assert jsonl_file.purpose == "fine-tune"


def _labelled(n: int, label: object) -> bytes:
    row = json.dumps({"text": "x" * 100, "label": label}).encode() + b"\n"
    return row * n


def test_a_label_that_changes_kind_is_named_by_its_line(client: TestClient) -> None:
    for data, line in (
        (_labelled(5000, 1) + _labelled(1, "pos"), 5001),  # pyarrow said "row 807": its block's
        (_labelled(1, 1) + b"\n" + _labelled(1, "pos"), 3),  # a blank line is a line
    ):
        error = upload(client, "mixed.jsonl", data).json()["error"]
        assert error["param"] == "file"
        assert error["message"].startswith(f"file: line {line} of column 'label' mixes string")
    for data, line, what in (
        (_labelled(2, "pos") + b"\n\n" + _labelled(1, ""), 5, "is empty"),
        (_labelled(1, "1") + b"\n" + _labelled(1, "pos"), 3, "mixes text into numbers"),
    ):
        error = upload(client, "labels.jsonl", data).json()["error"]
        assert error["message"] == f"file: line {line} of column 'label' {what}" + (
            " labels: use one or the other" if "mixes" in what else ""
        )


def test_a_union_branch_is_never_part_of_a_param() -> None:
    """Any other union a schema grows is named by its field, not by pydantic's branch tag."""
    assert _param_of(("body", "a", "b", "literal['auto']")) == "a.b"
    assert _param_of(("body", "a", "constrained-int")) == "a"
    assert _param_of(("body", "a", "function-after[_check(), int]", "x")) == "a.x"
    assert _param_of(("body", "metadata", "team")) == "metadata.team"
