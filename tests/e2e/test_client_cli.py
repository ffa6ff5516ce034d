"""The client commands as a user runs them: ``gradacc submit/jobs/status/metrics/cancel/logs`` as
subprocesses against ``gradacc serve`` (embedded defaults, one worker) over real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY
from tests.e2e.conftest import NO_PREDICT, embedded_serve
from tests.support import free_port

pytestmark = pytest.mark.integration


def gradacc(server: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GRADACC_SERVER": server, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "commands.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip


@pytest.fixture(scope="module")
def served_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``gradacc serve --workers 1`` on the embedded defaults without a predict server (no
    command here predicts): its base URL."""
    with embedded_serve(tmp_path_factory.mktemp("served"), env=NO_PREDICT) as (url, _):
        yield url


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(TINY))
    return path


def test_submit_follow_then_read_it_back(served_url: str, spec_file: Path, tmp_path: Path) -> None:
    server = served_url
    done = gradacc(server, "submit", str(spec_file), "--set", "logging_steps=1", "--follow")
    assert done.returncode == 0, done.stderr
    assert "train_loss" in done.stdout and "succeeded" in done.stdout
    job_id = done.stdout.split()[-2]
    status = json.loads(gradacc(server, "status", job_id, "--json").stdout)
    assert status["status"] == "succeeded" and status["spec"]["logging_steps"] == 1
    steps = json.loads(gradacc(server, "metrics", job_id, "--steps", "--json").stdout)
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    listed = json.loads(gradacc(server, "jobs", "--json").stdout)
    assert job_id in [job["id"] for job in listed]
    table = gradacc(server, "jobs")
    assert table.returncode == 0 and job_id in table.stdout and "pytorch" in table.stdout
    model_dir = tmp_path / "model"
    fetched = gradacc(server, "download", job_id, str(model_dir))
    assert fetched.returncode == 0, fetched.stderr
    assert list(model_dir.rglob("model.safetensors")) and list(model_dir.rglob("config.json"))


def test_upload_then_train_on_it(served_url: str, spec_file: Path, tmp_path: Path) -> None:
    rows = [f"{'a good film' if i % 2 else 'a bad film'} {i},{i % 2}" for i in range(64)]
    data = tmp_path / "reviews.csv"
    data.write_text("text,label\n" + "\n".join(rows) + "\n")
    uploaded = gradacc(served_url, "upload", str(data))
    assert uploaded.returncode == 0, uploaded.stderr
    file_id = uploaded.stdout.strip()
    assert file_id.startswith("file")
    done = gradacc(served_url, "submit", str(spec_file), "--set", f"dataset={file_id}",
                   "--follow", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["spec"]["dataset"] == file_id


def test_cancel_and_exit_statuses(served_url: str, spec_file: Path) -> None:
    server = served_url
    queued = json.loads(gradacc(server, "submit", str(spec_file), "--json",
                                "--set", "num_train_epochs=50").stdout)  # fmt: skip
    cancelled = gradacc(server, "cancel", queued["id"], "--json")
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    followed = gradacc(server, "logs", queued["id"], "--follow")
    assert followed.returncode == 3 and "cancelled" in followed.stdout  # 3: cancelled
    bad = gradacc(server, "submit", str(spec_file), "--set", "gradient_accumulation_steps=0")
    assert bad.returncode == 2 and "gradient_accumulation_steps" in bad.stderr
    assert gradacc(server, "status").returncode == 2  # usage: the job id is missing
    assert gradacc(server, "status", "job_00000000000000000000").returncode == 1  # 404
    unreachable = gradacc(f"http://127.0.0.1:{free_port()}", "jobs")
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr


def test_jobs_in_80_columns_shows_whole_ids_names_and_models(
    served_url: str, spec_file: Path
) -> None:
    """Three jobs made together share their ids' first characters: in an 80-column terminal
    each id is whole (and so distinct), with its name and model; ``status`` shows the
    metadata; ``--metadata`` filters."""
    made = []
    for i in range(3):
        queued = gradacc(served_url, "submit", str(spec_file), "--json",
                         "--set", "num_train_epochs=50", "--set", f"name=sweep-{i}",
                         "--set", f'metadata={{"team": "t{i % 2}"}}')  # fmt: skip
        made.append(json.loads(queued.stdout)["id"])
    env = {**os.environ, "GRADACC_SERVER": served_url, "COLUMNS": "80"}
    shown = subprocess.run([sys.executable, "-m", "commands.cli", "jobs"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=180)  # fmt: skip
    for job_id in made:
        gradacc(served_url, "cancel", job_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for i, job_id in enumerate(made):
        (row,) = [line for line in lines if job_id in line]  # whole, on one line
        assert f"sweep-{i}" in row and "builtin:" in row
    header = next(line for line in lines if line.split()[:1] == ["id"]).split()
    assert header[:3] == ["id", "name", "model"] and header[-1] == "age"  # none squeezed out
    assert "pytorch" not in shown.stdout  # narrow: no backend column
    status = gradacc(served_url, "status", made[1])
    assert "metadata: team=t1" in status.stdout and "builtin:tiny-bert" in status.stdout
    team_0 = json.loads(gradacc(served_url, "jobs", "--metadata", "team=t0", "--json").stdout)
    assert [job["id"] for job in team_0] == [made[2], made[0]]
