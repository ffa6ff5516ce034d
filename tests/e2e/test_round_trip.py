"""Data in, model out, over real HTTP on both stacks (``gradacc serve`` on the embedded defaults,
and on PostgreSQL + Redis): upload a dataset, train on it, download the model and load it with
transformers; tenants, archive attacks, files in use and oversized uploads."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradacc.settings import Settings
from tests.e2e.archives import attacks, tar_gz_of
from tests.e2e.conftest import NO_PREDICT, serve_with_keys
from tests.support import wait_final, wait_until
from tests.trainer_core.helpers import prompt_completion_file
from trainer_core.builtin.chat_corpus import chat_arithmetic

pytestmark = pytest.mark.integration

MAX_UPLOAD = 8_000_000
MAX_UNPACKED = 20_000_000
CSV = "text,label\n" + "".join(
    f"a good and lovely film {i},pos\na bad and boring film {i},neg\n" for i in range(40)
)
SPEC = {
    "model": "builtin:tiny-bert",
    "num_train_epochs": 1,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
}


@dataclass
class Served:
    settings: Settings
    alice: httpx.Client
    bob: httpx.Client


@pytest.fixture(scope="module", params=["embedded", "pg_redis"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    limits = {
        "GRADACC_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
        "GRADACC_MAX_MODEL_UNPACKED_BYTES": str(MAX_UNPACKED),
        **NO_PREDICT,  # models are loaded here with transformers, not through the service
    }
    home = tmp_path_factory.mktemp("home")
    with (
        serve_with_keys(request, home, limits) as (settings, base, keys),
        httpx.Client(base_url=base, timeout=60, headers=_auth(keys["alice"])) as alice,
        httpx.Client(base_url=base, timeout=60, headers=_auth(keys["bob"])) as bob,
    ):
        yield Served(settings, alice, bob)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def upload(
    client: httpx.Client, name: str, data: bytes | str, purpose: str = "dataset"
) -> httpx.Response:
    return client.post("/v1/files", files={"file": (name, data)}, data={"purpose": purpose})


def predictions(model_dir: Path, texts: list[str]) -> list[dict[str, Any]]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer, device="cpu")
    return list(classify(texts, top_k=None))


@pytest.fixture(scope="module")
def trained(served: Served) -> dict[str, Any]:
    """Alice uploads a dataset and trains on it: the job everything below reads."""
    file = upload(served.alice, "reviews.csv", CSV)
    assert file.status_code == 201, file.text
    assert file.json()["details"] == {"format": "csv", "rows": 80, "columns": ["text", "label"],
                                      "dataset_format": "text"}  # fmt: skip
    created = served.alice.post("/v1/jobs", json={**SPEC, "dataset": file.json()["id"]})
    assert created.status_code == 201, created.text
    job = wait_final(served.alice, created.json()["id"], timeout=120)
    assert job["status"] == "succeeded", (job, served.alice.get(f"/v1/jobs/{job['id']}/logs").text)
    return {"file": file.json(), "job": job}


def test_upload_train_download_load(
    served: Served, trained: dict[str, Any], tmp_path: Path
) -> None:
    alice, job = served.alice, trained["job"]
    job_id = job["id"]
    assert {"model", "checkpoint", "summary.json", "metrics.jsonl", "train.log"} <= set(
        job["outputs"]
    )
    assert job["summary"]["effective_batch_size"] == 16 and job["summary"]["device"] == "cpu"
    assert "transformers" in job["summary"]["versions"] and job["summary"]["train_seconds"] > 0
    log = alice.get(f"/v1/jobs/{job_id}/logs", params={"tail": 50})
    assert log.headers["content-type"].startswith("text/plain")
    assert "start:" in log.text and "effective batch 16" in log.text and "epoch 1/1" in log.text
    kinds = {a["path"]: a["kind"] for a in alice.get(f"/v1/jobs/{job_id}/artifacts").json()["data"]}
    assert kinds["model/model.safetensors"] == "model" and kinds["train.log"] == "log"

    download = alice.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert download.status_code == 200 and download.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (extracted,) = tmp_path.iterdir()
    texts = ["a good and lovely film", "a bad and boring film", "an unseen sentence"]
    served_model = served.settings.jobs_dir / job_id / "model"
    assert predictions(extracted, texts) == predictions(served_model, texts)

    ranged = alice.get(f"/v1/jobs/{job_id}/artifacts/summary.json", headers={"Range": "bytes=0-0"})
    assert ranged.status_code == 206 and ranged.content == b"{"
    (checkpoint,) = alice.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert checkpoint["step_number"] == job["progress"]["step"] and checkpoint["epoch"] == 1
    assert alice.get(checkpoint["fine_tuned_model_checkpoint"]).status_code == 200

    # The downloaded model goes back up as a model and trains again from there.
    model_file = upload(alice, "mine.tar.gz", tar_gz_of(extracted), purpose="model")
    assert model_file.status_code == 201, model_file.text
    assert model_file.json()["details"]["model_type"] == "bert"
    spec = {**SPEC, "model": model_file.json()["id"], "dataset": trained["file"]["id"]}
    again = wait_final(alice, alice.post("/v1/jobs", json=spec).json()["id"], timeout=120)
    assert again["status"] == "succeeded", again


def chat_files(folder: Path) -> dict[str, bytes]:
    """The two instruction formats, as a team's script writes them (OpenAI's chat JSONL)."""
    conversations = chat_arithmetic("train")["messages"][:48]
    chat = "".join(json.dumps({"messages": c}) + "\n" for c in conversations)
    return {
        "messages": chat.encode(),
        "prompt-completion": prompt_completion_file(folder).read_bytes(),
    }


def test_chat_and_prompt_completion_round_trip(served: Served, tmp_path: Path) -> None:
    """Upload -> POST -> train -> download -> load: a chat model that keeps its template, so
    transformers' text-generation pipeline answers a list of messages."""
    from transformers import pipeline

    alice = served.alice
    for fmt, data in chat_files(tmp_path / "data").items():
        file = upload(alice, f"{fmt}.jsonl", data)
        assert file.status_code == 201 and file.json()["details"]["dataset_format"] == fmt, (
            file.text
        )
        spec = {**SPEC, "model": "builtin:tiny-chat", "task": "causal-lm", "learning_rate": 3e-3,
                "dataset": file.json()["id"], "max_seq_length": 96}  # fmt: skip
        created = alice.post("/v1/jobs", json=spec)
        assert created.status_code == 201 and created.json()["dataset_format"] == fmt, created.text
        job = wait_final(alice, created.json()["id"], timeout=180)
        assert job["status"] == "succeeded", alice.get(f"/v1/jobs/{job['id']}/logs").text
        assert job["summary"]["dataset_format"] == fmt
        assert 0 <= job["metrics"]["eval_mean_token_accuracy"] <= 1
        steps = alice.get(f"/v1/jobs/{job['id']}/metrics", params={"granularity": "step"})
        assert "train_mean_token_accuracy" in steps.json()["data"][-1]
        archive = alice.get(f"/v1/jobs/{job['id']}/artifacts/model")
        folder = tmp_path / fmt
        with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
            tar.extractall(folder, filter="data")
        (model_dir,) = folder.iterdir()
        assert (model_dir / "chat_template.jinja").is_file()
        chat = pipeline("text-generation", model=str(model_dir), device="cpu")
        asked = [{"role": "user", "content": "what is 2 plus 3?"}]
        answer = chat(asked, max_new_tokens=8, do_sample=False)[0]["generated_text"]
        assert answer[:-1] == asked and answer[-1]["role"] == "assistant"


