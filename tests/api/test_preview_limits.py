"""The preview child's limits (``GRADACC_PREVIEW_MEMORY_MB``, ``GRADACC_PREVIEW_TIMEOUT_S``): a
preview past either is a 422 naming ``rows`` and the setting, and the server answers the next
request. A preview under the default limits is test_preview.py's (it runs under them)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.settings import Settings
from tests.api.test_chat_data import GOOD, jsonl, upload

BODY = {"model": "builtin:tiny-chat", "rows": 2}


def _refused(settings: Settings, update: dict[str, float]) -> tuple[dict[str, str], int]:
    """The error of one preview under ``update``, and the status of the next request."""
    app = create_app(settings.model_copy(update=update))
    with TestClient(app, raise_server_exceptions=False) as client:
        file = upload(client, "chat.jsonl", jsonl(GOOD)).json()
        answer = client.post(f"/v1/files/{file['id']}/preview", json=BODY)
        assert answer.status_code == 422, answer.text
        after = client.get(f"/v1/files/{file['id']}").status_code
    error: dict[str, str] = answer.json()["error"]
    return error, after


def test_a_preview_over_its_memory_is_a_422(embedded_settings: Settings) -> None:
    """64 MiB of address space: the child cannot even import its libraries (a normal preview
    maps ~2.2 GiB; the default allows 8 GiB)."""
    error, after = _refused(embedded_settings, {"preview_memory_mb": 64})
    assert error["param"] == "rows" and "GRADACC_PREVIEW_MEMORY_MB" in error["message"]
    assert after == 200


def test_a_preview_over_its_time_is_a_422(embedded_settings: Settings) -> None:
    error, after = _refused(embedded_settings, {"preview_timeout_s": 0.2})
    assert error["param"] == "rows" and "GRADACC_PREVIEW_TIMEOUT_S" in error["message"]
    assert after == 200
