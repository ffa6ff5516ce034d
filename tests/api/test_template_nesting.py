"""A chat template nested past the Jinja parser's stack (~495 parentheses fit in the spec's
1024 characters) is a 422 naming ``chat_template``, not a 500 with a traceback per request."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from tests.conftest import TINY


def test_a_deeply_nested_template_is_a_422(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    nested = "{{ " + "(" * 495 + "messages" + ")" * 495 + " }}"
    assert len(nested) <= 1024
    body = {**TINY, "model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic",
            "task": "causal-lm", "chat_template": nested}  # fmt: skip
    with caplog.at_level(logging.INFO):
        reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["param"] == "chat_template" and "nested too deeply" in error["message"]
    assert "Traceback" not in caplog.text and len(caplog.text) < 10_000