def test_another_tenant_gets_404(served: Served, trained: dict[str, Any]) -> None:
    bob, file_id, job_id = served.bob, trained["file"]["id"], trained["job"]["id"]
    for path in (
        f"/v1/files/{file_id}",
        f"/v1/files/{file_id}/content",
        f"/v1/jobs/{job_id}/artifacts",
        f"/v1/jobs/{job_id}/artifacts/model",
        f"/v1/jobs/{job_id}/artifacts/train.log",
        f"/v1/jobs/{job_id}/checkpoints",
        f"/v1/jobs/{job_id}/logs",
    ):
        assert bob.get(path).status_code == 404, path
    assert bob.delete(f"/v1/files/{file_id}").status_code == 404
    assert bob.delete(f"/v1/jobs/{job_id}").status_code == 404
    refused = bob.post("/v1/jobs", json={**SPEC, "dataset": file_id})
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "dataset"
    # The PostgreSQL stacks share one database: bob may have files of other modules, not alice's.
    assert file_id not in {f["id"] for f in bob.get("/v1/files").json()["data"]}
    assert served.alice.get(f"/v1/files/{file_id}").status_code == 200


def _stored(settings: Settings) -> set[str]:
    """What is on disk under files/, uploads in progress included."""
    return {p.relative_to(settings.files_dir).as_posix() for p in settings.files_dir.glob("*/*")}


