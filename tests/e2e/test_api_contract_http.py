"""What the API promises, over real HTTP to a live uvicorn (embedded stack, API keys on): auth
before anything else, 405 with ``Allow``, 413 to a client that sends its whole body first, every
validation error at once with hints, JSON without its content type, local files checked at POST,
the schema stating the limits in force, and /docs and /redoc served without internet."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from tests.conftest import TINY, migrate
from tests.e2e.test_contract_fuzz import serve_api

LIMITS = {"GRADACC_MAX_EPOCHS": "7", "GRADACC_MAX_SAMPLES": "5000", "GRADACC_REQUIRE_AUTH": "true"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Settings]]:
    home = tmp_path_factory.mktemp("home")
    settings = Settings(home=home)
    migrate(settings.resolved_database_url())
    (home / "data").mkdir()
    with session_scope(settings) as session:
        key = create_api_key(session, tenant="acme")
    for base in serve_api(settings, home, LIMITS):
        yield base, key, settings


def post(base: str, key: str | None, body: Any, **headers: str) -> httpx.Response:
    if key:
        headers["authorization"] = f"Bearer {key}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers.setdefault("content-type", "application/json")
    return httpx.post(f"{base}/v1/jobs", content=content, headers=headers, timeout=30)


def test_auth_comes_before_body_method_and_size(live: tuple[str, str, Settings]) -> None:
    base, _, _ = live
    for response in (
        post(base, None, b"{not json"),
        post(base, None, {"lr": 1}),
        post(base, None, b"x" * 2_000_000),
        httpx.delete(f"{base}/v1/jobs", timeout=10),
        httpx.get(f"{base}/v1/no-such-thing", timeout=10),
    ):
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


def test_405_lists_every_allowed_method(live: tuple[str, str, Settings]) -> None:
    base, key, _ = live
    auth = {"authorization": f"Bearer {key}"}
    jobs = httpx.request("PUT", f"{base}/v1/jobs", headers=auth, timeout=10)
    assert jobs.status_code == 405
    assert set(jobs.headers["allow"].split(", ")) >= {"GET", "POST"}
    health = httpx.request("DELETE", f"{base}/healthz", timeout=10)
    assert health.status_code == 405 and "GET" in health.headers["allow"]


def test_oversized_body_sent_whole_gets_413_not_a_reset(live: tuple[str, str, Settings]) -> None:
    base, key, _ = live
    body = b'{"model": "' + b"a" * 10_000_000 + b'"}'
    request = urllib.request.Request(
        f"{base}/v1/jobs",
        data=body,
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413
    assert json.loads(refused.value.read())["error"]["code"] == "body_too_large"


def test_every_validation_error_at_once_with_hints(live: tuple[str, str, Settings]) -> None:
    base, key, _ = live
    spec = {**TINY, "lr": 0.1, "batch_size": 4, "epochs": 2, "fp16": True, "seed": -1}
    spec["learning_rat"] = 1
    error = post(base, key, spec).json()["error"]
    found = {e["param"]: e["message"] for e in error["errors"]}
    assert found["lr"] == "unknown field; did you mean 'learning_rate'?"
    assert "'per_device_train_batch_size'" in found["batch_size"]
    assert "'num_train_epochs'" in found["epochs"]
    assert "mixed_precision" in found["fp16"]
    assert "'learning_rate'" in found["learning_rat"]  # a near miss, by difflib
    assert "seed" in found and len(found) == 6
    assert error["param"] == error["errors"][0]["param"]
    assert error["message"].startswith(f"{error['param']}: ")
    bad_model = post(base, key, {**TINY, "model": "builtin:nope"}).json()["error"]
    assert not bad_model["message"].startswith("model: Value error")
    assert "Value error" not in json.dumps(bad_model)


def test_json_without_its_content_type(live: tuple[str, str, Settings]) -> None:
    base, key, _ = live
    body = json.dumps(TINY).encode()
    form = post(base, key, body, **{"content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415, form.text
    assert "application/json" in form.json()["error"]["message"]
    # No content type at all (what a cross-site no-cors fetch sends): not read as JSON either.
    bare = httpx.post(f"{base}/v1/jobs", content=body, headers={"authorization": f"Bearer {key}"})
    assert bare.status_code == 415, bare.text
    assert bare.json()["error"]["param"] == "content-type"


def test_local_files_and_task_rules_are_checked_at_post(live: tuple[str, str, Settings]) -> None:
    base, key, settings = live
    missing = post(base, key, {**TINY, "dataset": str(settings.home / "data" / "nope.csv")})
    assert missing.status_code == 422
    assert missing.json()["error"]["param"] == "dataset"
    assert "no such file" in missing.json()["error"]["message"]
    outside = post(base, key, {**TINY, "dataset": "/etc/hosts.csv"}).json()["error"]
    assert str(settings.home) not in outside["message"]  # never the roots or a server path
    assert "GRADACC_DATA_ROOTS" in outside["message"]  # the setting that would allow it
    causal_bert = post(base, key, {**TINY, "task": "causal-lm", "dataset": "builtin:tiny-stories"})
    assert causal_bert.status_code == 422
    assert causal_bert.json()["error"]["param"] == "model"


def test_the_schema_states_the_limits_in_force(live: tuple[str, str, Settings]) -> None:
    base, _, _ = live
    schema = httpx.get(f"{base}/openapi.json", timeout=10).json()
    spec = schema["components"]["schemas"]["JobCreate"]
    assert spec["properties"]["num_train_epochs"]["maximum"] == 7
    samples = spec["properties"]["max_train_samples"]["anyOf"]
    assert {"type": "integer", "minimum": 1, "maximum": 5000} in samples
    assert all(p.get("description") and p.get("examples") for p in spec["properties"].values())
    assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            assert operation.get("description") or operation.get("summary"), path
            if path.startswith("/v1"):
                assert operation["security"] == [{"apiKey": []}], path
    assert "200" in schema["paths"]["/v1/jobs"]["post"]["responses"]  # the idempotent replay


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_their_assets_from_this_server(
    live: tuple[str, str, Settings], page: str
) -> None:
    base, _, _ = live
    html = httpx.get(f"{base}{page}", timeout=10).text
    assets = re.findall(r"""(?:src|href)=["']([^"']+\.(?:js|css|png))["']""", html)
    assert assets, html
    for asset in assets:
        assert asset.startswith("/"), asset  # no CDN
        assert httpx.get(f"{base}{asset}", timeout=10).status_code == 200, asset
    assert "cdn" not in html.lower()


def test_workers_list_needs_a_key_and_is_empty_without_workers(
    live: tuple[str, str, Settings],
) -> None:
    base, key, _ = live
    assert httpx.get(f"{base}/v1/workers", timeout=10).status_code == 401
    listed = httpx.get(f"{base}/v1/workers", headers={"authorization": f"Bearer {key}"})
    assert listed.json() == {"object": "list", "data": []}
    ready = httpx.get(f"{base}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "no_workers"
