"""Chat and completions through an upstream route cannot reach another tenant's model or take the
server from other tenants (the security review's N4 and N5). The upstream is a stand-in HTTP
server on this machine that logs what it is sent and holds the requests for one model name
until told; the API is a real server (uvicorn in a thread, the embedded stack, API keys)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.services.shares import CHAT_TOKENS, CHATS
from tests.api.sandboxes import Server, grader_server
from tests.support import wait_until
from tests.upstream_stub import StubUpstream, stub_upstream

BOBS = "ft:builtin:tiny-chat:bob:bobm:job_01a2410b1dce4be619bd"  # another tenant's model
MESSAGES = [{"role": "user", "content": "2 + 2?"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[StubUpstream]:
    """It holds the requests for "slow" until released."""
    with stub_upstream(StubUpstream(held=frozenset({"slow"}))) as stub:
        yield stub


@pytest.fixture(scope="module")
def server(
    upstream: StubUpstream, tmp_path_factory: pytest.TempPathFactory, migrated_sqlite: Path
) -> Iterator[Server]:
    """The review's documented route: ``"up/*"`` rewritten to ``*`` (the prefix stripped)."""
    routes = json.dumps({"up/*": {"base_url": upstream.url, "api_key": "sk-up", "model": "*"}})
    home = tmp_path_factory.mktemp("shares") / "home"
    with grader_server(home, migrated_sqlite, serve_upstreams=routes, max_chats_per_tenant=2,
                       max_chat_tokens_per_tenant=4096) as served:  # fmt: skip
        yield served


def chat(server: Server, tenant: str, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": MESSAGES, **extra}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body,
                      headers=server.headers(tenant), timeout=60)  # fmt: skip


def test_a_rewrite_to_another_tenant_s_model_is_a_404_and_never_sent(
    server: Server, upstream: StubUpstream
) -> None:
    """N4: the own-name check used to test the client's name only: ``up/ft:…:bob:…`` passed it
    and reached the upstream as bob's ``ft:`` name, with the server's key. Now the name sent is
    checked too, in any case or spacing, by chat, completions, graders/run and a job's POST."""
    upstream.seen.clear()
    for name in (f"up/{BOBS}", f"up/{BOBS.upper()}", f"up/ {BOBS}"):
        answer = chat(server, "alice", name)
        assert answer.status_code == 404, (name, answer.text)
        assert answer.json()["error"]["code"] == "model_not_found"
    prompt = {"model": f"up/{BOBS}", "prompt": "2 + 2?"}
    completion = httpx.post(f"{server.url}/v1/completions", json=prompt,
                            headers=server.headers("alice"), timeout=60)  # fmt: skip
    assert completion.status_code == 404, completion.text
    judge = {"type": "score_model", "name": "judge", "model": f"up/{BOBS}",
             "input": [{"role": "user", "content": "Rate {{ sample.output_text }}"}]}  # fmt: skip
    graded = httpx.post(f"{server.url}/v1/fine_tuning/alpha/graders/run",
                        json={"grader": judge, "model_sample": "4"},
                        headers=server.headers("alice"), timeout=60)  # fmt: skip
    assert graded.status_code == 400, graded.text  # as the job's POST below: never a silent 0
    assert graded.json()["error"]["param"] == "grader.model"
    job = {"model": "builtin:tiny-chat", "task": "causal-lm", "method": "grpo", "max_steps": 2,
           "dataset": "builtin:arithmetic-prompts", "grpo": {"group_size": 2, "grader": judge}}  # fmt: skip
    posted = httpx.post(f"{server.url}/v1/jobs", json=job, headers=server.headers("alice"))
    assert posted.status_code in (400, 422), posted.text
    assert posted.json()["error"]["param"] == "grpo.grader.model"
    assert upstream.seen == []  # nothing of bob's reached the upstream
    assert chat(server, "alice", "up/gpt-4o-mini").status_code == 200  # the route itself works
    assert [sent["model"] for sent in upstream.seen] == ["gpt-4o-mini"]


def test_a_tenant_over_its_chat_share_is_a_429_while_another_is_served(
    server: Server, upstream: StubUpstream
) -> None:
    """N5: two requests in flight per tenant, 4,096 tokens of them (n x max tokens): alice's
    third and carol's n=8 x 1,024 are refused naming the setting, bob is answered meanwhile,
    and once alice's are answered her share is hers again."""
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(chat, server, "alice", "up/slow", max_tokens=16) for _ in range(2)]
        wait_until(lambda: CHATS._held.get("alice") == 2 or None, timeout=30, what="alice's two")
        third = chat(server, "alice", "up/fast", max_tokens=16)
        assert third.status_code == 429, third.text
        assert third.json()["error"]["code"] == "too_many_chat_requests"
        assert third.json()["error"]["param"] == "GRADACC_MAX_CHATS_PER_TENANT"
        assert chat(server, "bob", "up/fast").status_code == 200
        wide = chat(server, "carol", "up/fast", n=8, max_tokens=1024)
        assert wide.status_code == 429, wide.text
        assert wide.json()["error"]["param"] == "GRADACC_MAX_CHAT_TOKENS_PER_TENANT"
        assert not any(future.done() for future in held)  # alice's still held meanwhile
        upstream.release()
        assert [future.result().status_code for future in held] == [200, 200]
    assert chat(server, "alice", "up/fast", max_tokens=16).status_code == 200
    assert CHATS._total == 0 and CHAT_TOKENS._total == 0
