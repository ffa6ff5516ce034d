"""A model named by hub id trains offline when it sits in the server's Hugging Face cache
(``HF_HOME``, ``HF_HUB_OFFLINE=1``): the cache entry is built here from a locally saved model, as
a connected machine's ``huggingface-cli download`` would leave it. A hub id that is not there
fails at once, naming the two ways that work offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import with_env
from tests.trainer_core.helpers import CHAT, make_spec
from trainer_core.data.load import load_job_data
from trainer_core.model.load import load_model, load_tokenizer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_entry(hf_home: Path, hub_id: str) -> Path:
    """``HF_HOME/hub/models--OWNER--NAME`` with ``refs/main`` and its snapshot: what the Auto
    classes read offline (plain files: a real download's blobs and links are not needed)."""
    spec = make_spec(CHAT)
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tokenizer, load_job_data(spec, tokenizer).label_names)
    repo = hf_home / "hub" / f"models--{hub_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def run_cli(tmp_path: Path, model: str, hf_home: Path) -> subprocess.CompletedProcess[str]:
    spec = {**CHAT, "model": model, "max_train_samples": 32, "max_eval_samples": 8,
            "num_train_epochs": 1}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    command = [sys.executable, "-m", "trainer_core", "run", "spec.json", "--output-dir", "out"]
    env = with_env({"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"})
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_a_hub_id_trains_from_the_servers_cache(tmp_path: Path) -> None:
    hf_home = tmp_path / "hf"
    cache_entry(hf_home, "acme/tiny-chat")
    done = run_cli(tmp_path, "acme/tiny-chat", hf_home)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["dataset_format"] == "messages"
    assert (tmp_path / "out" / "model" / "chat_template.jinja").is_file()


def test_a_hub_id_out_of_reach_names_the_offline_routes(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "acme/not-cached", tmp_path / "empty-hf")
    assert done.returncode == 3, done.stderr[-3000:]
    assert "upload the model as an archive" in done.stderr
    assert "mount that cache as this server's HF_HOME" in done.stderr
