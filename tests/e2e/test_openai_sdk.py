"""An unmodified OpenAI fine-tuning loop, written with the official ``openai`` package, against a
live ``gradacc serve`` on both stacks (embedded; PostgreSQL + Redis): only ``base_url`` and the
key are ours. Upload, create with suffix / seed / metadata / "auto", poll, events with metrics,
checkpoints, the results file, models, fine-tune the fine-tuned model again, cancel, pause and
resume (weights equal to an uninterrupted twin's), listing, and the errors' classes."""

from __future__ import annotations

import csv
import io
import json
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from safetensors.torch import load
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from tests.e2e.conftest import serve_with_keys
from tests.support import wait_until
from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.builtin.preference_corpus import preference_arithmetic
from trainer_core.data.load import load_job_data
from trainer_core.data.splits import PreferenceSplit
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.testing.failpoints import HOLD_AT, held_marker

pytestmark = pytest.mark.integration

HOLD_STEP = 2
OURS = {"max_seq_length": 96, "logging_steps": 1, "gradient_accumulation_steps": 2}


@dataclass
class Served:
    settings: Settings
    url: str
    gate: Path
    alice: openai.OpenAI
    bob: openai.OpenAI
    keys: dict[str, str]


@pytest.fixture(scope="module", params=["embedded", "pg_redis"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("openai")
    gate = home / "hold"
    with serve_with_keys(request, home, {HOLD_AT: f"{HOLD_STEP}:{gate}"}) as (settings, url, keys):
        clients = {t: openai.OpenAI(base_url=f"{url}/v1", api_key=k, max_retries=0, timeout=60)
                   for t, k in keys.items()}  # fmt: skip
        yield Served(settings, url, gate, clients["alice"], clients["bob"], keys)


def chat_jsonl(split: str, rows: int) -> bytes:
    conversations = chat_arithmetic(split)["messages"][:rows]
    return "".join(json.dumps({"messages": c}) + "\n" for c in conversations).encode()


def wait_status(client: openai.OpenAI, job_id: str, *wanted: str, timeout: float = 300) -> Any:
    """Poll ``retrieve`` as a script does, until the job is in one of ``wanted``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.fine_tuning.jobs.retrieve(job_id)
        if job.status in wanted:
            return job
        assert job.status not in ("failed", "cancelled"), job
        time.sleep(0.5)
    raise AssertionError(f"{job_id} is still {job.status}")


def held_here(served: Served, job_id: str) -> bool:
    """``job_id``'s training process is parked at the gate (the marker holds its pid: a marker
    left by an earlier held job does not count)."""
    marker = held_marker(served.gate)
    with session_scope(served.settings) as session:
        pid = session.scalar(select(Job.pid).where(Job.id == job_id))
    return pid is not None and marker.exists() and marker.read_text() == str(pid)


def model_weights(served: Served, job_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {served.keys['alice']}"}
    archive = httpx.get(f"{served.url}/v1/jobs/{job_id}/artifacts/model", headers=headers,
                        timeout=60)  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("model.safetensors"))
        return load(tar.extractfile(member).read())  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def files(served: Served) -> dict[str, str]:
    alice = served.alice
    train = alice.files.create(file=("train.jsonl", chat_jsonl("train", 34)), purpose="fine-tune")
    valid = alice.files.create(
        file=("valid.jsonl", chat_jsonl("validation", 8)), purpose="fine-tune"
    )
    assert (train.purpose, train.status) == ("fine-tune", "processed")
    return {"train": train.id, "valid": valid.id}


@pytest.fixture(scope="module")
def tuned(served: Served, files: dict[str, str]) -> Any:
    """The loop a team's script runs: create with "auto", poll until it succeeds."""
    job = served.alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat",
        training_file=files["train"],
        validation_file=files["valid"],
        suffix="arith",
        seed=3,
        metadata={"case": "main"},
        hyperparameters={"n_epochs": "auto", "batch_size": 8, "learning_rate_multiplier": "auto"},
        extra_body={"gradacc": OURS},
    )
    assert job.status == "queued" and job.hyperparameters.n_epochs == 3  # 34 rows x 3 >= 100
    return wait_status(served.alice, job.id, "succeeded")


