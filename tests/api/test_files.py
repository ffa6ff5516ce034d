"""/v1/files in-process on both databases: what a dataset upload finds, what it refuses, and that
a refusal leaves neither a row nor bytes behind. (Round trips and archive attacks over real HTTP
with workers: tests/e2e/test_round_trip.py.)"""

from __future__ import annotations

import io
import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from api.main import create_app
from api.services.files import upload_folder
from gradacc.settings import Settings

CSV = "text,label\n" + "good,pos\nbad,neg\n" * 5


def _leftovers(client: TestClient) -> list[str]:
    files_dir = client.app.state.settings.files_dir  # type: ignore[attr-defined]
    return sorted(p.name for p in files_dir.glob("**/*") if p.is_file())


def test_each_dataset_format_is_read_and_counted(client: TestClient) -> None:
    table = pa.table({"text": ["a", "b", "c"], "label": ["x", "y", "x"]})
    parquet = io.BytesIO()
    pq.write_table(table, parquet)
    uploads = {
        "d.csv": (CSV.encode(), 10),
        "d.jsonl": (b'{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n', 2),
        "d.json": (json.dumps([{"text": "a", "label": "x"}]).encode(), 1),
        "d.parquet": (parquet.getvalue(), 3),
    }
    for name, (data, rows) in uploads.items():
        answer = client.post("/v1/files", files={"file": (name, data)})
        assert answer.status_code == 201, (name, answer.text)
        body = answer.json()
        assert body["details"]["rows"] == rows and body["details"]["columns"] == ["text", "label"]
        assert body["bytes"] == len(data) and body["purpose"] == "dataset"
        content = client.get(f"/v1/files/{body['id']}/content")
        assert content.content == data
    page = client.get("/v1/files", params={"limit": 3}).json()
    assert len(page["data"]) == 3 and page["has_more"]
    rest = client.get("/v1/files", params={"after": page["last_id"]}).json()
    assert [f["filename"] for f in rest["data"]] == ["d.csv"] and not rest["has_more"]


def test_rows_longer_than_the_read_block_are_counted(client: TestClient) -> None:
    """A 3 MB document among short rows: pyarrow's reader refuses a row longer than its block
    (1 MiB by default, 256 KiB in the check), so the check reads again with larger blocks."""
    long_text = "word " * 600_000
    uploads = {
        "long.csv": ("text,label\n" + "short,0\n" * 50_000 + f"{long_text},1\nshort,0\n", 50_002),
        "long.jsonl": (
            '{"text": "short", "label": 0}\n' * 50_000
            + json.dumps({"text": long_text, "label": 1})
            + "\n",
            50_001,
        ),
    }
    for name, (data, rows) in uploads.items():
        answer = client.post("/v1/files", files={"file": (name, data.encode())})
        assert answer.status_code == 201, (name, answer.text)
        assert answer.json()["details"]["rows"] == rows


def test_refused_uploads_name_the_field_and_leave_nothing(client: TestClient) -> None:
    cases = [
        ({"files": {"file": ("d.txt", b"hello")}}, "file"),
        ({"files": {"file": ("d.csv", b"\xff\xfe\x00\x01")}}, "file"),
        ({"files": {"file": ("d.jsonl", b"{not json\n")}}, "file"),
        ({"files": {"file": ("d.csv", b"text,label\n")}}, "file"),  # no rows
        ({"files": {"file": ("d.csv", CSV)}, "data": {"purpose": "weights"}}, "purpose"),
        ({"files": {"file": ("m.tar.gz", b"not gzip")}, "data": {"purpose": "model"}}, "file"),
        ({"data": {"purpose": "dataset"}}, "file"),  # no file field
    ]
    for request, param in cases:
        answer = client.post("/v1/files", **request)  # type: ignore[arg-type]
        assert answer.status_code == 422, (request, answer.text)
        assert answer.json()["error"]["param"] == param, (request, answer.json())
    plain = client.post("/v1/files", content=b"x", headers={"content-type": "text/plain"})
    assert plain.status_code == 422 and plain.json()["error"]["param"] == "file"
    assert client.get("/v1/files").json()["data"] == []
    assert _leftovers(client) == []


def test_a_job_may_name_only_files_of_the_right_purpose(client: TestClient) -> None:
    file_id = client.post("/v1/files", files={"file": ("d.csv", CSV)}).json()["id"]
    spec = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"}
    for field, value in (
        ("model", file_id),  # a dataset is not a model
        ("eval_dataset", "file-0123456789abcdef0123"),  # no such file
    ):
        answer = client.post("/v1/jobs", json={**spec, field: value})
        assert answer.status_code == 422 and answer.json()["error"]["param"] == field
    job = client.post("/v1/jobs", json={**spec, "dataset": file_id}).json()
    assert job["spec"]["dataset"] == file_id and job["outputs"] == {} and job["summary"] is None
    assert client.delete(f"/v1/files/{file_id}").status_code == 409
    assert client.get(f"/v1/files/{file_id}").status_code == 200


def test_partial_uploads_left_by_a_killed_api_are_swept_at_start(db_settings: Settings) -> None:
    """A process killed mid-upload cannot remove its partial file: the next one to start does,
    once it is an hour old (a live upload writes every MiB), and keeps what is recent."""
    folder = upload_folder(db_settings)
    folder.mkdir(parents=True, exist_ok=True)
    stale, fresh = folder / ".upload-0123456789abcdef", folder / ".upload-fedcba9876543210"
    staging = db_settings.files_dir / ".staging-file-0123"
    for path in (stale, fresh):
        path.write_bytes(b"x" * 1000)
    (staging / "model").mkdir(parents=True)
    hour_ago = time.time() - 3700
    for path in (stale, staging):
        os.utime(path, (hour_ago, hour_ago))
    with TestClient(create_app(db_settings)) as client:
        assert client.get("/healthz").status_code == 200
    assert not stale.exists() and not staging.exists() and fresh.exists()
