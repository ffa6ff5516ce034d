"""``graders/run`` cannot take the server from other tenants (the security review's N1, N3, N9):
a grader's output is never read whole, a run holds no thread of the API's pool, one request's
grading is bounded (sub-graders, a total deadline, the tenant's and the server's share), and it
stops when its client goes away. Each attack goes through a real HTTP server (uvicorn in a
thread of this process, the embedded stack, API keys); the sandboxes it runs are this process's
descendants, counted by their command line."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.services.shares import GRADER_RUNS
from tests.api.sandboxes import PeakMemory, Server, grader_server, keepers, python_grader, sleeping
from tests.support import wait_until

RUN = "/v1/fine_tuning/alpha/graders/run"
VALIDATE = "/v1/fine_tuning/alpha/graders/validate"
EXACT = {"type": "string_check", "name": "exact", "operation": "eq",
         "input": "{{ sample.output_text }}", "reference": "4"}  # fmt: skip


@pytest.fixture
def server(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_sqlite: Path
) -> Iterator[Server]:
    """Settings from the test's ``settings`` mark."""
    mark = request.node.get_closest_marker("settings")
    update = mark.kwargs if mark else {}
    with grader_server(tmp_path / "home", migrated_sqlite, **update) as served:
        yield served


def run(server: Server, tenant: str, grader: dict[str, Any], timeout: float = 60) -> httpx.Response:
    body = {"grader": grader, "model_sample": "4", "item": {}}
    return httpx.post(server.url + RUN, json=body, headers=server.headers(tenant), timeout=timeout)


async def _hold(server: Server, tenant: str, grader: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120) as client:
        body = {"grader": grader, "model_sample": "4", "item": {}}
        return await client.post(server.url + RUN, json=body, headers=server.headers(tenant))


def test_a_grader_writing_a_gigabyte_leaves_the_api_s_memory_flat(server: Server) -> None:
    """N1: 512 MiB to stderr and 512 MiB to stdout (the review's 1.5 GiB took the API from 170 to
    3,209 MiB). Nothing of it is read: the API's memory stays within 64 MiB of where it was,
    and the grader's score is its own."""
    writer = python_grader("    block = b'E' * (1 << 20)\n    for _ in range(512):\n"
                           "        os.write(2, block)\n        os.write(1, block)\n"
                           "    return 1\n")  # fmt: skip
    with PeakMemory("self") as memory:
        answer = run(server, "alice", writer, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["reward"] == 1.0
    assert memory.peak - memory.start < 64 << 20, (memory.start >> 20, memory.peak >> 20)


@pytest.mark.settings(max_grader_runs=40, max_grader_runs_per_tenant=40, grader_wall_s=90)
def test_forty_sleeping_graders_leave_another_tenant_answered(server: Server) -> None:
    """N3: 40 runs sleeping at once (anyio's pool has 40 threads, and each used to hold one) and
    bob's ``validate``, a sync route, is answered while all 40 still grade. Then their clients
    go: every sandbox is gone soon after, long before its sleep would end."""

    async def attack() -> None:
        held = [asyncio.create_task(_hold(server, "alice", sleeping(60))) for _ in range(40)]
        await asyncio.to_thread(
            wait_until, lambda: keepers() == 40, timeout=120, what="40 sandboxes"
        )
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.post(server.url + VALIDATE, json={"grader": EXACT},
                                       headers=server.headers("bob"))  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert not any(task.done() for task in held) and keepers() == 40
        for task in held:  # alice's clients go away
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    asyncio.run(attack())
    wait_until(lambda: keepers() == 0 or None, timeout=20, what="every sandbox gone")
    wait_until(lambda: GRADER_RUNS._total == 0 or None, timeout=20, what="the runs given back")


def test_a_client_that_goes_away_takes_its_sandbox_with_it(server: Server) -> None:
    """N3: the grading stops with its request (it used to run its full wall clock, and a multi's
    later sub-graders started with no client at all)."""
    multi = {"type": "multi", "name": "slow", "calculate_output": "a + b",
             "graders": {"a": sleeping(60), "b": sleeping(60)}}  # fmt: skip

    async def leave() -> None:
        held = asyncio.create_task(_hold(server, "alice", multi))
        await asyncio.to_thread(wait_until, lambda: keepers() == 1 or None, timeout=60,
                                what="the sandbox")  # fmt: skip
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)

    asyncio.run(leave())
    wait_until(lambda: keepers() == 0 or None, timeout=10, what="the sandbox gone")
    time.sleep(1.0)  # the second sub-grader would have started by now
    assert keepers() == 0


