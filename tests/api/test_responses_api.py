"""/v1/responses before any model answers (both databases), through the official SDK: what is not
served is a 400 naming its field, and nothing of another tenant's stored responses can be read,
listed, deleted or continued. Answers themselves: tests/e2e/test_chat_completions.py."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import StoredResponse
from tests.api.test_auth import bearer

MODEL = "builtin:tiny-chat"
UNSERVED: list[tuple[dict[str, Any], str]] = [
    ({"reasoning": {"effort": "low"}}, "reasoning"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "file_search"}]}, "tools.1.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input.0.content.0.type"),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input.0.type"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input.0.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}}, "text.format"),
    ({"background": True}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"tool_choice": {"type": "web_search"}, "tools": [{"type": "function", "name": "f"}]},
     "tool_choice"),
]  # fmt: skip


@pytest.fixture
def sdks(db_settings: Settings) -> Iterator[tuple[openai.OpenAI, openai.OpenAI, Settings]]:
    settings = db_settings.model_copy(update={"require_auth": True})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        keys = {t: bearer(settings, t)["Authorization"].split()[1] for t in ("alice", "bob")}
        yield (
            openai.OpenAI(base_url="http://testserver/v1", api_key=keys["alice"],
                          http_client=client, max_retries=0),
            openai.OpenAI(base_url="http://testserver/v1", api_key=keys["bob"],
                          http_client=client, max_retries=0),
            settings,
        )  # fmt: skip


@pytest.mark.parametrize(("extra", "param"), UNSERVED, ids=[p for _, p in UNSERVED])
def test_what_is_not_served_is_a_400_naming_it(
    sdks: tuple[openai.OpenAI, openai.OpenAI, Settings], extra: dict[str, Any], param: str
) -> None:
    alice, _, _ = sdks
    body = {"model": MODEL, "input": "hello"} | extra
    with pytest.raises(openai.BadRequestError) as refused:
        alice.responses.create(**body)
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == param, error


def test_another_tenants_response_cannot_be_reached(
    sdks: tuple[openai.OpenAI, openai.OpenAI, Settings],
) -> None:
    alice, bob, settings = sdks
    bobs = f"resp_{secrets.token_hex(10)}"  # the PostgreSQL database is shared by test runs
    items = [{"id": "msg_1", "type": "message", "role": "user", "status": "completed",
              "content": [{"type": "input_text", "text": "secret"}]}]  # fmt: skip
    body = {"id": bobs, "object": "response", "created_at": 1, "status": "completed",
            "model": MODEL, "output": [], "tools": [], "tool_choice": "auto",
            "parallel_tool_calls": True}  # fmt: skip
    with session_scope(settings) as session:
        session.add(StoredResponse(id=bobs, tenant="bob", input_items=items, body=body))
        session.commit()
    assert bob.responses.retrieve(bobs).id == bobs
    assert [i.id for i in bob.responses.input_items.list(bobs)] == ["msg_1"]
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(bobs)
    with pytest.raises(openai.NotFoundError):
        alice.responses.input_items.list(bobs)
    with pytest.raises(openai.NotFoundError):
        alice.responses.delete(bobs)
    with pytest.raises(openai.NotFoundError) as continued:
        alice.responses.create(model=MODEL, input="go on", previous_response_id=bobs)
    assert isinstance(continued.value.body, dict)
    assert continued.value.body["param"] == "previous_response_id"
    bob.responses.delete(bobs)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(bobs)
