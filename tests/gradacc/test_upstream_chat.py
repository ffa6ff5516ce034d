"""A training job's model graders call their upstream server directly (``upstream_chat``): the
request as OpenAI's chat completions take it (the route's model name, its own key, the grader's
sampling), the reply read into a score. The upstream is a stand-in HTTP server on this machine
(no OpenAI-compatible server runs here); nothing else is faked."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gradacc.graders import Grading, run_grader
from gradacc.graders.upstream_chat import upstream_chat
from gradacc.upstreams import parse_upstreams
from trainer_core.spec.graders import parse_grader

SEEN: list[dict[str, Any]] = []


class _Upstream(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        answer = {"choices": [{"message": {"role": "assistant", "content": '{"result": 0.75}'}}],
                  "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}  # fmt: skip
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_score_model_grader_scores_through_its_upstream(upstream_url: str) -> None:
    routes = json.dumps({"judge-*": {"base_url": upstream_url, "api_key": "sk-up", "model": "*"}})
    chat = upstream_chat(parse_upstreams(routes, environ={}))
    grader = parse_grader({"type": "score_model", "name": "s", "model": "judge-small",
                           "input": [{"role": "user", "content": "Rate {{ sample.output_text }}"}],
                           "sampling_params": {"temperature": 0.5, "seed": 3}})  # fmt: skip
    result = run_grader(grader, "four", {}, Grading(chat=chat))
    assert result.reward == 0.75 and not result.failed_kinds
    assert result.usage_per_model == {"judge-small": {"prompt_tokens": 7, "completion_tokens": 3,
                                                      "total_tokens": 10}}  # fmt: skip
    sent = SEEN[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-up"
    assert sent["model"] == "small" and sent["temperature"] == 0.5 and sent["seed"] == 3
    assert sent["messages"] == [{"role": "user", "content": "Rate four"}]
    # A name no route serves: the sample scores 0 as the server error OpenAI names.
    other = parse_grader({**grader.model_dump(exclude_none=True), "model": "elsewhere"})
    failed = run_grader(other, "four", {}, Grading(chat=chat))
    assert failed.reward == 0.0 and failed.failed_kinds == ["model_grader_server_error"]
    assert "no upstream serves 'elsewhere'" in failed.details["model_grader_server_error_details"]
