"""``/artifacts/model?merged=true`` without a merge to run (the merge itself, in its child
process, is tests/e2e/test_shared_lora_bases.py): a job that is not LoRA gives its model as it
is; a LoRA job's merge, once made, is sent again without merging (its ``.merged-model/`` hidden
from /artifacts); a LoRA job that has not succeeded is a 409, another tenant's job a 404."""

from __future__ import annotations

import io
import tarfile
from typing import Any

from fastapi.testclient import TestClient

from api.services.merged_model import MERGED_DIR
from gradacc.settings import Settings
from gradacc.tables import JobStatus
from tests.support import make_job

CHAT = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm"}
LORA = {**CHAT, "lora": {"r": 4, "alpha": 8}}


def _job(settings: Settings, spec: dict[str, Any], folder: str | None, **fields: Any) -> str:
    """A job row and, in its outputs, ``folder`` holding a config and a weights file."""
    job_id = make_job(settings, spec=spec, **({"status": JobStatus.SUCCEEDED} | fields))
    if folder is not None:
        where = settings.jobs_dir / job_id / folder
        where.mkdir(parents=True)
        (where / "config.json").write_text('{"model_type": "gpt2"}')
        (where / "model.safetensors").write_bytes(folder.encode())
    return job_id


def _members(client: TestClient, job_id: str, **params: str) -> dict[str, bytes]:
    answer = client.get(f"/v1/jobs/{job_id}/artifacts/model", params=params)
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_a_job_that_is_not_lora_gives_its_model(client: TestClient, db_settings: Settings) -> None:
    job_id = _job(db_settings, CHAT, "model")
    merged = _members(client, job_id, merged="true")
    assert merged == _members(client, job_id)
    assert merged[f"{job_id}-model/model.safetensors"] == b"model"


def test_a_merge_made_once_is_sent_again(client: TestClient, db_settings: Settings) -> None:
    job_id = _job(db_settings, LORA, MERGED_DIR)  # no adapter/: a merge now would fail
    assert _members(client, job_id, merged="true")[f"{job_id}-model/model.safetensors"] == (
        MERGED_DIR.encode()
    )
    listed = client.get(f"/v1/jobs/{job_id}/artifacts").json()["data"]
    assert not [a for a in listed if MERGED_DIR in a["path"]]
    assert client.get(f"/v1/jobs/{job_id}/artifacts/model").status_code == 404  # not merged


def test_what_cannot_be_merged_is_refused(client: TestClient, db_settings: Settings) -> None:
    running = _job(db_settings, LORA, None, status=JobStatus.RUNNING)
    answer = client.get(f"/v1/jobs/{running}/artifacts/model", params={"merged": "true"})
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "job_not_succeeded"
    theirs = _job(db_settings, CHAT, "model", tenant="someone-else")
    answer = client.get(f"/v1/jobs/{theirs}/artifacts/model", params={"merged": "true"})
    assert answer.status_code == 404
