"""The Celery side's executor by setting (``worker.consumer.executors.executor_for``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from gradacc.executors import UnknownExecutor
from gradacc.scheduling.queue import create_celery_app
from gradacc.settings import Settings
from gradacc.upstreams import parse_upstreams
from worker.consumer.executors import LocalExecutor, executor_for


def test_local_by_default_and_ray_only_when_chosen(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    app = create_celery_app(settings)
    local = executor_for(settings, app)
    assert isinstance(local, LocalExecutor) and local.name == "local"
    pytest.importorskip("worker.consumer.executors.ray_executor")  # the .[ray] extra
    ray = executor_for(Settings(home=tmp_path, executor="ray"), app)
    assert ray.name == "ray" and not isinstance(ray, LocalExecutor)


def test_an_unknown_executor_is_refused_before_anything_runs(tmp_path: Path) -> None:
    settings = Settings.model_construct(home=tmp_path, executor=cast(Any, "k8s"))
    with pytest.raises(UnknownExecutor, match="GRADACC_EXECUTOR='k8s'"):
        executor_for(settings, create_celery_app(Settings(home=tmp_path)))


SECRETS = {"GRADACC_DATABASE_URL": "postgresql://gradacc:db-secret@db/gradacc",
           "GRADACC_SERVE_TOKEN": "serve-secret-0123456789", "HF_TOKEN": "hf_secret",
           "GRADACC_METRICS_TOKEN": "metrics-secret-0123456789", "UPSTREAM_KEY": "sk-up-secret",
           "GRADACC_SERVE_UPSTREAMS": json.dumps({"judge": {"base_url": "http://j:8000/v1",
                                                            "api_key_env": "UPSTREAM_KEY"}})}  # fmt: skip


def test_a_ray_jobs_nodes_get_what_they_need_and_no_secret_as_an_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N7: a task's arguments sit in Ray's GCS, readable by anyone with cluster access. They
    hold the allowlisted settings (the home absolute: a Ray worker's directory is not the
    driver's), nothing that names the driver's machine, and no secret; the secrets the nodes
    need (the database, the upstreams with their keys, the hub token) go into a 0600 file in
    the job's folder; the serving and metrics tokens go nowhere."""
    node_env = pytest.importorskip("worker.consumer.executors.node_env")
    given = {
        **SECRETS,
        "HF_HUB_OFFLINE": "1",
        "GRADACC_GRADER_PIDS": "4",
        "GRADACC_MACHINE": "driver-host",
        "GRADACC_DEVICES": "8",
        "GRADACC_ADVERTISE_HOST": "10.0.0.1",
        "GRADACC_WORKER_PID": "123",
        "UNRELATED": "x",
    }
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    settings = Settings(home=Path("var"))
    env = node_env.node_environment(settings, dict(os.environ))
    assert env.plain == {"HF_HUB_OFFLINE": "1", "GRADACC_GRADER_PIDS": "4",
                         "GRADACC_HOME": str(tmp_path / "var")}  # fmt: skip
    secret_values = {"db-secret", "serve-secret", "hf_secret", "metrics-secret", "sk-up-secret"}
    assert not [v for v in secret_values if v in json.dumps(env.plain)]
    path = node_env.write_secrets(settings.jobs_dir / "job_1", env.secrets)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = json.loads(path.read_text())
    assert written["GRADACC_DATABASE_URL"] == SECRETS["GRADACC_DATABASE_URL"]
    assert written["HF_TOKEN"] == "hf_secret"
    upstreams = parse_upstreams(written["GRADACC_SERVE_UPSTREAMS"], environ={})  # no variable
    assert upstreams.routes[0].headers() == {"Authorization": "Bearer sk-up-secret"}
    assert not [v for v in written.values() if "serve-secret" in v or "metrics-secret" in v]
    node_env.remove_secrets(settings.jobs_dir / "job_1")
    assert not path.exists()


def test_the_node_allowlist_holds_every_setting_the_training_processes_read() -> None:
    """A setting a training process reads but no node is given would silently take its default
    on a Ray node: every ``settings.<field>`` in the modules a node's processes import is in the
    allowlist, is a secret of the file, or names the driver's own machine."""
    node_env = pytest.importorskip("worker.consumer.executors.node_env")
    code = (
        "import sys, re, pathlib, json\n"
        "import worker.child.placed, worker.child.entry, trainer_core.entry\n"
        "found = set()\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if name.split('.')[0] in ('gradacc', 'worker') and getattr(module, '__file__', None):\n"
        "        text = pathlib.Path(module.__file__).read_text()\n"
        "        found |= set(re.findall(r'settings\\.(\\w+)', text))\n"
        "print(json.dumps(sorted(found)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    read = set(json.loads(done.stdout)) & set(Settings.model_fields)
    # HOME; the secrets file; the driver's own machine. serve_token goes nowhere (N7): a node's
    # model-grader judge asks a predict server with the token that server recorded.
    elsewhere = {"home", "database_url", "serve_upstreams", "serve_token", "machine"}
    assert read - elsewhere - node_env.NODE_SETTINGS == set()
