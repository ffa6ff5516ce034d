"""A model grader's model is checked once for every door a grader comes in by (a real API server
on the embedded stack, API keys, the official SDK where it has the call): a name nothing answers
to, or another tenant's ``ft:`` model, is the same refusal naming the grader's ``model`` field
from ``graders.validate``, ``graders.run`` and a ``method: reinforcement`` job's POST (a 400, as
OpenAI answers) and a ``grpo`` job's on ``/v1/jobs`` (a 422, as that API answers every refused
body), and no job is made; for the model's owner each passes. No worker runs here: the owner's
``graders.run`` gets past the check and says no predict server is up (a job would wait for one)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.api.sandboxes import Server, grader_server
from tests.gradacc.test_grader_models import multi, own_model, score

PROMPTS = [{"messages": [{"role": "user", "content": f"{i} plus 1?"}], "answer": str(i + 1)}
           for i in range(4)]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, migrated_sqlite: Path) -> Iterator[Server]:
    with grader_server(tmp_path_factory.mktemp("judges") / "home", migrated_sqlite) as served:
        yield served


def sdk(server: Server, tenant: str) -> openai.OpenAI:
    key = server.keys[tenant]
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


class Refused(Exception):
    """A refusal of gradacc's own API (no SDK there): its status and ``param``."""

    def __init__(self, status: int, param: str) -> None:
        super().__init__(f"{status} {param}")
        self.status, self.param = status, param


def refusal(call: Callable[[Any], Any], grader: Any) -> tuple[int, str]:
    try:
        call(grader)
    except openai.BadRequestError as refused:
        return refused.status_code, str(refused.param)
    except Refused as refused:
        return refused.status, refused.param
    raise AssertionError(f"taken: {grader}")


def doors(server: Server, tenant: str) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """Each way a grader comes in: the prefix of the grader's path there, and ``call(grader)``,
    its answer or the 400 it raised."""
    client = sdk(server, tenant)
    data = "".join(json.dumps(row) + "\n" for row in PROMPTS).encode()
    train, valid = (client.files.create(file=(f"{n}.jsonl", data), purpose="fine-tune").id
                    for n in ("train", "valid"))  # fmt: skip

    def grpo(grader: Any) -> Any:
        job = {"model": "builtin:tiny-chat", "task": "causal-lm", "method": "grpo",
               "dataset": "builtin:arithmetic-prompts", "max_steps": 1,
               "grpo": {"group_size": 2, "grader": grader}}  # fmt: skip
        answer = httpx.post(f"{server.url}/v1/jobs", json=job, headers=server.headers(tenant))
        if answer.status_code == 422:  # gradacc's own API: every refusal of a body is a 422
            raise Refused(answer.status_code, answer.json()["error"]["param"])
        assert answer.status_code == 201, answer.text
        return answer.json()

    def reinforcement(grader: Any) -> Any:
        method: Any = {"type": "reinforcement", "reinforcement": {"grader": grader}}
        return client.fine_tuning.jobs.create(model="builtin:tiny-chat", training_file=train,
                                              validation_file=valid, method=method)  # fmt: skip

    graders = client.fine_tuning.alpha.graders
    return {
        "validate": ("", lambda grader: graders.validate(grader=grader)),
        "run": ("", lambda grader: graders.run(grader=grader, model_sample="4", item={"a": 1})),
        "grpo": ("grpo.", grpo),
        "reinforcement": ("method.reinforcement.", reinforcement),
    }


def test_a_model_that_does_not_answer_for_the_tenant_is_one_400_at_every_door(
    server: Server,
) -> None:
    bobs = own_model(server.settings, "bob")
    at = doors(server, "alice")
    jobs_before = len(sdk(server, "alice").fine_tuning.jobs.list().data)
    for model in ("no-such-model", bobs):
        for grader, field in ((score(model), "grader.model"),
                              (multi(model), "grader.graders.l.model")):  # fmt: skip
            for door, (prefix, call) in at.items():
                status = 422 if door == "grpo" else 400
                assert refusal(call, grader) == (status, prefix + field), (model, door)
    assert len(sdk(server, "alice").fine_tuning.jobs.list().data) == jobs_before  # none made


def test_the_models_owner_passes_every_door(server: Server) -> None:
    bobs = own_model(server.settings, "bob")
    at = doors(server, "bob")
    grader = score(bobs)
    assert at["validate"][1](grader).grader.model == bobs
    ran = at["run"][1](grader).to_dict()
    assert ran["reward"] == 0.0 and ran["metadata"]["errors"]["model_grader_server_error"]
    details = ran["metadata"]["errors"]["model_grader_server_error_details"]
    assert "predict server is up" in details
    assert at["grpo"][1](grader)["spec"]["grpo"]["grader"]["model"] == bobs
    assert at["reinforcement"][1](grader).status in ("queued", "validating_files")