def test_a_multi_grader_holds_at_most_16_sub_graders(server: Server) -> None:
    """N3: 8,500 python sub-graders fit in a 1 MB body (about 12 days of grading at the default
    limits); refused at validate, at run and in a job, naming the cap."""
    tiny = {"type": "python", "name": "p", "source": "def grade(s, i):\n return 1"}
    many = {"type": "multi", "name": "many", "calculate_output": "g0",
            "graders": {f"g{i}": tiny for i in range(8500)}}  # fmt: skip
    headers = server.headers("alice")
    for path, body in ((VALIDATE, {"grader": many}),
                       (RUN, {"grader": many, "model_sample": "x"})):  # fmt: skip
        answer = httpx.post(server.url + path, json=body, headers=headers, timeout=30)
        assert answer.status_code == 400, (path, answer.text[:300])
        error = answer.json()["error"]
        assert error["param"] == "grader.graders" and "at most 16" in error["message"]
    job = {"model": "builtin:tiny-chat", "task": "causal-lm", "method": "grpo", "max_steps": 2,
           "dataset": "builtin:arithmetic-prompts", "grpo": {"group_size": 2, "grader": many}}  # fmt: skip
    answer = httpx.post(server.url + "/v1/jobs", json=job, headers=headers, timeout=30)
    assert answer.status_code == 422 and "at most 16" in answer.text, answer.text[:300]


@pytest.mark.settings(max_grader_runs=3, max_grader_runs_per_tenant=2)
def test_runs_past_a_share_are_a_429_naming_it(server: Server) -> None:
    """Two runs per tenant and three in all: alice's third and carol's first wait for nothing,
    they are refused naming the setting; bob's first runs."""

    async def fill() -> None:
        held = [asyncio.create_task(_hold(server, "alice", sleeping(60))) for _ in range(2)]
        await asyncio.to_thread(wait_until, lambda: keepers() == 2 or None, timeout=60,
                                what="alice's two")  # fmt: skip
        held.append(asyncio.create_task(_hold(server, "bob", sleeping(60))))
        await asyncio.to_thread(wait_until, lambda: keepers() == 3 or None, timeout=60,
                                what="bob's")  # fmt: skip
        for tenant, setting in (("alice", "GRADACC_MAX_GRADER_RUNS_PER_TENANT"),
                                ("carol", "GRADACC_MAX_GRADER_RUNS")):  # fmt: skip
            refused = await asyncio.to_thread(run, server, tenant, EXACT)
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("too_many_grader_runs", setting)
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    asyncio.run(fill())
    wait_until(lambda: GRADER_RUNS._total == 0 or None, timeout=20, what="the runs given back")
    assert run(server, "carol", EXACT).json()["reward"] == 1.0


@pytest.mark.settings(grader_run_deadline_s=3.0)
def test_one_request_s_grading_ends_at_its_deadline(server: Server) -> None:
    """Three sub-graders of 2 s each under a 3 s deadline: the first scores, the second is cut
    off, the third never starts; the answer comes at the deadline, not after 6 s."""
    multi = {"type": "multi", "name": "three", "calculate_output": "a + b + c",
             "graders": {"a": sleeping(2), "b": sleeping(2), "c": sleeping(2)}}  # fmt: skip
    answer = run(server, "alice", multi)
    assert answer.status_code == 200, answer.text
    ran = answer.json()
    assert ran["sub_rewards"] == {"a": 1.0, "b": 0.0, "c": 0.0}
    assert ran["metadata"]["errors"]["unresponsive_reward_error"]