def test_the_whole_loop(served: Served, files: dict[str, str], tuned: Any) -> None:
    alice = served.alice
    assert tuned.fine_tuned_model == f"ft:builtin:tiny-chat:alice:arith:{tuned.id}"
    assert tuned.trained_tokens and tuned.trained_tokens > 0 and tuned.finished_at
    assert tuned.organization_id == "alice" and tuned.seed == 3
    events = list(alice.fine_tuning.jobs.list_events(tuned.id, limit=100))
    metrics = [e for e in events if e.type == "metrics"]
    steps = [e.data["step"] for e in metrics]  # type: ignore[index]
    assert steps == sorted(steps, reverse=True) and steps[0] == 15  # newest first; 3 x 5 steps
    assert set(metrics[0].data) >= {
        "step",
        "train_loss",
        "valid_loss",  # type: ignore[arg-type]
        "train_mean_token_accuracy",
        "valid_mean_token_accuracy",
    }
    assert events[0].message == "training succeeded" and events[-1].message == "job created"
    checkpoints = alice.fine_tuning.jobs.checkpoints.list(tuned.id).data
    assert [c.step_number for c in checkpoints] == [15, 10, 5]  # the last three epochs'
    assert checkpoints[0].metrics.full_valid_loss is not None
    assert checkpoints[1].fine_tuned_model_checkpoint == f"{tuned.fine_tuned_model}:ckpt-step-10"
    (results_id,) = tuned.result_files
    rows = list(csv.DictReader(io.StringIO(alice.files.content(results_id).text)))
    assert list(rows[0]) == ["step", "train_loss", "train_accuracy", "valid_loss",
                             "valid_mean_token_accuracy"]  # fmt: skip
    assert [int(r["step"]) for r in rows] == sorted(steps) and rows[-1]["valid_loss"]
    assert alice.files.retrieve(results_id).purpose == "fine-tune-results"
    assert tuned.fine_tuned_model in [m.id for m in alice.models.list()]
    assert tuned.fine_tuned_model not in [m.id for m in served.bob.models.list()]
    # Fine-tune the fine-tuned model again, then one of its checkpoints (cancelled at once).
    again = alice.fine_tuning.jobs.create(model=tuned.fine_tuned_model, training_file=files["train"],
                                          hyperparameters={"n_epochs": 1, "batch_size": 8},
                                          extra_body={"gradacc": OURS})  # fmt: skip
    again = wait_status(alice, again.id, "succeeded")
    assert again.model == tuned.fine_tuned_model and again.fine_tuned_model.endswith(again.id)
    # Delete that second model: gone from the list, from the job, and as a model to train.
    assert alice.models.delete(again.fine_tuned_model).deleted
    assert again.fine_tuned_model not in [m.id for m in alice.models.list()]
    assert alice.fine_tuning.jobs.retrieve(again.id).fine_tuned_model is None
    with pytest.raises(openai.BadRequestError) as deleted:
        alice.fine_tuning.jobs.create(model=again.fine_tuned_model, training_file=files["train"])
    assert deleted.value.param == "model"
    served.gate.touch()  # held at step 2 at most: the cancel finds it unfinished, however fast
    from_checkpoint = alice.fine_tuning.jobs.create(
        model=checkpoints[1].fine_tuned_model_checkpoint, training_file=files["train"],
        hyperparameters={"batch_size": 8}, extra_body={"gradacc": OURS})  # fmt: skip
    assert alice.fine_tuning.jobs.cancel(from_checkpoint.id).status == "cancelled"
    served.gate.unlink()
    # Listing: pages and the metadata filter; the same jobs on /v1/jobs.
    page = alice.fine_tuning.jobs.list(limit=1)
    assert page.data[0].id == from_checkpoint.id and page.has_more
    assert [j.id for j in alice.fine_tuning.jobs.list(metadata={"case": "main"})] == [tuned.id]


