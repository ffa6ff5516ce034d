"""Limits a POST of /v1/jobs cannot step around, on both databases: ``max_steps`` has its own cap
(``GRADACC_MAX_STEPS``: it overrides the epochs, and so ``GRADACC_MAX_EPOCHS``), and a gang job
asks for no more machines than are live (the workers table), instead of cycling through gang
waits for ever."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.workers import register_worker
from tests.conftest import TINY


def test_max_steps_is_capped_and_the_refusal_names_it(
    client: TestClient, db_settings: Settings
) -> None:
    cap = db_settings.max_steps
    refused = client.post("/v1/jobs", json={**TINY, "max_steps": cap + 1})
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["param"] == "max_steps" and "GRADACC_MAX_STEPS" in error["message"]
    assert client.post("/v1/jobs", json={**TINY, "max_steps": 2}).status_code == 201


def test_an_impossible_gang_is_refused_naming_num_machines(
    client: TestClient, db_settings: Settings
) -> None:
    with session_scope(db_settings) as session:  # three live machines, one device each
        for machine in ("m1", "m2", "m3"):
            register_worker(session, name=f"w-{machine}", pid=1, devices=["cpu"], machine=machine)
    gang = {**TINY, "num_processes": 128, "num_machines": 128}
    refused = client.post("/v1/jobs", json=gang)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["param"] == "num_machines"
    assert "3 live machines" in refused.json()["error"]["message"]
    fits = client.post("/v1/jobs", json={**TINY, "num_processes": 3, "num_machines": 3})
    assert fits.status_code == 201, fits.text
