"""What a team moving here met on its first day, each fixed where it was met (both databases): the
documented `tar czf model.tar.gz -C folder .` uploads; a webhook to a private address names the
setting that allows it; a LoRA job's `artifacts/model` says where its model is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.services.artifacts import folder_path
from gradacc.errors import ArtifactNotFound


def test_the_documented_tar_command_uploads_a_model(client: TestClient, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(b"x" * 64)
    archive = tmp_path / "model.tar.gz"
    subprocess.run(
        ["tar", "czf", str(archive), "-C", str(folder), "."], check=True
    )  # docs/models.md
    sent = client.post("/v1/files", data={"purpose": "model"},
                       files={"file": ("model.tar.gz", archive.read_bytes())})  # fmt: skip
    assert sent.status_code == 201, sent.text  # was 422 "unsafe path in the archive: '.'"
    assert sent.json()["details"]["model_type"] == "bert"


def test_a_private_webhook_names_the_setting_that_allows_it(client: TestClient) -> None:
    job = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment",
           "webhook_url": "http://127.0.0.1:9/hook"}  # fmt: skip
    refused = client.post("/v1/jobs", json=job)
    assert refused.status_code == 422
    assert "GRADACC_WEBHOOK_ALLOW_PRIVATE" in refused.json()["error"]["message"]
    assert client.get("/v1/jobs").json()["data"] == []


def test_a_lora_jobs_model_download_says_where_the_model_is(tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    with pytest.raises(ArtifactNotFound, match=r"model\?merged=true"):
        folder_path(tmp_path, "model")
    with pytest.raises(ArtifactNotFound) as plain:  # a job with neither: a plain 404
        folder_path(tmp_path / "elsewhere", "model")
    assert "merged" not in plain.value.message