def pause_body(files: dict[str, str]) -> dict[str, Any]:
    return {"model": "builtin:tiny-chat", "training_file": files["train"], "seed": 5,
            "hyperparameters": {"n_epochs": 2, "batch_size": 8}, "extra_body": {"gradacc": OURS}}  # fmt: skip


@pytest.fixture(scope="module")
def twin(served: Served, files: dict[str, str]) -> dict[str, Any]:
    """The weights of the paused jobs' uninterrupted twin."""
    job = served.alice.fine_tuning.jobs.create(**pause_body(files))
    wait_status(served.alice, job.id, "succeeded")
    return model_weights(served, job.id)


def held_and_paused(served: Served, files: dict[str, str]) -> str:
    """A job held at step ``HOLD_STEP`` (so it is running), then paused; its id."""
    served.gate.touch()
    job = served.alice.fine_tuning.jobs.create(**pause_body(files))
    wait_until(lambda: held_here(served, job.id), timeout=180, what="the held job")
    assert served.alice.fine_tuning.jobs.pause(job.id).status == "paused"
    return job.id


def assert_the_twins_weights(served: Served, job_id: str, twin: dict[str, Any]) -> None:
    mine = model_weights(served, job_id)
    assert mine.keys() == twin.keys()
    assert all(mine[k].equal(twin[k]) for k in mine)


def test_pause_and_resume_end_with_the_twins_weights(
    served: Served, files: dict[str, str], twin: dict[str, Any]
) -> None:
    alice = served.alice
    paused = held_and_paused(served, files)
    wait_until(
        lambda: any(
            e.message.startswith("paused at step")
            for e in alice.fine_tuning.jobs.list_events(paused)
        ),
        timeout=120,
        what="the pause's checkpoint",
    )
    served.gate.unlink()
    held_marker(served.gate).unlink(missing_ok=True)
    assert alice.fine_tuning.jobs.retrieve(paused).status == "paused"
    assert alice.fine_tuning.jobs.resume(paused).status == "queued"
    wait_status(alice, paused, "succeeded")
    messages = [e.message for e in alice.fine_tuning.jobs.list_events(paused, limit=100)]
    assert f"paused at step {HOLD_STEP}: checkpoint kept, device released" in messages, messages
    assert sum(m.startswith("started on") for m in messages) == 2  # resumed on a second run
    assert_the_twins_weights(served, paused, twin)


def test_a_resume_right_after_the_pause_is_taken(
    served: Served, files: dict[str, str], twin: dict[str, Any]
) -> None:
    """The job reads "paused" while its worker still stops the process (a checkpoint to write):
    the resume is taken then too (no 409), and the worker queues it again as it lets go."""
    alice = served.alice
    paused = held_and_paused(served, files)
    assert alice.fine_tuning.jobs.resume(paused).status in ("paused", "queued")
    # The gate stays: only the pause ends the hold, so it stops at HOLD_STEP whatever the timing
    # (the resumed run starts after that step and is not held again).
    wait_status(alice, paused, "succeeded")
    served.gate.unlink()
    held_marker(served.gate).unlink(missing_ok=True)
    messages = [e.message for e in alice.fine_tuning.jobs.list_events(paused, limit=100)]
    assert f"paused at step {HOLD_STEP}: checkpoint kept, device released" in messages, messages
    assert "resumed: queued again" in messages, messages
    assert sum(m.startswith("started on") for m in messages) == 2  # resumed on a second run
    assert_the_twins_weights(served, paused, twin)


