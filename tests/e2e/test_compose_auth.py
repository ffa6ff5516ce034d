"""The compose deployment requires API keys; the embedded default does not."""

from __future__ import annotations

import json
from typing import Any

from gradacc.settings import Settings
from tests.e2e.test_compose import COMPOSE_FILE, compose_config


def test_compose_api_requires_auth_and_keeps_the_shared_environment() -> None:
    result = compose_config(COMPOSE_FILE)
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = json.loads(result.stdout)["services"]
    api_env = services["api"]["environment"]
    assert api_env["GRADACC_REQUIRE_AUTH"] == "true"
    assert (
        api_env["GRADACC_DATABASE_URL"] == services["worker"]["environment"]["GRADACC_DATABASE_URL"]
    )
    assert api_env["GRADACC_BROKER_URL"] == services["worker"]["environment"]["GRADACC_BROKER_URL"]
    assert Settings.model_fields["require_auth"].default is False


def test_the_api_sees_the_workers_hub_cache_read_only() -> None:
    # Hub ids are checked at POST against the cache the workers load from (docs/sources.md).
    result = compose_config(COMPOSE_FILE, env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = json.loads(result.stdout)["services"]
    api, worker = services["api"], services["worker"]
    for name in ("HF_HOME", "HF_HUB_OFFLINE"):
        assert api["environment"][name] == worker["environment"][name], name
    assert api["environment"]["HF_HUB_OFFLINE"] == "1"
    cache = api["environment"]["HF_HOME"]
    api_mount = next(v for v in api["volumes"] if v["target"] == cache)
    worker_mount = next(v for v in worker["volumes"] if v["target"] == cache)
    assert api_mount["source"] == worker_mount["source"] and api_mount["read_only"] is True
