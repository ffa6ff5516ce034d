"""A training job's model graders call their upstream server directly (``upstream_chat``): the
request as OpenAI's chat completions take it (the route's model name, its own key, the grader's
sampling), the reply read into a score. The upstream is a stand-in HTTP server on this machine
(no OpenAI-compatible server runs here); nothing else is faked."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gradacc.grading import upstream_chat
from gradacc.upstreams import parse_upstreams
from tests.upstream_stub import StubUpstream, stub_upstream
from trainer_core.graders import Grading, run_grader
from trainer_core.spec.graders import parse_grader


@pytest.fixture(scope="module")
def upstream() -> Iterator[StubUpstream]:
    with stub_upstream(StubUpstream(content='{"result": 0.75}')) as stub:
        yield stub


def test_a_score_model_grader_scores_through_its_upstream(upstream: StubUpstream) -> None:
    routes = json.dumps({"judge-*": {"base_url": upstream.url, "api_key": "sk-up", "model": "*"}})
    chat = upstream_chat(parse_upstreams(routes, environ={}))
    grader = parse_grader({"type": "score_model", "name": "s", "model": "judge-small",
                           "input": [{"role": "user", "content": "Rate {{ sample.output_text }}"}],
                           "sampling_params": {"temperature": 0.5, "seed": 3}})  # fmt: skip
    result = run_grader(grader, "four", {}, Grading(chat=chat))
    assert result.reward == 0.75 and not result.failed_kinds
    assert result.usage_per_model == {"judge-small": {"prompt_tokens": 7, "completion_tokens": 3,
                                                      "total_tokens": 10}}  # fmt: skip
    sent = upstream.seen[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-up"
    assert sent["model"] == "small" and sent["temperature"] == 0.5 and sent["seed"] == 3
    assert sent["messages"] == [{"role": "user", "content": "Rate four"}]
    # A name no route serves: the sample scores 0 as the server error OpenAI names.
    other = parse_grader({**grader.model_dump(exclude_none=True), "model": "elsewhere"})
    failed = run_grader(other, "four", {}, Grading(chat=chat))
    assert failed.reward == 0.0 and failed.failed_kinds == ["model_grader_server_error"]
    assert "no upstream serves 'elsewhere'" in failed.details["model_grader_server_error_details"]