def test_errors_raise_the_sdks_classes(served: Served, files: dict[str, str], tuned: Any) -> None:
    alice, bob = served.alice, served.bob
    with pytest.raises(openai.BadRequestError) as bad_model:
        alice.fine_tuning.jobs.create(model="nobody/no model", training_file=files["train"])
    assert bad_model.value.param == "model"
    with pytest.raises(openai.BadRequestError) as bad_file:
        alice.fine_tuning.jobs.create(model="builtin:tiny-chat",
                                      training_file="file-0123456789abcdef0123")  # fmt: skip
    assert bad_file.value.param == "training_file"
    for call in (bob.fine_tuning.jobs.retrieve, bob.fine_tuning.jobs.checkpoints.list,
                 bob.fine_tuning.jobs.list_events, bob.fine_tuning.jobs.pause):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as not_yours:
            call(tuned.id)
        assert not_yours.value.param == "job_id"
    with pytest.raises(openai.NotFoundError) as not_your_model:
        bob.models.retrieve(tuned.fine_tuned_model)
    assert not_your_model.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        bob.files.retrieve(tuned.result_files[0])
    with pytest.raises(openai.BadRequestError) as not_your_file:
        bob.fine_tuning.jobs.create(model=tuned.fine_tuned_model, training_file=files["train"])
    assert not_your_file.value.param == "training_file"  # checked first: it is alice's
    bobs = bob.files.create(file=("b.jsonl", chat_jsonl("train", 20)), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError) as not_your_base:
        bob.fine_tuning.jobs.create(model=tuned.fine_tuned_model, training_file=bobs.id)
    assert not_your_base.value.param == "model"
    nobody = openai.OpenAI(base_url=f"{served.url}/v1", api_key="gak_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as no_key:
        nobody.fine_tuning.jobs.list()
    assert no_key.value.param == "Authorization"


def test_a_lora_model_predicts_and_trains_again(served: Served, files: dict[str, str]) -> None:
    """The docs' LoRA example (no merge): its fine_tuned_model answers and trains a new job."""
    alice = served.alice
    lora = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=files["train"], suffix="lora",
        hyperparameters={"n_epochs": 1, "batch_size": 8},
        extra_body={"gradacc": {**OURS, "lora": {"r": 4}}})  # fmt: skip
    lora = wait_status(alice, lora.id, "succeeded")
    assert lora.fine_tuned_model in [m.id for m in alice.models.list()]
    if served.settings.database_url is None:  # PostgreSQL stacks run no predict server (one
        # database for every test: it would take other tests' predictions)
        headers = {"Authorization": f"Bearer {served.keys['alice']}"}
        body = {"messages": [{"role": "user", "content": "2 plus 3?"}], "max_new_tokens": 8}
        reply = httpx.post(f"{served.url}/v1/jobs/{lora.id}/predict", json=body,
                           headers=headers, timeout=120)  # fmt: skip
        assert reply.status_code == 200, reply.text
        assert isinstance(reply.json()["text"], str)
    again = alice.fine_tuning.jobs.create(
        model=lora.fine_tuned_model, training_file=files["train"],
        hyperparameters={"n_epochs": 1, "batch_size": 8}, extra_body={"gradacc": OURS})  # fmt: skip
    again = wait_status(alice, again.id, "succeeded")
    assert again.model == lora.fine_tuned_model
    assert again.fine_tuned_model == f"ft:builtin:tiny-chat:alice::{again.id}"


def pairs_jsonl(split: str, rows: int) -> bytes:
    """builtin:preference-arithmetic's pairs in OpenAI's preference shape."""
    pairs = preference_arithmetic(split)
    lines = [{"input": {"messages": prompt}, "preferred_output": chosen,
              "non_preferred_output": rejected}
             for prompt, chosen, rejected in zip(pairs["prompt"], pairs["chosen"],
                                                 pairs["rejected"], strict=False)][:rows]  # fmt: skip
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def pair_tokens(data: bytes, folder: Path) -> int:
    """The trained tokens of both completions of every pair of ``data``, after the shift, counted
    by the core's tokenizing as the job runs it (max_seq_length 96), from the masks alone."""
    path = folder / "pairs.jsonl"
    path.write_bytes(data)
    spec = JobSpec(model="builtin:tiny-chat", dataset=str(path), task="causal-lm", method="dpo",
                   max_seq_length=OURS["max_seq_length"], validation_split_percentage=0)  # fmt: skip
    split = load_job_data(spec, load_tokenizer(spec)).train
    assert isinstance(split, PreferenceSplit) and split.loss_mask is not None
    return sum(int(sum(mask[1:])) for mask in [*split.loss_mask, *split.rejected_mask])


