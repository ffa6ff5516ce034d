"""Every kept checkpoint is listed (step, epoch, metrics, is_best), downloads as a tar.gz, and
trains a new job: the output of a real early-stopped run with best-model selection."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from safetensors.torch import load, load_file

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.sources import fine_tuned
from gradacc.tables import JobStatus
from tests.support import make_job
from tests.trainer_core.helpers import max_abs_diff
from tests.trainer_core.test_selection import SELECTING
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

SPEC = {**SELECTING, "backend": "pytorch"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("trained")
    result = train(JobSpec(**SPEC), out)
    return out, result.summary


@pytest.fixture
def job_id(db_settings: Settings, trained: tuple[Path, dict[str, object]]) -> str:
    job_id = make_job(db_settings, status=JobStatus.SUCCEEDED, spec=JobSpec(**SPEC).model_dump())
    shutil.copytree(trained[0], db_settings.jobs_dir / job_id)
    return job_id


def test_every_kept_checkpoint_is_listed_with_the_best_marked(
    client: TestClient, job_id: str, trained: tuple[Path, dict[str, object]]
) -> None:
    summary = trained[1]
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert [c["step_number"] for c in listed] == [summary["optimizer_steps"], summary["best_step"]]
    assert [c["is_best"] for c in listed] == [False, True]
    best = listed[1]
    assert best["metrics"]["step"] == best["step_number"]  # the evaluation made at that step
    assert best["metrics"]["eval_loss"] == summary["best_metric"]
    assert best["fine_tuned_model_checkpoint"] == (
        f"/v1/jobs/{job_id}/artifacts/checkpoint-{best['step_number']}"
    )
    assert best["model"].endswith(f"{job_id}:ckpt-step-{best['step_number']}")


@pytest.mark.parametrize("which", ["latest", "best"])
def test_each_checkpoint_downloads_as_a_tar_gz(
    client: TestClient, db_settings: Settings, job_id: str, which: str
) -> None:
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    entry = listed[0] if which == "latest" else listed[1]
    reply = client.get(entry["fine_tuned_model_checkpoint"])
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(reply.content), mode="r:gz") as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
        member = next(m for m in tar.getmembers() if m.name.endswith("/model.safetensors"))
        weights = tar.extractfile(member).read()  # type: ignore[union-attr]
    assert {"model.safetensors", "optimizer.pt", "gradacc_state.json"} <= names
    folder = "checkpoint" if which == "latest" else f"checkpoint-{entry['step_number']}"
    on_disk = load_file(str(db_settings.jobs_dir / job_id / folder / "model.safetensors"))
    assert max_abs_diff(load(weights), on_disk) == 0.0


def test_a_checkpoint_not_kept_is_404(client: TestClient, job_id: str) -> None:
    for path in ("checkpoint-3", "checkpoint-999999", "checkpoint-x"):
        assert client.get(f"/v1/jobs/{job_id}/artifacts/{path}").status_code == 404


def test_a_checkpoint_trains_a_new_job(
    client: TestClient, db_settings: Settings, job_id: str
) -> None:
    best = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"][1]
    body = {"model": best["model"], "dataset": "builtin:sentiment", "max_steps": 1,
            "max_train_samples": 16, "max_eval_samples": 8}  # fmt: skip
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    # What the training child does with the name: the folder it loads, with the checkpoint's
    # weights; a job trained from it runs.
    with session_scope(db_settings) as session:
        folder = fine_tuned.local_model(session, db_settings, value=best["model"], tenant="default")
    spec = JobSpec(**{**body, "model": str(folder)})
    model = load_model(spec, load_tokenizer(spec), ["neg", "pos"])
    step = best["step_number"]
    saved = load_file(
        str(db_settings.jobs_dir / job_id / f"checkpoint-{step}" / "model.safetensors")
    )
    assert max_abs_diff(dict(model.state_dict()), saved) == 0.0
    assert train(spec, db_settings.home / "branch").status == "completed"
    gone = client.post("/v1/jobs", json={**body, "model": best["model"].replace(f"-{step}", "-3")})
    assert gone.status_code == 422 and gone.json()["error"]["param"] == "model"


def test_evaluation_reports_are_served_with_the_metrics(client: TestClient, job_id: str) -> None:
    reply = client.get(f"/v1/jobs/{job_id}/metrics", params={"granularity": "evaluation"})
    reports = reply.json()["data"]
    assert [r["step"] for r in reports] == [10, 8, 6, 4, 2]  # newest first, one per evaluation
    for report in reports:
        matrix = report["classification"]["confusion_matrix"]
        assert sum(map(sum, matrix)) == 32  # max_eval_samples
        assert set(report["classification"]["per_class"]) == {"0", "1"}
    limited = client.get(f"/v1/jobs/{job_id}/metrics?granularity=evaluation&limit=2").json()
    assert [r["step"] for r in limited["data"]] == [10, 8] and limited["has_more"]
