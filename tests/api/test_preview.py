"""POST /v1/files/{id}/preview in-process (SQLite: the route reads one file row): the tokens and
counts are the core's own for the same rows, a wrong field is a 4xx naming it (checked at the
API or by the core's child process), a model file is not previewed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.services.shares import PREVIEWS, Cap
from gradacc.settings import Settings
from gradacc.tables import DEFAULT_TENANT
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
    spec = JobSpec(
        model="builtin:tiny-chat", dataset=str(local), task="causal-lm", chat_template=UNMARKED
    )
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
    column = client.post(
        url,
        json={
            "model": "builtin:tiny-chat",
            "dataset_format": "messages",
            "messages_column": "chats",
        },
    )
    assert column.status_code == 422, column.text  # found by the core's child process
    assert column.json()["error"]["param"] == "messages_column"
    assert (
        client.post(
            "/v1/files/file-00000000000000000000/preview", json={"model": "builtin:tiny-chat"}
        ).status_code
        == 404
    )


def test_a_model_path_outside_the_data_roots_is_refused(client: TestClient, tmp_path: Path) -> None:
    """The job's source rules hold for a preview: a local model path outside GRADACC_DATA_ROOTS
    (another tenant's job folder, say) is refused naming ``model``, before any child runs."""
    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    elsewhere = tmp_path / "not-a-root"
    elsewhere.mkdir()
    answer = client.post(f"/v1/files/{file['id']}/preview", json={"model": str(elsewhere)})
    assert answer.status_code == 422 and answer.json()["error"]["param"] == "model", answer.text
    assert str(tmp_path) not in answer.text


@pytest.mark.parametrize(
    ("held", "setting"),
    [
        ({"other": 1, "another": 1}, "GRADACC_MAX_PREVIEWS"),
        ({DEFAULT_TENANT: 1}, "GRADACC_MAX_PREVIEWS_PER_TENANT"),
    ],
    ids=["server", "tenant"],
)
def test_previews_beyond_a_share_are_a_429(
    client: TestClient, embedded_settings: Settings, held: dict[str, int], setting: str
) -> None:
    """Two previews run at once in all (another tenant's two fill them), one per tenant."""
    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    total = Cap(embedded_settings.max_previews, "GRADACC_MAX_PREVIEWS")
    mine = Cap(embedded_settings.max_previews_per_tenant, "GRADACC_MAX_PREVIEWS_PER_TENANT")
    releases = [
        PREVIEWS.take(tenant, mine, total=total)  # as if these previews were running
        for tenant, count in held.items()
        for _ in range(count)
    ]
    try:
        busy = client.post(f"/v1/files/{file['id']}/preview", json={"model": "builtin:tiny-chat"})
    finally:
        for release in releases:
            release()
    assert busy.status_code == 429 and busy.json()["error"]["param"] == setting, busy.text
    assert busy.json()["error"]["code"] == "too_many_previews"


def test_a_preview_with_a_model_not_the_tenants_is_a_404(client: TestClient) -> None:
    """Another tenant's ``ft:`` name (or one that does not exist: the lookup is the tenant's, so
    the two cannot be told apart) is a 404 naming the model, not a 500 with a traceback."""
    file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
    name = "ft:builtin:tiny-chat:bob:bobm:job_01a2410b1dce4be619bd"
    answer = client.post(f"/v1/files/{file['id']}/preview", json={"model": name})
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "model_not_found"
    assert "Traceback" not in answer.text


def test_the_preview_shows_the_jobs_memory_plan_against_a_device(
    embedded_settings: Settings,
) -> None:
    """Qwen3-8B's shape in full at 4,096 tokens, checkpointed: over 8 sharded devices of 80 GiB
    the plan fits; on one it does not (the states alone are 122 GiB). A sharding the spec
    refuses is named as at POST."""
    settings = embedded_settings.model_copy(update={"device_memory_gb": 80.0})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
        url = f"/v1/files/{file['id']}/preview"
        job = {
            "model": "builtin:qwen3-8b-shape",
            "rows": 1,
            "per_device_train_batch_size": 1,
            "gradient_checkpointing": True,
            "max_seq_length": 4096,
        }
        sharded = client.post(url, json=job | {"num_processes": 8, "sharding": "fsdp"})
        assert sharded.status_code == 200, sharded.text
        plan = sharded.json()["memory_plan"]
        assert plan["fits"] is True and plan["shards"] == 8 and plan["device"] == 80 * 2**30
        assert plan["line"].endswith("of 80.00 GiB") and plan["seq_len"] == 4096
        alone = client.post(url, json=job).json()["memory_plan"]
        assert alone["fits"] is False and alone["weights"] == 4 * 8_190_735_360
        refused = client.post(url, json=job | {"sharding": "fsdp"})
        assert refused.status_code == 422 and refused.json()["error"]["param"] == "sharding"
