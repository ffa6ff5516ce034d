"""Method grpo on /v1/jobs where it arrives (both databases, no worker): a prompt file (messages
ending with a user turn, other fields kept for the grader) uploads and is recorded as prompts; a
grpo job on it is made; every bad grpo spec is a 4xx naming its field (the grader's by its path,
the batch that is not whole groups, packing, the task, a conversation file, a model grader whose
model does not answer for the tenant, an evaluation without validation prompts) and leaves no job
behind, while a model grader on this server's own built-in is taken; the built-in prompts
(builtin:arithmetic-prompts) take grpo, and sft or dpo on them is a 422 naming the field."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from commands import demo_rl
from tests.api.test_chat_data import GOOD, jsonl, upload

PROMPTS = [
    {"messages": [{"role": "system", "content": "Answer with a number."},
                  {"role": "user", "content": f"what is {a} plus {a}?"}], "answer": str(2 * a)}
    for a in range(4)
]  # fmt: skip
CHECK = {"type": "string_check", "name": "exact", "operation": "like",
         "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}  # fmt: skip
SCORE = {"type": "score_model", "name": "judge", "model": "builtin:tiny-chat",
         "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}]}  # fmt: skip


def grpo_job(dataset: str, **grpo: Any) -> dict[str, Any]:
    return {"model": "builtin:tiny-chat", "task": "causal-lm", "method": "grpo",
            "dataset": dataset, "per_device_train_batch_size": 2, "effective_batch_size": 4,
            "max_steps": 2, "grpo": {"group_size": 2, "grader": CHECK, **grpo}}  # fmt: skip


def similarity(metric: str) -> dict[str, Any]:
    kept = {k: v for k, v in CHECK.items() if k != "operation"}
    return {**kept, "type": "text_similarity", "evaluation_metric": metric}


def _with(body: dict[str, Any], **grpo: Any) -> dict[str, Any]:
    return {**body, "grpo": {**body["grpo"], **grpo}}


def _names(client: TestClient) -> set[str]:
    return {job["name"] for job in client.get("/v1/jobs?limit=100").json()["data"]}


def test_a_prompt_file_uploads_as_prompts_and_a_grpo_job_takes_it(client: TestClient) -> None:
    answer = upload(client, "prompts.jsonl", jsonl(PROMPTS))
    assert answer.status_code == 201, answer.text
    details = answer.json()["details"]
    assert details["prompts"] is True and details["untrained_rows"] == 4
    assert details["dataset_format"] == "messages"
    job = client.post("/v1/jobs", json=grpo_job(answer.json()["id"], loss_type="dr_grpo"))
    assert job.status_code == 201, job.text
    spec = job.json()["spec"]
    assert spec["method"] == "grpo" and spec["grpo"]["loss_type"] == "dr_grpo"
    assert spec["grpo"]["grader"]["reference"] == "{{ item.answer }}"
    # A conversation file is no prompt file; a prompt file trains nothing in sft.
    chat = upload(client, "chat.jsonl", jsonl(GOOD * 2)).json()
    assert "prompts" not in chat["details"]
    sft = {**grpo_job(answer.json()["id"]), "method": "sft", "grpo": None}
    cases = [(grpo_job(chat["id"]), "dataset", "not all prompts"),
             (sft, "dataset", "train it with method grpo")]  # fmt: skip
    for body, param, said in cases:
        refused = client.post("/v1/jobs", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["param"] == param
        assert said in refused.json()["error"]["message"]


def test_a_file_of_prompts_and_conversations_names_the_untrained_rows(client: TestClient) -> None:
    """A row with nothing to train passes only in a file whose rows all end with a user turn."""
    answer = upload(client, "mixed.jsonl", jsonl([GOOD[0], PROMPTS[0]]))
    assert answer.status_code == 422, answer.text
    assert [e["message"] for e in answer.json()["error"]["errors"]] == [
        "line 2: messages: at least one assistant message to train (weight not 0)"
    ]


def test_bad_grpo_specs_name_their_field_and_make_no_job(client: TestClient) -> None:
    prompts = upload(client, "prompts.jsonl", jsonl(PROMPTS)).json()["id"]
    good = grpo_job(prompts)
    multi = {"type": "multi", "name": "m", "calculate_output": "a + j",
             "graders": {"a": CHECK, "j": {**SCORE, "model": "nowhere-model"}}}  # fmt: skip
    cases = [
        (_with(good, grader={**CHECK, "operation": "regex"}), "grpo.grader.operation"),
        (_with(good, grader=similarity("cosine")), "grpo.grader.evaluation_metric"),
        (_with(good, grader=similarity("meteor")), "grpo.grader.evaluation_metric"),
        (_with(good, group_size=3), "effective_batch_size"),
        (_with(good, loss_type="bnpo"), "grpo.loss_type"),
        (_with(good, num_iterations=2), "grpo.num_iterations"),
        ({**good, "grpo": None}, "grpo"),
        ({**good, "method": "sft"}, "grpo"),
        ({**good, "packing": True}, "packing"),
        ({**good, "dataset": "builtin:chat-arithmetic"}, "method"),
        ({**good, "task": "sequence-classification", "model": "builtin:tiny-gpt2"}, "method"),
        (_with(good, grader={**SCORE, "model": "nowhere-model"}), "grpo.grader.model"),
        (_with(good, grader=multi), "grpo.grader.graders.j.model"),
        (_with(good, eval_interval=1), "grpo.eval_interval"),  # a file: no validation split
    ]  # fmt: skip
    name = f"refused-{secrets.token_hex(4)}"
    for body, param in cases:
        answer = client.post("/v1/jobs", json={**body, "name": name})
        assert answer.status_code in (400, 422), (param, answer.text)
        assert answer.json()["error"]["param"] == param, (param, answer.text)
    assert name not in _names(client)
    assert client.post("/v1/jobs", json={**good, "name": name}).status_code == 201
    assert name in _names(client)
    # This server's own model grades inside a job: its worker's predict server answers it.
    judged = client.post("/v1/jobs", json=_with(good, grader=SCORE))
    assert judged.status_code == 201, judged.text


def test_the_built_in_prompts_take_grpo_and_refuse_sft_and_dpo(client: TestClient) -> None:
    """builtin:arithmetic-prompts: a grpo job, evaluated on its validation split, is made; sft
    and dpo on it are 422s naming the data's field, and make no job."""
    good = _with(grpo_job("builtin:arithmetic-prompts"), eval_interval=1)
    made = client.post("/v1/jobs", json=good)
    assert made.status_code == 201, made.text
    assert made.json()["spec"]["dataset"] == "builtin:arithmetic-prompts"
    name = f"refused-{secrets.token_hex(4)}"
    sft = {**good, "method": "sft", "grpo": None, "name": name}
    dpo = {**sft, "method": "dpo"}
    as_eval = {**sft, "dataset": "builtin:chat-arithmetic",
               "eval_dataset": "builtin:arithmetic-prompts"}  # fmt: skip
    for body, param in ((sft, "dataset"), (dpo, "dataset"), (as_eval, "eval_dataset")):
        refused = client.post("/v1/jobs", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["param"] == param
        assert "train it with method grpo" in refused.json()["error"]["message"]
    assert name not in _names(client)


def test_the_demos_prompt_file_and_job_are_taken(client: TestClient, tmp_path: Path) -> None:
    """What ``make run`` uploads and submits (commands/demo_rl.py): its 32 prompts are recorded as
    prompts, and its GRPO job (b 32 x K 4, 16 prompts x 8 a window, evaluated on the same file)
    is made as sent."""
    path = demo_rl.prompt_file(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == demo_rl.PROMPTS and all(
        row["messages"][-1]["role"] == "user" for row in rows
    )
    assert all(row["answer"].endswith(f" is {row['result']}.") for row in rows)
    answer = upload(client, path.name, path.read_bytes())
    assert answer.json()["details"]["prompts"] is True, answer.text
    made = client.post("/v1/jobs", json=demo_rl.rl_spec("builtin:tiny-chat", answer.json()["id"]))
    assert made.status_code == 201, made.text
    spec = made.json()["spec"]
    assert spec["eval_dataset"] == spec["dataset"] == answer.json()["id"]
    assert (
        spec["gradient_accumulation_steps"] == 4 and spec["grpo"]["eval_samples"] == demo_rl.PROMPTS
    )
