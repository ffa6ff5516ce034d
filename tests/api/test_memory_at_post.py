"""A job whose weights, gradients and optimizer state cannot fit one of this server's devices
(``GRADACC_DEVICE_MEMORY_GB``) is refused at POST, naming what would make it fit, and leaves no
job behind: Qwen3-8B in full on one 80 GiB device (a hub id whose config is in this server's
Hugging Face cache, as a download leaves it) needs 122 GiB; with LoRA it is queued; sharded over
8 devices the plan says it fits; and a 70B fits one device only as a 4-bit base with LoRA."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.errors import InvalidRequest
from gradacc.settings import Settings
from gradacc.sources.memory import check_fits
from tests.api.test_sources_at_post import fake_repo, hub_cache  # noqa: F401  (a fixture)
from trainer_core.spec.job import JobSpec
from trainer_core.spec.shapes import SHAPES

QWEN3_8B = {"model": "Qwen/Qwen3-8B", "dataset": "builtin:chat-arithmetic", "task": "causal-lm"}


@pytest.fixture
def settings(db_settings: Settings) -> Settings:
    return db_settings.model_copy(update={"device_memory_gb": 80.0})


@pytest.fixture
def client(settings: Settings, hub_cache: Path) -> Iterator[TestClient]:  # noqa: F811
    config = json.dumps(SHAPES["builtin:qwen3-8b-shape"])
    fake_repo(hub_cache, "model", "Qwen/Qwen3-8B", {"config.json": config})
    with TestClient(create_app(settings), raise_server_exceptions=False) as app_client:
        yield app_client


def test_an_8b_in_full_on_one_80_gib_device_is_refused_naming_what_fits(
    client: TestClient,
) -> None:
    response = client.post("/v1/jobs", json=QWEN3_8B)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["param"] == "lora"
    message = error["message"]
    assert "122.1 GiB per device" in message and "GRADACC_DEVICE_MEMORY_GB" in message
    assert "lora: {r: 16}" in message and "sharding: 'fsdp'" in message
    assert client.get("/v1/jobs").json()["data"] == []  # nothing half made


def test_the_same_model_with_lora_is_queued(client: TestClient) -> None:
    response = client.post("/v1/jobs", json={**QWEN3_8B, "lora": {"r": 16}})
    assert response.status_code in (200, 201), response.text
    assert response.json()["status"] == "queued"


def test_over_eight_devices_the_plan_says_an_8b_in_full_fits(settings: Settings) -> None:
    spec = JobSpec(
        **{**QWEN3_8B, "model": "builtin:qwen3-8b-shape"},
        num_processes=8,
        sharding="fsdp",
        per_device_train_batch_size=1,
    )
    check_fits(spec, settings)  # no refusal
    alone = spec.model_copy(update={"num_processes": 1, "sharding": "none"})
    with pytest.raises(InvalidRequest) as refused:
        check_fits(alone, settings)
    assert refused.value.param == "lora"


def test_a_70b_fits_one_device_only_as_a_4bit_base(settings: Settings) -> None:
    base = {**QWEN3_8B, "model": "builtin:llama-3.1-70b-shape"}
    with pytest.raises(InvalidRequest) as refused:
        check_fits(JobSpec(**base, lora={"r": 16}), settings)
    assert refused.value.param == "sharding"  # LoRA alone leaves 263 GiB of fp32 weights
    assert "load_in_4bit: true" in str(refused.value)
    check_fits(JobSpec(**base, lora={"r": 16}, load_in_4bit=True), settings)
