"""The OpenAPI document describes every operation and states each rule a schema can state, so
that a schema-valid request is refused only for what no schema can say (a file's contents, live
workers, one field against another's value)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs  # schemathesis's own validator
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.settings import Settings
from trainer_core.spec.fields import BUILTIN_MODEL_TASKS


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The document as served (built once: it reads no database)."""
    settings = Settings(home=tmp_path_factory.mktemp("home"))
    with TestClient(create_app(settings)) as client:
        return client.get("/openapi.json").json()  # type: ignore[no-any-return]


def test_every_operation_has_a_description(document: dict[str, Any]) -> None:
    missing = [
        f"{method.upper()} {path}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if not operation.get("description")
    ]
    assert missing == []


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    """A component schema with its references resolvable (jsonschema's registry-free way)."""
    return {**document["components"]["schemas"][name], "components": document["components"]}


def _valid(document: dict[str, Any], name: str, body: dict[str, Any]) -> bool:
    return bool(jsonschema_rs.Draft202012Validator(_schema(document, name)).is_valid(body))


@pytest.mark.parametrize("column", ["messages_column", "prompt_column", "completion_column"])
def test_column_names_carry_their_pattern(
    client: TestClient, document: dict[str, Any], column: str
) -> None:
    body = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic",
            "task": "causal-lm", column: "a/b"}  # fmt: skip
    assert not _valid(document, "JobCreate", body)
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422 and column in response.text


def test_the_method_types_are_the_ones_trained(
    client: TestClient, document: dict[str, Any]
) -> None:
    method = document["components"]["schemas"]["Method"]["properties"]["type"]
    assert method["enum"] == ["supervised", "dpo", "reinforcement"]
    body = {"model": "builtin:tiny-chat", "training_file": "file-x", "method": {"type": "ppo"}}
    response = client.post("/v1/fine_tuning/jobs", json=body)
    assert response.status_code == 400 and "'dpo' or 'reinforcement'" in response.text


@pytest.mark.parametrize(
    ("body", "one"),
    [
        ({"inputs": ["a"]}, True),
        ({"prompt": "a"}, True),
        ({"inputs": None, "prompt": "a"}, True),
        ({"inputs": ["a"], "prompt": "a"}, False),
        ({}, False),
        ({"max_new_tokens": 4}, False),
    ],
)
def test_predict_takes_exactly_one_input(
    document: dict[str, Any], body: dict[str, Any], one: bool
) -> None:
    assert _valid(document, "PredictRequest", body) is one


@pytest.mark.parametrize(
    ("model", "task"),
    [(model, task) for model, tasks in BUILTIN_MODEL_TASKS.items() for task in tasks],
)
def test_the_task_rule_follows_the_builtin_models(
    document: dict[str, Any], model: str, task: str
) -> None:
    dataset = "builtin:chat-arithmetic" if task == "causal-lm" else "builtin:sentiment"
    body = {"model": model, "dataset": dataset, "task": task}
    assert _valid(document, "JobCreate", body)
    other = "causal-lm" if task == "sequence-classification" else "sequence-classification"
    if other not in BUILTIN_MODEL_TASKS[model]:
        dataset = "builtin:chat-arithmetic" if other == "causal-lm" else "builtin:sentiment"
        assert not _valid(document, "JobCreate", {**body, "task": other, "dataset": dataset})


def test_every_json_body_documents_what_happens_before_the_route(
    client: TestClient, document: dict[str, Any]
) -> None:
    """400 (undecodable), 413 (over the body limit) and 415 (not JSON) are answered before any
    route runs, so every operation with a JSON body lists them; the fuzzer once found a preview
    answered 400 that its operation did not document."""
    missing = [
        f"{method.upper()} {path} {code}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
        for code in ("400", "413", "415")
        if code not in operation["responses"]
    ]
    assert missing == []
    undecodable = b"\xff^\x1e"  # not UTF-8: FastAPI answers 400, not a JSON error
    headers = {"content-type": "application/json"}
    response = client.post("/v1/files/file-x/preview", content=undecodable, headers=headers)
    assert response.status_code == 400
