"""POST /v1/files/{id}/preview in-process (SQLite: the route reads one file row): the tokens and
counts are the core's own for the same rows, a wrong field is a 4xx naming it (checked at the
API or by the core's child process), a model file is not previewed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.settings import Settings
from tests.api.test_chat_data import GOOD, jsonl, upload
from trainer_core.preview import FALLBACK, preview
from trainer_core.spec.chat import CHATML_TEMPLATE
from trainer_core.spec.job import JobSpec

UNMARKED = CHATML_TEMPLATE.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")


@pytest.fixture
def client(embedded_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(embedded_settings), raise_server_exceptions=False) as client:
        yield client


def test_preview_is_the_cores_for_the_same_rows(client: TestClient, tmp_path: Path) -> None:
    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    body = {"model": "builtin:tiny-chat", "chat_template": UNMARKED, "rows": 2}
    answer = client.post(f"/v1/files/{file['id']}/preview", json=body)
    assert answer.status_code == 200, answer.text
    local = tmp_path / "chat.jsonl"
    local.write_bytes(jsonl(GOOD))
    spec = JobSpec(model="builtin:tiny-chat", dataset=str(local), task="causal-lm",
                   chat_template=UNMARKED)  # fmt: skip
    assert answer.json() == preview(spec, rows=2)
    first = answer.json()["rows"][0]
    assert first["trained"] > 0 and FALLBACK in first["warnings"]


def test_wrong_fields_are_named(client: TestClient) -> None:
    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    url = f"/v1/files/{file['id']}/preview"
    rows = client.post(url, json={"model": "builtin:tiny-chat", "rows": 0})
    assert rows.status_code == 422 and "rows" in rows.text
    no_chat = client.post(url, json={"model": "builtin:tiny-gpt2"})  # no template: the spec says
    assert no_chat.status_code == 422 and no_chat.json()["error"]["param"] == "chat_template"
    column = client.post(url, json={"model": "builtin:tiny-chat", "dataset_format": "messages",
                                    "messages_column": "chats"})  # fmt: skip
    assert column.status_code == 422, column.text  # found by the core's child process
    assert column.json()["error"]["param"] == "messages_column"
    assert client.post("/v1/files/file-00000000000000000000/preview",
                       json={"model": "builtin:tiny-chat"}).status_code == 404  # fmt: skip


def test_a_model_path_outside_the_data_roots_is_refused(client: TestClient, tmp_path: Path) -> None:
    """The job's source rules hold for a preview: a local model path outside GRADACC_DATA_ROOTS
    (another tenant's job folder, say) is refused naming ``model``, before any child runs."""
    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    elsewhere = tmp_path / "not-a-root"
    elsewhere.mkdir()
    answer = client.post(f"/v1/files/{file['id']}/preview", json={"model": str(elsewhere)})
    assert answer.status_code == 422 and answer.json()["error"]["param"] == "model", answer.text
    assert str(tmp_path) not in answer.text


def test_previews_beyond_the_cap_are_a_429(client: TestClient, embedded_settings: Settings) -> None:
    from api.services.preview import _slots

    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    slots = _slots(embedded_settings.max_previews)
    for _ in range(embedded_settings.max_previews):  # as if that many previews were running
        assert slots.acquire(blocking=False)
    try:
        busy = client.post(f"/v1/files/{file['id']}/preview", json={"model": "builtin:tiny-chat"})
    finally:
        for _ in range(embedded_settings.max_previews):
            slots.release()
    assert busy.status_code == 429 and busy.json()["error"]["param"] == "GRADACC_MAX_PREVIEWS"
