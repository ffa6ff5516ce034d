"""An upstream's error reaches the client in OpenAI's shape whatever shape it came in: OpenAI's
own passes through byte for byte, a flat one (older vLLM) is nested, a proxy's page is wrapped.
(Errors from a real second server: tests/e2e/test_upstream_serving.py.)"""

from __future__ import annotations

import json

from api.services.upstream import as_openai_error


def _body(status: int, content: bytes) -> tuple[int, dict[str, object]]:
    answer = as_openai_error(status, content)
    error = json.loads(bytes(answer.body))["error"]
    assert isinstance(error, dict)
    return answer.status_code, error


def test_openai_s_shape_passes_through_unchanged() -> None:
    content = b'{"error": {"message": "no", "type": "invalid_request_error", "param": "n"}}'
    answer = as_openai_error(400, content)
    assert (answer.status_code, bytes(answer.body)) == (400, content)


def test_a_flat_error_is_nested_and_a_page_wrapped() -> None:
    flat = {"object": "error", "message": "too long", "type": "BadRequestError",
            "param": "messages", "code": 400}  # fmt: skip
    status, error = _body(400, json.dumps(flat).encode())
    assert (status, error["message"], error["param"]) == (400, "too long", "messages")
    assert error["code"] == "upstream_error"  # vLLM's code is the status, not a name
    status, error = _body(502, b"<html><h1>502 Bad Gateway</h1></html>")
    assert status == 502 and error["code"] == "upstream_error"
    assert (
        error["message"] == "the model server answered 502: <html><h1>502 Bad Gateway</h1></html>"
    )
    assert error["type"] == "server_error"