def test_archive_attacks_are_refused(served: Served) -> None:
    before = _stored(served.settings)
    listed = served.alice.get("/v1/files").json()["data"]
    for name, (filename, build) in attacks(bomb_bytes=MAX_UNPACKED + (4 << 20)).items():
        answer = upload(served.alice, filename, build(), purpose="model")
        assert answer.status_code == 422, (name, answer.text)
        assert answer.json()["error"]["param"] == "file", name
    assert _stored(served.settings) == before
    assert served.alice.get("/v1/files").json()["data"] == listed
    assert not (served.settings.home.parent / "escape.txt").exists()


def test_delete_of_a_file_in_use_is_409(served: Served) -> None:
    alice = served.alice
    rows = '{"text": "fine", "label": "pos"}\n{"text": "awful", "label": "neg"}\n' * 32
    file_id = upload(alice, "in-use.jsonl", rows).json()["id"]
    job_id = alice.post(
        "/v1/jobs", json={**SPEC, "dataset": file_id, "num_train_epochs": 100}
    ).json()["id"]
    busy = alice.delete(f"/v1/files/{file_id}")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "file_in_use"
    assert alice.delete(f"/v1/jobs/{job_id}").status_code == 409  # cancel first
    alice.post(f"/v1/jobs/{job_id}/cancel")
    assert wait_final(alice, job_id, timeout=120)["status"] == "cancelled"
    assert alice.delete(f"/v1/files/{file_id}").status_code == 200
    assert not (served.settings.files_dir / file_id).exists()
    # 409 job_busy while its worker is still stopping it (if it ran), then deleted.
    wait_until(lambda: alice.delete(f"/v1/jobs/{job_id}").status_code == 200, timeout=60,
               what="DELETE once its worker let go")  # fmt: skip
    assert alice.get(f"/v1/jobs/{job_id}").status_code == 404
    assert not (served.settings.jobs_dir / job_id).exists()


def test_oversized_upload_is_413_and_leaves_nothing(served: Served) -> None:
    before = _stored(served.settings)
    listed = served.alice.get("/v1/files").json()["data"]
    big = b"text\n" + b"x" * MAX_UPLOAD
    assert upload(served.alice, "big.csv", big).status_code == 413  # declared length

    def chunked() -> Iterator[bytes]:  # no Content-Length: cut off while it streams
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n\r\n'
        for _ in range(MAX_UPLOAD // (1 << 20) + 2):
            yield b"x" * (1 << 20)

    headers = {"content-type": "multipart/form-data; boundary=b"}
    cut = served.alice.post("/v1/files", content=chunked(), headers=headers)
    assert cut.status_code == 413, cut.text
    assert _stored(served.settings) == before
    assert served.alice.get("/v1/files").json()["data"] == listed


def test_a_job_on_broken_weights_names_no_server_path(
    served: Served, trained: dict[str, Any], tmp_path: Path
) -> None:
    """The security review's N10: a model uploaded with its weights cut in half trains nothing,
    and the job's error (and its events) say why without the server's absolute home."""
    alice = served.alice
    download = alice.get(f"/v1/jobs/{trained['job']['id']}/artifacts/model")
    with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (folder,) = tmp_path.iterdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    model_file = upload(alice, "broken.tar.gz", tar_gz_of(folder), purpose="model")
    assert model_file.status_code == 201, model_file.text
    spec = {**SPEC, "model": model_file.json()["id"], "dataset": trained["file"]["id"]}
    job = wait_final(alice, alice.post("/v1/jobs", json=spec).json()["id"], timeout=120)
    assert job["status"] == "failed" and "cannot load" in job["error"]["message"], job
    events = alice.get(f"/v1/jobs/{job['id']}/events").text
    home = str(served.settings.home.resolve())
    assert home not in job["error"]["message"] and home not in events, job["error"]
    assert "GRADACC_HOME/files/" in job["error"]["message"]
