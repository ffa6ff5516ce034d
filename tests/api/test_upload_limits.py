"""POST /v1/files against a tenant that sends more than a file (issue 30: M3, H3, L1, M6): a
flood of form fields, repeated parts, rows too long for a Python check, error bodies that would
show the server's paths, and the per-tenant storage quota."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from api.main import create_app
from api.uploads import arrow, datasets, jsonrows
from api.uploads.receive import receive_upload
from gradacc.errors import InvalidRequest
from gradacc.settings import Settings

CSV = "text,label\n" + "good,pos\nbad,neg\n" * 5
MiB = 1 << 20


def _flood(fields: int, name_bytes: int) -> Iterator[bytes]:
    """Multipart parts that are no file: ~``name_bytes`` each, sent 64 KiB at a time."""
    pending = bytearray()
    for number in range(fields):
        name = "n" * name_bytes + str(number)
        pending += f'--b\r\nContent-Disposition: form-data; name="{name}"\r\n\r\nv\r\n'.encode()
        if len(pending) >= 64 * 1024:
            yield bytes(pending)
            pending.clear()
    yield bytes(pending) + b"--b--\r\n"


def test_a_flood_of_form_fields_is_refused_at_the_first_unknown_part(tmp_path: Path) -> None:
    """20,000 fields of 3 KB names (60 MB): before, every one was kept until the body ended."""
    chunks, sent = _flood(20_000, 3000), 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        chunk = next(chunks, None)
        sent += len(chunk or b"")
        return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

    headers = [(b"content-type", b"multipart/form-data; boundary=b")]
    scope = {"type": "http", "method": "POST", "path": "/v1/files", "headers": headers}
    with pytest.raises(InvalidRequest, match="unknown part") as refused:
        asyncio.run(receive_upload(Request(scope, receive), folder=tmp_path))
    assert refused.value.param == "n" * 64
    assert sent < 4 * MiB  # two 1 MiB batches at most, of the 60 MB sent
    assert list(tmp_path.iterdir()) == []


def test_unknown_or_repeated_parts_are_refused_naming_the_part(client: TestClient) -> None:
    csv = ("d.csv", CSV)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"files": {"file": csv}, "data": {"purpose": "dataset", "note": "x"}}, "note"),
        ({"files": {"file": csv}, "data": {"purpose": ["dataset", "dataset"]}}, "purpose"),
        ({"files": [("file", csv), ("file", csv)]}, "file"),
    ]
    for request, param in cases:
        answer = client.post("/v1/files", **request)
        assert answer.status_code == 422, (request, answer.text)
        assert answer.json()["error"]["param"] == param, answer.json()
    assert client.get("/v1/files").json()["data"] == []


def _zip(*members: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as zipped:
        warnings.simplefilter("ignore")  # "Duplicate name": the point of the test
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100644 << 16  # a regular file, as Unix zip stores one
            zipped.writestr(info, data)
    return buf.getvalue()


def _tar(*members: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_no_error_body_shows_a_path_of_the_server(client: TestClient) -> None:
    """A zip with an entry twice answered ``[Errno 17] File exists: '<home>/files/…'``."""
    config = b'{"model_type": "bert"}'
    models = {
        "twice.zip": _zip(("config.json", config), ("config.json", config)),
        "file-then-folder.zip": _zip(("config.json", config), ("config.json/x", b"x")),
        "twice.tar.gz": _tar(("config.json", config), ("config.json", config)),
    }
    datasets_ = {"d.parquet": b"PAR1 not parquet PAR1", "e.parquet": b"", "d.json": b"[{]"}
    home = str(client.app.state.settings.home)  # type: ignore[attr-defined]
    for name, data in [*models.items(), *datasets_.items()]:
        purpose = "model" if name in models else "dataset"
        answer = client.post("/v1/files", files={"file": (name, data)}, data={"purpose": purpose})
        assert answer.status_code == 422, (name, answer.text)
        assert home not in answer.text and ".staging" not in answer.text, (name, answer.text)
    assert client.get("/v1/files").json()["data"] == []


def test_a_giant_json_line_is_refused_naming_its_line(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caps lowered to 256 KiB so the test sends 1 MB, not 70: pyarrow refuses the line (it
    straddles its largest block), and the line-by-line check that follows reads at most the cap
    of it instead of the whole line."""
    monkeypatch.setattr(arrow, "MAX_BLOCK_BYTES", arrow.BLOCK_BYTES)
    monkeypatch.setattr(jsonrows, "MAX_ROW_BYTES", arrow.BLOCK_BYTES)
    short = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    data = f'{short}\n{{"messages": "{"x" * MiB}"}}\n{short}\n'
    answer = client.post("/v1/files", files={"file": ("chat.jsonl", data)})
    assert answer.status_code == 422, answer.text
    assert f"line 2 is over {arrow.BLOCK_BYTES} bytes" in answer.json()["error"]["message"]


def test_a_refused_json_file_over_the_fallback_bound_is_not_read_again(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal used to be followed by a parse of the whole file, whatever its size."""
    monkeypatch.setattr(datasets, "FALLBACK_MAX_BYTES", MiB, raising=False)
    read: list[Path] = []

    def spy(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        read.append(path)
        return iter(())

    monkeypatch.setattr(datasets, "json_lines", spy)
    rows = "[1, 2]\n" + '{"text": "fine", "label": 1}\n' * 80_000  # 2.3 MB; line 1 no object
    answer = client.post("/v1/files", files={"file": ("d.jsonl", rows)})
    assert answer.status_code == 422, answer.text
    assert read == []
    small = client.post("/v1/files", files={"file": ("d.jsonl", rows[:100_000])})
    assert small.status_code == 422 and len(read) == 1  # under the bound it is read


def test_an_upload_past_the_storage_quota_is_413_and_leaves_nothing(
    db_settings: Settings,
) -> None:
    settings = db_settings.model_copy(update={"max_storage_bytes_per_tenant": 4000})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        kept = client.post("/v1/files", files={"file": ("a.csv", CSV)})
        assert kept.status_code == 201, kept.text
        big = "text,label\n" + "x,1\n" * 1000
        answer = client.post("/v1/files", files={"file": ("b.csv", big)})
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "storage_quota_exceeded"
        assert error["param"] == "GRADACC_MAX_STORAGE_BYTES_PER_TENANT"
        assert "GRADACC_MAX_STORAGE_BYTES_PER_TENANT" in error["message"]
        assert [f["id"] for f in client.get("/v1/files").json()["data"]] == [kept.json()["id"]]
        on_disk = [p.name for p in settings.files_dir.glob("**/*") if p.is_file()]
        assert on_disk == ["data.csv"]
