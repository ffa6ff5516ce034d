"""GRADACC_SERVE_UPSTREAMS against a real upstream: a second ``gradacc serve`` (B, embedded, with
its predict server and API keys) answers what API A (PostgreSQL + Redis) sends it, by an exact
name, a renamed one and a ``prefix*`` glob, with B's key. Through the official ``openai`` SDK on
A: a greedy chat completion equals what B answers directly; a stream's pieces join to the same
text and end in ``[DONE]`` with usage; B's refusals pass through in OpenAI's shape; another
tenant's ``ft:`` name is a 404 on A although ``*`` matches it (while the owner's own is forwarded);
an upstream that cannot be reached, or refuses A's key, is a 503; /v1/models lists the exact
names. Nothing is trained on B; A trains one 8-row job, for a real ``ft:`` name of alice's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import serve_with_keys
from tests.support import free_port, wait_final, wait_until

pytestmark = pytest.mark.integration
B_LIMIT = 48  # B's GRADACC_SERVE_MAX_COMPLETION_TOKENS (A's is the default, 1024)
BASE = "builtin:tiny-chat"
JOB = {"model": BASE, "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
       "num_train_epochs": 1, "max_train_samples": 8, "max_eval_samples": 8,
       "per_device_train_batch_size": 8}  # fmt: skip
MESSAGES: Any = [{"role": "user", "content": "what is 2 plus 3?"}]
NAMES = (BASE, "tiny", f"b/{BASE}")  # exact, renamed, through the glob (prefix stripped)


@dataclass
class Upstream:
    url: str
    alice: openai.OpenAI  # B's own client, to compare with


@dataclass
class Front:
    url: str
    alice: openai.OpenAI
    bob: openai.OpenAI
    keys: dict[str, str]
    fine_tuned: str  # alice's ft: model on A


def _sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def _answers(sdk: openai.OpenAI) -> bool:
    try:
        sdk.chat.completions.create(model=BASE, messages=MESSAGES, max_tokens=1)
    except openai.InternalServerError as exc:
        assert exc.status_code == 503, exc
        return False
    return True


@pytest.fixture(scope="module", params=["embedded"])
def upstream(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Upstream]:
    env = {"GRADACC_PREDICT_SERVER": "true", "GRADACC_SERVE_TIMEOUT_S": "30",
           "GRADACC_SERVE_MAX_COMPLETION_TOKENS": str(B_LIMIT)}  # fmt: skip
    with serve_with_keys(request, tmp_path_factory.mktemp("b"), env) as (_, url, keys):
        alice = _sdk(url, keys["alice"])
        # B's predict server listens once torch is imported: a 503 until then.
        wait_until(lambda: _answers(alice), what="B's predict server", timeout=120)
        yield Upstream(url, alice)


def _mapping(b_url: str) -> str:
    to_b = {"base_url": f"{b_url}/v1", "api_key_env": "UPSTREAM_B_KEY"}
    return json.dumps({
        BASE: to_b,
        "tiny": to_b | {"model": BASE},
        "b/*": to_b | {"model": "*"},
        "wrong-key/*": {"base_url": f"{b_url}/v1", "api_key": "sk-not-b", "model": "*"},
        "*": {"base_url": f"http://127.0.0.1:{free_port()}/v1"},  # nothing listens there
    })  # fmt: skip


@pytest.fixture(scope="module", params=["pg_redis"])
def front(
    request: pytest.FixtureRequest, upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Front]:
    b_key = str(upstream.alice.api_key)
    env = {"GRADACC_SERVE_UPSTREAMS": _mapping(upstream.url), "UPSTREAM_B_KEY": b_key}
    with serve_with_keys(request, tmp_path_factory.mktemp("a"), env) as (_, url, keys):
        headers = {"Authorization": f"Bearer {keys['alice']}"}
        with httpx.Client(base_url=url, timeout=60, headers=headers) as client:
            created = client.post("/v1/jobs", json=JOB)
            assert created.status_code == 201, created.text
            job_id = created.json()["id"]
            assert wait_final(client, job_id, timeout=240)["status"] == "succeeded"
        model = f"ft:{BASE}:alice::{job_id}"
        yield Front(url, _sdk(url, keys["alice"]), _sdk(url, keys["bob"]), keys, model)


def test_a_answers_as_b_does_by_name_rename_and_glob(upstream: Upstream, front: Front) -> None:
    direct = upstream.alice.chat.completions.create(model=BASE, messages=MESSAGES,
                                                    max_completion_tokens=16, temperature=0)  # fmt: skip
    assert direct.choices[0].message.content
    for name in NAMES:
        answer = front.alice.chat.completions.create(model=name, messages=MESSAGES,
                                                     max_completion_tokens=16, temperature=0)  # fmt: skip
        assert answer.choices[0].message == direct.choices[0].message, name
        assert answer.choices[0].finish_reason == direct.choices[0].finish_reason
        assert answer.usage == direct.usage
        assert answer.model == BASE  # as B names it: the answer passes through unchanged
    prompt = front.alice.completions.create(model="tiny", prompt="what is 7 plus 1? ",
                                            max_tokens=8, temperature=0)  # fmt: skip
    mine = upstream.alice.completions.create(model=BASE, prompt="what is 7 plus 1? ",
                                             max_tokens=8, temperature=0)  # fmt: skip
    assert prompt.choices[0].text == mine.choices[0].text


def test_a_stream_through_a_joins_to_b_s_answer_and_ends_in_done(
    upstream: Upstream, front: Front
) -> None:
    direct = upstream.alice.chat.completions.create(model=BASE, messages=MESSAGES,
                                                    max_completion_tokens=16, temperature=0)  # fmt: skip
    stream = front.alice.chat.completions.create(model=f"b/{BASE}", messages=MESSAGES,
                                                 max_completion_tokens=16, temperature=0, stream=True,
                                                 stream_options={"include_usage": True})  # fmt: skip
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 1  # it did arrive in pieces
    assert "".join(pieces) == direct.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage == direct.usage
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 4, "stream": True}
    headers = {"Authorization": f"Bearer {front.keys['alice']}"}
    with httpx.stream("POST", f"{front.url}/v1/chat/completions", json=body, headers=headers,
                      timeout=60) as raw:  # fmt: skip
        assert raw.headers["content-type"].startswith("text/event-stream")
        events = [line for line in raw.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) > 2


def test_b_s_refusals_pass_through(front: Front) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": "b/builtin:tiny-bert"}, "model"),  # a classifier, on B
        ({"max_completion_tokens": B_LIMIT + 1}, "max_completion_tokens"),  # B's limit
    ]
    for extra, param in cases:
        body: dict[str, Any] = {"model": f"b/{BASE}", "messages": MESSAGES, **extra}
        with pytest.raises(openai.BadRequestError) as refused:
            front.alice.chat.completions.create(**body)
        assert refused.value.param == param, refused.value.body
        assert str(B_LIMIT) in refused.value.message or param == "model"


def test_the_tenant_check_is_done_on_a_before_any_route(front: Front) -> None:
    with pytest.raises(openai.NotFoundError) as other:
        front.bob.chat.completions.create(model=front.fine_tuned, messages=MESSAGES)
    assert isinstance(other.value.body, dict) and other.value.body["code"] == "model_not_found"
    # The owner's own name passed the check and took the "*" route, to a server that is not there.
    with pytest.raises(openai.InternalServerError) as forwarded:
        front.alice.chat.completions.create(model=front.fine_tuned, messages=MESSAGES)
    assert forwarded.value.status_code == 503 and "cannot be reached" in forwarded.value.message


def test_an_upstream_not_there_or_refusing_a_s_key_is_a_503(front: Front) -> None:
    for name, says in (("hub/some-model", "cannot be reached"),
                       (f"wrong-key/{BASE}", "refused this API's key")):  # fmt: skip
        with pytest.raises(openai.InternalServerError) as refused:
            front.alice.chat.completions.create(model=name, messages=MESSAGES, stream=True)
        assert refused.value.status_code == 503 and says in refused.value.message, name
        assert f"the upstream server for {name!r}" in refused.value.message


def test_models_list_the_exact_names(front: Front) -> None:
    listed = {m.id: m.owned_by for m in front.alice.models.list()}
    assert listed["tiny"] == "upstream" and listed[BASE] == "gradacc"
    assert not [name for name in listed if "*" in name]
    assert front.bob.models.retrieve("tiny").owned_by == "upstream"
