"""OpenAI's reinforcement fine-tuning with the official ``openai`` package against a live
``gradacc serve`` (embedded stack, one worker): upload prompt files, create a ``method:
reinforcement`` job whose ``multi`` grader holds a ``string_check``, a python grader that scores,
and four python graders that try what the sandbox forbids (a socket to this server, a read of a
repository file, an endless loop, an unbounded allocation). The job succeeds, its metrics events
carry the reward per step, each forbidden grader scores 0 and is counted by OpenAI's error kind.
``graders.run`` on the same server answers a body the SDK parses as its own type.

One job for both claims: a job of its own for the well-behaved grader would cost another
training child (~5 s of CPU) and show nothing the sub-rewards here do not. The sandbox's limits
are small (GRADACC_GRADER_CPU_S 1 s) so the endless loop costs one second per answer."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.fine_tuning.alpha import GraderRunResponse

from tests.conftest import ROOT
from tests.e2e.conftest import serve_with_keys
from tests.e2e.test_openai_sdk import wait_status

pytestmark = pytest.mark.integration

SANDBOX = {"GRADACC_GRADER_CPU_S": "1", "GRADACC_GRADER_WALL_S": "10"}
PROMPTS, GROUP, BATCH = 2, 2, 1  # two steps of 1 prompt x 2 answers
EXACT = {"type": "string_check", "name": "exact", "operation": "eq",
         "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}  # fmt: skip


def python(name: str, body: str) -> dict[str, Any]:
    source = f"import socket\n\ndef grade(sample, item):\n{body}"
    return {"type": "python", "name": name, "source": source}


def forbidden(port: int) -> dict[str, dict[str, Any]]:
    """Each returns 1.0 only if what it tries works: a 0 with an error is the sandbox's doing."""
    return {
        "socket": python("socket", f"    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                                   "    return 1.0\n"),
        "file": python("file", f"    return float(len(open({str(ROOT / 'pyproject.toml')!r})"
                               ".read()) > 0)\n"),
        "loop": python("loop", "    while True:\n        pass\n"),
        "alloc": python("alloc", "    kept = []\n    while True:\n"
                                 "        kept.append(bytearray(1 << 24))\n"),
    }  # fmt: skip


def grader(port: int) -> Any:
    graders = {"exact": EXACT, "ok": python("ok", "    return 1.0\n"), **forbidden(port)}
    return {"type": "multi", "name": "all", "graders": graders,
            "calculate_output": " + ".join(graders)}  # fmt: skip


def prompts(rows: int, start: int = 0) -> bytes:
    lines = [{"messages": [{"role": "user", "content": f"What is {i} plus 1?"}],
              "answer": str(i + 1)} for i in range(start, start + rows)]  # fmt: skip
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@pytest.fixture(scope="module", params=["embedded"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, int]]:
    home = tmp_path_factory.mktemp("rft")
    with serve_with_keys(request, home, SANDBOX) as (_, url, keys):
        port = int(url.rsplit(":", 1)[1])
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=keys["alice"], max_retries=0,
                            timeout=60), port  # fmt: skip


@pytest.fixture(scope="module")
def trained(served: tuple[openai.OpenAI, int]) -> Any:
    client, port = served
    train = client.files.create(file=("train.jsonl", prompts(PROMPTS)), purpose="fine-tune")
    valid = client.files.create(file=("valid.jsonl", prompts(2, 10)), purpose="fine-tune")
    method: Any = {"type": "reinforcement", "reinforcement": {"grader": grader(port),
                   "hyperparameters": {"batch_size": BATCH, "compute_multiplier": GROUP / 8,
                                       "n_epochs": 1, "eval_samples": 1}}}  # fmt: skip
    job = client.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=train.id, validation_file=valid.id, seed=7,
        method=method,
        extra_body={"gradacc": {"grpo": {"max_completion_length": 6}}},
    )  # fmt: skip
    return wait_status(client, job.id, "succeeded", timeout=600)


def test_a_reinforcement_job_reports_its_reward_per_step(
    served: tuple[openai.OpenAI, int], trained: Any
) -> None:
    client, _ = served
    assert trained.method.type == "reinforcement" and trained.fine_tuned_model
    hyper = trained.method.reinforcement.hyperparameters
    assert (hyper.batch_size, hyper.compute_multiplier, hyper.eval_interval) == (1, 0.25, 2)
    events = list(client.fine_tuning.jobs.list_events(trained.id, limit=100))
    metrics: list[Any] = [e.data for e in events if e.type == "metrics"]
    assert [m["step"] for m in metrics] == [2, 1]
    answers = BATCH * GROUP
    for data in metrics:
        assert isinstance(data, dict)
        subs = {name: data[f"train_rewards_{name}_mean"] for name in grader(0)["graders"]}
        assert subs["ok"] == 1.0  # the sandbox runs a grader that keeps to itself
        assert data["train_reward_mean"] == pytest.approx(subs["exact"] + 1.0)
        # Each forbidden grader scored 0 on every answer, and was counted by its kind: three
        # runtime errors (socket, file, allocation) and the loop's unresponsive one, per answer.
        assert [subs[name] for name in ("socket", "file", "loop", "alloc")] == [0.0] * 4
        assert data["train_grader_errors_python_grader_runtime_error"] == answers
        assert data["train_grader_errors_unresponsive_reward_error"] == answers
        assert data["train_grader_errors"] == 2 * answers
    # eval_interval 2 ("auto": one evaluation an epoch): step 2 graded the first validation
    # prompt's answer, with the same grader, and counted its errors too.
    assert "valid_reward_mean" not in metrics[1]
    assert metrics[0]["valid_rewards_ok_mean"] == 1.0 and metrics[0]["valid_rewards_loop_mean"] == 0
    assert metrics[0]["valid_grader_errors_unresponsive_reward_error"] == 1
    newest = next(e for e in events if e.type == "metrics")
    assert "reward mean=" in newest.message and "validation reward mean=" in newest.message
    (results,) = trained.result_files
    rows = list(csv.DictReader(io.StringIO(client.files.content(results).text)))
    assert [row["step"] for row in rows] == ["1", "2"]
    by_step = [m["train_reward_mean"] for m in reversed(metrics)]
    assert [float(row["train_reward_mean"]) for row in rows] == by_step


def test_graders_run_answers_the_sdks_type(served: tuple[openai.OpenAI, int]) -> None:
    client, port = served
    two: Any = {**grader(port), "graders": {"exact": EXACT, "socket": forbidden(port)["socket"]},
                "calculate_output": "exact + socket"}  # fmt: skip
    ran = client.fine_tuning.alpha.graders.run(grader=two, model_sample="4", item={"answer": "4"})
    assert isinstance(ran, GraderRunResponse)
    assert ran.reward == 1.0 and ran.sub_rewards == {"exact": 1.0, "socket": 0.0}
    assert ran.metadata.errors.python_grader_runtime_error
    assert "unreachable" in (ran.metadata.errors.python_grader_runtime_error_details or "")
