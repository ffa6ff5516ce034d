"""What a web page the user visits, or anyone who reaches the port, can do to a server without
API keys, and what the defaults leave them: a cross-site POST without a content type, DNS
rebinding (a foreign ``Host``), a bind to every address, and the workers' host names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from api.main import create_app
from commands.serve import InsecureBind, refuse_open_bind
from gradacc.auth import create_api_key
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, Worker
from gradacc.workers import register_worker
from tests.conftest import ROOT, TINY


def jobs_in(settings: Settings) -> int:
    with session_scope(settings) as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


def test_a_cross_site_post_without_a_content_type_creates_nothing(
    client: TestClient, db_settings: Settings
) -> None:
    # fetch(url, {method: "POST", mode: "no-cors", body: new Blob([json])}) sends no
    # Content-Type: the one JSON POST a page on another site can send without a preflight.
    response = client.post("/v1/jobs", content=json.dumps(TINY).encode())
    assert response.status_code == 415, response.text
    assert response.json()["error"]["param"] == "content-type"
    assert jobs_in(db_settings) == 0
    assert client.post("/v1/jobs", json=TINY).status_code == 201  # what a real client sends


def test_without_keys_only_loopback_host_names_are_answered(embedded_settings: Settings) -> None:
    settings = embedded_settings.model_copy(update={"allowed_hosts": None})  # the default
    with TestClient(create_app(settings), base_url="http://localhost:8000") as client:
        assert client.get("/v1/jobs").status_code == 200
        for host in ("127.0.0.1:8000", "[::1]:8000", "localhost"):
            assert client.get("/v1/jobs", headers={"host": host}).status_code == 200, host
        # A page at attacker.example rebinds its name to 127.0.0.1: its requests carry its name.
        for host in ("attacker.example", "attacker.example:8000", "localhost.attacker.example"):
            refused = client.get("/v1/files", headers={"host": host})
            assert refused.status_code == 400, host
            assert refused.json()["error"] == {
                "code": "host_not_allowed",
                "message": refused.json()["error"]["message"],
                "param": "host",
                "type": "invalid_request_error",
            }
            assert "GRADACC_ALLOWED_HOSTS" in refused.json()["error"]["message"]
        sent = client.post("/v1/jobs", json=TINY, headers={"host": "attacker.example"})
        assert sent.status_code == 400
    assert jobs_in(settings) == 0  # nothing was created through the foreign name


def test_allowed_hosts_can_name_a_domain_and_keys_lift_the_default(
    embedded_settings: Settings,
) -> None:
    named = embedded_settings.model_copy(update={"allowed_hosts": "gpu.lab, *.corp.example"})
    with TestClient(create_app(named), base_url="http://gpu.lab") as client:
        assert client.get("/v1/jobs").status_code == 200
        assert client.get("/v1/jobs", headers={"host": "a.corp.example"}).status_code == 200
        assert client.get("/v1/jobs", headers={"host": "localhost"}).status_code == 400
    keyed = embedded_settings.model_copy(update={"allowed_hosts": None, "require_auth": True})
    with TestClient(create_app(keyed), base_url="http://gpu.lab") as client:
        assert client.get("/v1/jobs").status_code == 401  # any name; the key is the gate


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "gpu.lab"])
def test_serving_beyond_loopback_without_keys_is_refused(host: str) -> None:
    with pytest.raises(InsecureBind, match="GRADACC_REQUIRE_AUTH"):
        refuse_open_bind(Settings(require_auth=False), host)
    refuse_open_bind(Settings(require_auth=True), host)
    refuse_open_bind(Settings(require_auth=False, allow_insecure_bind=True), host)
    for loopback in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        refuse_open_bind(Settings(require_auth=False), loopback)


def test_the_cli_refuses_an_open_bind_before_starting_anything(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GRADACC_HOME": str(tmp_path / "home"),
        "GRADACC_REQUIRE_AUTH": "false",
        "GRADACC_ALLOW_INSECURE_BIND": "false",
    }
    command = [sys.executable, "-m", "commands.cli", "serve", "--host", "0.0.0.0", "--workers", "0"]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "without API keys" in done.stderr and "GRADACC_REQUIRE_AUTH" in done.stderr
    assert not (tmp_path / "home").exists()  # no database, no broker, no worker


def test_the_image_requires_keys_by_default() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "GRADACC_REQUIRE_AUTH=true" in dockerfile
    assert '"--host", "0.0.0.0"' in dockerfile  # so the refusal above would stop it otherwise


def test_worker_hosts_are_for_operators_only(db_settings: Settings) -> None:
    settings = db_settings.model_copy(update={"require_auth": True, "operator_tenants": "ops"})
    with session_scope(settings) as session:
        session.execute(delete(Worker))
        register_worker(session, name="gpu-node-7:4242", pid=4242, devices=["cpu"])
        tenant = {"Authorization": f"Bearer {create_api_key(session, tenant='alice')}"}
        operator = {"Authorization": f"Bearer {create_api_key(session, tenant='ops')}"}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        seen = client.get("/v1/workers", headers=tenant).json()["data"]
        assert [(w["name"], w["hostname"], w["pid"]) for w in seen] == [(None, None, None)]
        assert seen[0]["devices"] == ["cpu"]
        full = client.get("/v1/workers", headers=operator).json()["data"]
        assert [(w["name"], w["pid"]) for w in full] == [("gpu-node-7:4242", 4242)]
        ready = client.get("/readyz")  # no key at all
        assert ready.status_code == 200 and ready.json()["checks"]["workers"] == "1 alive"
        assert ready.json()["workers"] == [] and "gpu-node-7" not in ready.text