def test_a_dpo_job_trains_and_reports_its_pairs(served: Served, tmp_path: Path) -> None:
    """OpenAI's preference loop: pairs uploaded, ``method: dpo`` with ``beta``, polled to
    succeeded; metrics events, checkpoints and the results file carry the pair metrics, the
    trained tokens are those of both completions of every pair over the 2 epochs, and the
    fine_tuned_model is a model that trains (and on the embedded stack predicts); a malformed
    pair file is refused naming its line."""
    alice = served.alice

    def upload(name: str, data: bytes) -> Any:
        return alice.files.create(file=(name, data), purpose="fine-tune")

    train = upload("p.jsonl", pairs_jsonl("train", 24))
    headers = {"Authorization": f"Bearer {served.keys['alice']}"}
    valid = upload("v.jsonl", pairs_jsonl("validation", 8))
    job = alice.fine_tuning.jobs.create(
        model="builtin:tiny-chat", training_file=train.id, validation_file=valid.id,
        method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.2, "n_epochs": 2,
                                                           "batch_size": 8}}},
        extra_body={"gradacc": OURS})  # fmt: skip
    done = wait_status(alice, job.id, "succeeded")
    assert done.method.dpo.hyperparameters.beta == 0.2  # type: ignore[union-attr]
    epochs = httpx.get(f"{served.url}/v1/jobs/{job.id}/metrics", headers=headers,
                       timeout=60).json()["data"]  # fmt: skip
    tokens = pair_tokens(pairs_jsonl("train", 24), tmp_path)
    assert [e["train_tokens"] for e in epochs] == [tokens, tokens]
    assert isinstance(done.trained_tokens, int) and done.trained_tokens == 2 * tokens > 0
    metrics = [e.data for e in alice.fine_tuning.jobs.list_events(job.id, limit=100)
               if e.type == "metrics"]  # fmt: skip
    assert [m["step"] for m in metrics] == [6, 5, 4, 3, 2, 1]  # type: ignore[index]  # 24 / 8 x 2
    assert all(0 <= m["train_rewards_accuracies"] <= 1 for m in metrics)  # type: ignore[index]
    assert metrics[0]["valid_rewards_margins"] is not None  # type: ignore[index]
    checkpoints = alice.fine_tuning.jobs.checkpoints.list(job.id).data
    assert [c.step_number for c in checkpoints] == [6, 3]
    assert checkpoints[0].metrics.model_dump()["train_rewards_accuracies"] is not None
    (results_id,) = done.result_files
    rows = list(csv.DictReader(io.StringIO(alice.files.content(results_id).text)))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[-1]["valid_rewards_accuracies"] and "train_logps_chosen" in rows[0]
    assert done.fine_tuned_model in [m.id for m in alice.models.list()]
    if served.settings.database_url is None:  # the embedded stack runs a predict server
        body = {"messages": [{"role": "user", "content": "what is 2 plus 3?"}],
                "max_new_tokens": 8}  # fmt: skip
        reply = httpx.post(f"{served.url}/v1/jobs/{job.id}/predict", json=body,
                           headers=headers, timeout=120)  # fmt: skip
        assert reply.status_code == 200, reply.text
    again = alice.fine_tuning.jobs.create(
        model=done.fine_tuned_model, training_file=train.id,
        method={"type": "dpo", "dpo": {"hyperparameters": {"batch_size": 8}}},
        extra_body={"gradacc": OURS})  # fmt: skip
    assert alice.fine_tuning.jobs.cancel(again.id).status == "cancelled"  # its model resolved
    bad = pairs_jsonl("train", 3).splitlines()
    bad[1] = bad[1].replace(b'"preferred_output": [{"role": "assistant"',
                            b'"preferred_output": [{"role": "user"')  # fmt: skip
    with pytest.raises(openai.BadRequestError) as refused:
        upload("bad.jsonl", b"\n".join(bad) + b"\n")
    assert refused.value.param == "file"
    assert "line 2: preferred_output[0].role: must be 'assistant'" in refused.value.message
