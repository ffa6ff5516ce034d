"""Malformed and hostile requests to POST /v1/jobs: each is a 4xx in the one error shape, naming
the field where there is one, and leaves no job row and no queued task (both databases)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.main import create_app
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from tests.api.test_jobs import TINY

MB = 1_000_000
JSON_TYPE = {"content-type": "application/json"}

# Every error body; a validation error adds "errors" (each field at fault).
SHAPE = {"code", "message", "param", "type"}


def body(**changes: Any) -> bytes:
    spec = {**TINY, **changes}
    return json.dumps({k: v for k, v in spec.items() if v is not DROP}).encode()


DROP = object()
SURROGATE = b'{"model": "builtin:tiny-bert", "dataset": "\\ud800"}'

# (name, raw body, content type, expected status, expected param); param None: no single field.
CASES: list[tuple[str, bytes, str, int, str | None]] = [
    # wrong types
    ("epochs as text", body(num_train_epochs="three"), "json", 422, "num_train_epochs"),
    (
        "K as float",
        body(gradient_accumulation_steps=1.5),
        "json",
        422,
        "gradient_accumulation_steps",
    ),
    (
        "batch as text",
        body(per_device_train_batch_size="8x"),
        "json",
        422,
        "per_device_train_batch_size",
    ),
    ("lr as text", body(learning_rate="fast"), "json", 422, "learning_rate"),
    ("model as number", body(model=123), "json", 422, "model"),
    ("dataset as list", body(dataset=["builtin:sentiment"]), "json", 422, "dataset"),
    ("seed as object", body(seed={"a": 1}), "json", 422, "seed"),
    ("eval_dataset as bool", body(eval_dataset=True), "json", 422, "eval_dataset"),
    # model selection: the Trainer's rules
    (
        "best model, saves not following evaluation",
        body(load_best_model_at_end=True, save_strategy="steps"),
        "json",
        422,
        "load_best_model_at_end",
    ),
    (
        "best model, save_steps not a multiple",
        body(
            load_best_model_at_end=True,
            eval_strategy="steps",
            eval_steps=3,
            save_strategy="steps",
            save_steps=10,
        ),
        "json",
        422,
        "load_best_model_at_end",
    ),
    ("unknown metric", body(metric_for_best_model="bleu"), "json", 422, "metric_for_best_model"),
    (
        "metric of another task",
        body(metric_for_best_model="perplexity"),
        "json",
        422,
        "metric_for_best_model",
    ),
    ("patience 0", body(early_stopping_patience=0), "json", 422, "early_stopping_patience"),
    (
        "perplexity without a direction",
        body(
            model="builtin:tiny-gpt2",
            dataset="builtin:tiny-stories",
            task="causal-lm",
            metric_for_best_model="eval_perplexity",
        ),
        "json",
        422,
        "metric_for_best_model",
    ),
    # missing and unknown fields
    ("missing model", body(model=DROP), "json", 422, "model"),
    ("missing dataset", body(dataset=DROP), "json", 422, "dataset"),
    ("empty object", b"{}", "json", 422, "model"),
    ("unknown field", body(surprise=1), "json", 422, "surprise"),
    ("trust_remote_code", body(trust_remote_code=True), "json", 422, "trust_remote_code"),
    # K = 0 and other out-of-range numbers
    ("K = 0", body(gradient_accumulation_steps=0), "json", 422, "gradient_accumulation_steps"),
    ("K < 0", body(gradient_accumulation_steps=-4), "json", 422, "gradient_accumulation_steps"),
    ("K huge", body(gradient_accumulation_steps=10**6), "json", 422, "gradient_accumulation_steps"),
    ("epochs = 0", body(num_train_epochs=0), "json", 422, "num_train_epochs"),
    ("epochs huge", body(num_train_epochs=10**9), "json", 422, "num_train_epochs"),
    ("epochs over limit", body(num_train_epochs=101), "json", 422, "num_train_epochs"),
    ("samples over limit", body(max_train_samples=10**9), "json", 422, "max_train_samples"),
    ("eval samples = 0", body(max_eval_samples=0), "json", 422, "max_eval_samples"),
    (
        "batch 1e20",
        body(per_device_train_batch_size=10**20),
        "json",
        422,
        "per_device_train_batch_size",
    ),
    (
        "lr infinite",
        body(learning_rate=1).replace(b'"learning_rate": 1', b'"learning_rate": 1e400'),
        "json",
        422,
        "learning_rate",
    ),
    (
        "lr NaN",
        body(learning_rate=1).replace(b'"learning_rate": 1', b'"learning_rate": NaN'),
        "json",
        422,
        "learning_rate",
    ),
    ("seed < 0", body(seed=-1), "json", 422, "seed"),
    ("seed 2**64", body(seed=2**64), "json", 422, "seed"),
    ("5000-digit number", b'{"seed": 1' + b"0" * 5000 + b"}", "json", 400, None),
    ("max_seq_length 1", body(max_seq_length=1), "json", 422, "max_seq_length"),
    # not JSON, not an object, not JSON at all
    ("truncated JSON", b'{"model": "builtin:tiny-bert"', "json", 422, None),
    ("not JSON", b"{not json", "json", 422, None),
    ("empty body", b"", "json", 422, None),
    ("JSON array", b"[]", "json", 422, None),
    ("JSON string", b'"builtin:tiny-bert"', "json", 422, None),
    ("JSON null", b"null", "json", 422, None),
    ("invalid UTF-8", b'{"model": "\xff\xfe"}', "json", 400, None),
    ("nested 100k deep", b"[" * 100_000, "json", 400, None),
    ("text/plain", body(), "text/plain", 415, "content-type"),
    (
        "form-encoded",
        b"model=builtin%3Atiny-bert&dataset=x",
        "application/x-www-form-urlencoded",
        415,
        "content-type",
    ),
    ("10 MB body", b'{"model": "' + b"a" * (10 * MB) + b'"}', "json", 413, None),
    # paths outside the data root (the fixture's root is HOME/data)
    ("traversal dataset", body(dataset="../../etc/passwd"), "json", 422, "dataset"),
    ("absolute dataset", body(dataset="/etc/passwd"), "json", 422, "dataset"),
    ("absolute csv", body(dataset="/etc/hosts.csv"), "json", 422, "dataset"),
    ("proc environ", body(dataset="/proc/self/environ"), "json", 422, "dataset"),
    ("relative csv escape", body(dataset="data/../../secrets.csv"), "json", 422, "dataset"),
    (
        "traversal eval_dataset",
        body(eval_dataset="../../../etc/passwd.csv"),
        "json",
        422,
        "eval_dataset",
    ),
    ("traversal model", body(model="../../etc"), "json", 422, "model"),
    ("root model", body(model="/"), "json", 422, "model"),
    ("home model", body(model="~/.ssh"), "json", 422, "model"),
    ("symlink out of root", b"SYMLINK", "json", 422, "dataset"),
    ("root/.. escape", b"DOTDOT", "json", 422, "dataset"),
    # unknown backends, tasks, combinations
    ("backend tensorflow", body(backend="tensorflow"), "json", 422, "backend"),
    ("backend case", body(backend="PyTorch"), "json", 422, "backend"),
    ("task translation", body(task="translation"), "json", 422, "task"),
    (
        "unlabelled set for classification",
        body(dataset="builtin:tiny-stories"),
        "json",
        422,
        "dataset",
    ),
    (
        "label column for causal-lm",
        body(task="causal-lm", model="builtin:tiny-gpt2", label_column="label"),
        "json",
        422,
        "label_column",
    ),
    ("unknown builtin model", body(model="builtin:gpt-17"), "json", 422, "model"),
    ("device tpu", body(device="tpu"), "json", 422, "device"),
    ("scheduler unknown", body(lr_scheduler_type="exponential"), "json", 422, "lr_scheduler_type"),
    # Unicode junk
    ("right-to-left override", body(model="\u202etxt.exe"), "json", 422, "model"),
    ("NUL in model", body(model="tiny\u0000bert"), "json", 422, "model"),
    ("lone surrogate", SURROGATE, "json", 422, "dataset"),
    ("emoji hub id", body(model="\U0001f917/\U0001f917"), "json", 422, "model"),
    ("newline in column", body(text_column="text\n"), "json", 422, "text_column"),
    ("surrogate field name", b'{"\\udfff": 1}', "json", 422, None),
    ("zero-width dataset", body(dataset="\u200b"), "json", 422, "dataset"),
    # upload ids mistyped (taken for hub ids once, and failing only at run time)
    ("file id too short", body(dataset="file-abc"), "json", 422, "dataset"),
    ("file id not hex", body(model="file-0123456789abcdefghij"), "json", 422, "model"),
    (
        "file id upper case",
        body(eval_dataset="file-0123456789ABCDEF0123"),
        "json",
        422,
        "eval_dataset",
    ),
    ("unknown file id", body(dataset="file-0123456789abcdef0123"), "json", 422, "dataset"),
]


@pytest.fixture
def hostile(db_settings: Settings, tmp_path: Path) -> Iterator[tuple[TestClient, Settings]]:
    root = db_settings.home / "data"
    root.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside.csv"
    outside.write_text("text,label\nhello,1\n")
    (root / "link.csv").symlink_to(outside)
    with TestClient(create_app(db_settings), raise_server_exceptions=False) as client:
        yield client, db_settings


def count_jobs(settings: Settings) -> int:
    with session_scope(settings) as session:
        return session.scalar(select(func.count()).select_from(Job)) or 0


def test_every_malformed_request_is_a_4xx_naming_the_field(
    hostile: tuple[TestClient, Settings],
) -> None:
    client, settings = hostile
    root = settings.home / "data"
    assert len(CASES) >= 40
    for name, raw, content_type, status, param in CASES:
        if raw == b"SYMLINK":
            raw = body(dataset=str(root / "link.csv"))
        elif raw == b"DOTDOT":
            raw = body(dataset=f"{root}/../../outside.csv")
        ctype = "application/json" if content_type == "json" else content_type
        response = client.post("/v1/jobs", content=raw, headers={"content-type": ctype})
        assert response.status_code == status, (name, response.text)
        error = response.json()["error"]
        assert SHAPE <= set(error) <= SHAPE | {"errors"}, name
        assert error["param"] == param, (name, error)
        if param is not None:
            assert param in error["message"], (name, error)
        if name.startswith("file id"):
            assert "'file-' and 20 lowercase hex digits" in error["message"], (name, error)
        # The configured roots may be named (they tell the user where files go); nothing else
        # of this server's paths (the value's resolution) may be.
        shown = error["message"].replace(str(root), "ROOT")
        assert "Traceback" not in response.text and str(settings.home) not in shown
        assert count_jobs(settings) == 0, name
        assert not any((settings.broker_dir / "queue").iterdir()), name


def test_a_chunked_body_over_the_limit_is_cut_off(hostile: tuple[TestClient, Settings]) -> None:
    client, settings = hostile

    def chunks() -> Iterator[bytes]:
        yield b'{"model": "'
        for _ in range(20):
            yield b"a" * 100_000

    response = client.post(
        "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert count_jobs(settings) == 0


def test_limits_and_roots_are_configurable(tmp_path: Path, embedded_settings: Settings) -> None:
    data = tmp_path / "datasets"
    data.mkdir()
    (data / "train.csv").write_text("text,label\nhello,1\nbye,0\n")
    settings = embedded_settings.model_copy(
        update={
            "max_epochs": 2,
            "max_samples": 100,
            "max_body_bytes": 2048,
            "data_roots": str(data),
        }
    )
    with TestClient(
        create_app(settings), raise_server_exceptions=False, headers=JSON_TYPE
    ) as client:
        inside = client.post("/v1/jobs", content=body(dataset=str(data / "train.csv")))
        assert inside.status_code == 201, inside.text
        assert client.post("/v1/jobs", content=body(num_train_epochs=3)).status_code == 422
        assert client.post("/v1/jobs", content=body(max_eval_samples=101)).status_code == 422
        assert client.post("/v1/jobs", content=body(text_column="x" * 3000)).status_code == 413
        default_root = body(dataset=str(settings.home / "data" / "train.csv"))
        assert client.post("/v1/jobs", content=default_root).json()["error"]["param"] == "dataset"
    assert count_jobs(settings) == 1
