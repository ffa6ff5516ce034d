"""The Tinker API through the stock ``tinker`` SDK (0.38), unmodified but for the base URL and
key, against a live ``gradacc serve`` (embedded stack, one worker, API keys as ``tml-<key>``), on
``gradacc/tiny-chat``:

- one accumulation window's SGD update, sent as one call of 1,030 items (which the SDK cuts into
  two chunks), as 3 and as 8 calls in shuffled order, equals a hand loop's update of the
  token-normalised loss (``num_loss_tokens``); with ``none`` the update is the raw signed sum's;
- ``forward`` logprobs equal a hand forward on the saved weights, and greedy ``sample`` equals
  ``generate`` on them;
- a host job's process killed between two ``optim_step``s: ``load_state`` into a new session's model goes on to
  the uninterrupted run's weights, and the lost model says so instead of training from scratch;
- another tenant's model, run, checkpoint, sampler and future are 404s; bad input is a 422
  naming its field.

- a client sending a gradacc SFT job's windows (same rows, same masks) with ``num_loss_tokens``
  and SGD ends with the job's weights;
- a session's host is a job the scheduler places: a job of higher priority preempts it, its model
  is parked (open window included) and comes back at the next call, exactly;
- tinker-cookbook's four loops (``tinker_loops``) run to the end, and a sampler made from each
  one's final sampler weights answers as ``generate`` does on them.
 Weights are read from the
server's checkpoint files, and from an export downloaded through its URLs; a named sampler is
served by chat completions under its ``tinker://`` name."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import tinker
import torch
from sqlalchemy import select
from tinker import types
from tinker.types.optimizer import OptimizerConfigBase, OptimParamsBase
from transformers import AutoModelForCausalLM, AutoTokenizer

from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job, JobEvent
from gradacc.tinker import paths
from gradacc.tinker.tables import TinkerModel, TinkerSession
from tests.e2e import tinker_loops
from tests.e2e.conftest import ROOT, serve_with_keys
from tests.trainer_core.helpers import CHAT, final_weights
from tests.trainer_core.helpers import run as run_job_core
from tests.trainer_core.test_tinker_host import CHOICE, _close, _data, _hand_update
from trainer_core.accumulation import IGNORE_INDEX
from trainer_core.data.load import load_job_data
from trainer_core.data.loader import EpochLoader, EpochPlan
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.testing.failpoints import TINKER_STAY
from trainer_core.tinker_host.host import Datum, TrainingHost
from trainer_core.tinker_host.model import ModelChoice

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
MODEL = "gradacc/tiny-chat"
LR = 0.5
TOKENS = "num_loss_tokens"
Served = tuple[Settings, str, dict[str, str]]


@pytest.fixture(scope="module", params=["embedded"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("tinker")
    env = {
        "GRADACC_PREDICT_SERVER": "true",
        "GRADACC_BATCH_LEASE_S": "3",
        "GRADACC_TINKER_HOST_LINGER_S": "2",
        # One training model in memory: every switch between models swaps one out and back in,
        # so every exact result below holds across swaps too.
        "GRADACC_TINKER_MODELS_PER_HOST": "1",
        "GRADACC_RECONCILE_INTERVAL_S": "2",
        "GRADACC_PREEMPT": "true",  # the last test's job preempts a host job
        "GRADACC_DEVICES": "2",  # a session of two ranks
        TINKER_STAY: str(home / "stay"),  # the placement test holds a host job with this file
        "TINKER_TELEMETRY": "0",
    }
    with serve_with_keys(request, home, env) as found:
        yield found


def service(served: Served, tenant: str = "alice") -> tinker.ServiceClient:
    _, url, keys = served
    return tinker.ServiceClient(base_url=url, api_key="tml-" + keys[tenant])


def wire(data: list[Datum]) -> list[types.Datum]:
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(d.tokens),
            loss_fn_inputs={k: v.tolist() for k, v in d.inputs.items()},
        )
        for d in data
    ]


def saved(served: Served, path: str, tenant: str = "alice") -> dict[str, torch.Tensor]:
    settings = served[0]
    state = torch.load(
        paths.file_of(settings.tinker_dir, tenant, paths.parse(path)), weights_only=True
    )
    return state["weights"]


def sgd_update(served: Served, calls: list[list[Datum]], mode: str) -> dict[str, torch.Tensor]:
    svc = service(served)
    tc = svc.create_lora_training_client(
        MODEL, rank=0, optimizer=OptimizerConfigBase(type="sgd")
    ).result()
    futures = [
        tc.forward_backward(wire(c), "cross_entropy", {"grad_accumulation_normalization": mode})
        for c in calls
    ]
    step = tc.optim_step(OptimParamsBase(type="sgd", learning_rate=LR))
    for future in futures:
        assert "loss:sum" in future.result().metrics
    assert step.result().metrics["window_divisor:mean"] > 0
    after = saved(served, tc.save_state("after").result().path)
    base = TrainingHost(CHOICE).weights()
    return {k: after[k] - base[k] for k in base}


def test_one_window_is_exact_however_the_sdk_and_the_client_cut_it(served: Served) -> None:
    data = _data(1030, seed=7)
    tokens = sum(int((d.inputs["weights"] != 0).sum()) for d in data)
    reference = _hand_update(data, tokens)
    largest = max(float(v.abs().max()) for v in reference.values())
    one = sgd_update(served, [data], TOKENS)  # the SDK sends 1,024 + 6 items
    _close(one, reference, 1e-5 * largest)
    # As 3 and as 8 calls in shuffled order, the two models' calls interleaved: with one training
    # model in memory (this module's server), each call swaps the other out, its open window too.
    rng = random.Random(1)
    cuts = []
    for parts in (3, 8):
        calls = [data[i::parts] for i in range(parts)]
        rng.shuffle(calls)
        cuts.append(calls)
    svc, base, sgd = (
        service(served),
        TrainingHost(CHOICE).weights(),
        OptimizerConfigBase(type="sgd"),
    )
    pair = [svc.create_lora_training_client(MODEL, rank=0, optimizer=sgd).result() for _ in cuts]
    config = {"grad_accumulation_normalization": TOKENS}
    for turn in range(8):
        for client, calls in zip(pair, cuts, strict=True):
            if turn < len(calls):
                client.forward_backward(wire(calls[turn]), "cross_entropy", config).result()
    for client in pair:
        client.optim_step(OptimParamsBase(type="sgd", learning_rate=LR)).result()
        after = saved(served, client.save_state("cut").result().path)
        _close({k: after[k] - base[k] for k in base}, one, 1e-6)
    assert "swapped out to make room" in _host_logs(served[0])


def test_none_is_the_raw_signed_weighted_sum(served: Served) -> None:
    data = _data(12, seed=8)
    for datum in data:
        datum.inputs["weights"] = datum.inputs["weights"] * -0.6
    got = sgd_update(served, [data[:5], data[5:]], "none")
    _close(got, _hand_update(data, 1.0), 1e-6)


def test_forward_and_greedy_sampling_match_the_saved_weights(served: Served) -> None:
    svc = service(served)
    tc = svc.create_lora_training_client(MODEL, rank=4, seed=3).result()
    data = _data(6, seed=9)
    tc.forward_backward(wire(data), "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    local = TrainingHost(ModelChoice("builtin:tiny-chat", rank=4, seed=3))
    local.set_weights(saved(served, tc.save_state("now").result().path))
    out = tc.forward(wire(data), "cross_entropy").result()
    want = local.forward_backward(data, "cross_entropy", {}, forward_only=True).logprobs
    for got, expected in zip(out.loss_fn_outputs, want, strict=True):
        assert torch.allclose(torch.tensor(got["logprobs"].tolist()), expected, atol=1e-5)
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = data[0].tokens
    params = types.SamplingParams(max_tokens=10, temperature=0.0, stop=[])
    answer = sampler.sample(
        types.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params
    ).result()
    local.model.eval()
    generated = local.model.generate(
        torch.tensor([prompt]),
        max_new_tokens=10,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()
    assert [list(s.tokens) for s in answer.sequences] == [generated, generated]
    assert all(len(s.logprobs or []) == 10 and s.stop_reason == "length" for s in answer.sequences)


def _host_logs(settings: Settings) -> str:
    """What the host jobs logged (each job's process log)."""
    return "".join(p.read_text(errors="replace") for p in settings.jobs_dir.glob("*/train.log"))


@contextmanager
def _staying(settings: Settings, model_id: str) -> Iterator[None]:
    """While inside, the model's session's host job does not end by its linger (the failpoint
    ``TINKER_STAY``): a test acts on it without racing the linger."""
    stay = settings.home / "stay"
    stay.write_text(model_id.partition(":")[0])
    try:
        yield
    finally:
        stay.unlink(missing_ok=True)


def _host_job(settings: Settings, model_id: str) -> Job:
    """The job hosting the model's session now (``gradacc.tinker.placement``)."""
    with session_scope(settings) as session:
        model = session.get(TinkerModel, model_id)
        assert model is not None
        owner = session.get(TinkerSession, model.session_id)
        assert owner is not None and owner.job_id is not None
        job = session.get(Job, owner.job_id)
        assert job is not None
        session.expunge(job)
        return job


def _uninterrupted(
    served: Served, windows: list[list[Datum]], step: types.AdamParams, *, seed: int
) -> dict[str, torch.Tensor]:
    """The weights of a LoRA run of ``windows`` that nothing stopped."""
    straight = service(served).create_lora_training_client(MODEL, rank=4, seed=seed).result()
    for window in windows:
        straight.forward_backward(wire(window), "cross_entropy")
        straight.optim_step(step)
    return saved(served, straight.save_state("straight").result().path)


def test_a_killed_host_loses_nothing_saved_and_load_state_goes_on(served: Served) -> None:
    data = _data(9, seed=10)
    windows = [data[0:3], data[3:6], data[6:9]]
    step = types.AdamParams(learning_rate=1e-2)
    expected = _uninterrupted(served, windows, step, seed=5)

    first = service(served).create_lora_training_client(MODEL, rank=4, seed=5).result()
    with _staying(served[0], first.model_id):  # its host job stays until killed
        first.forward_backward(wire(windows[0]), "cross_entropy")
        first.optim_step(step).result()
        path = first.save_state("step1").result().path
        host = _host_job(served[0], first.model_id)
        assert host.status == "running" and host.pid is not None
        os.kill(host.pid, signal.SIGKILL)  # the host job's process, between two steps
    second = service(served).create_training_client_from_state_with_optimizer(path).result()
    for window in windows[1:]:
        second.forward_backward(wire(window), "cross_entropy")
        second.optim_step(step)
    _close(saved(served, second.save_state("resumed").result().path), expected, 1e-6)
    with pytest.raises(tinker.RequestFailedError, match="load_state"):  # not silently re-made
        first.forward_backward(wire(windows[1]), "cross_entropy").result()


def _post(served: Served, tenant: str, route: str, body: dict[str, Any]) -> httpx.Response:
    _, url, keys = served
    headers = {"X-API-Key": "tml-" + keys[tenant]}
    return httpx.post(f"{url}/api/v1/{route}", json=body, headers=headers, timeout=60)


def test_another_tenant_sees_nothing_and_bad_input_names_its_field(served: Served) -> None:
    _, url, keys = served
    tc = service(served).create_lora_training_client(MODEL, rank=2).result()
    path = tc.save_state("mine").result().path
    sampler_path = tc.save_weights_for_sampler("mine").result().path
    run_id = tc.model_id
    sampler = service(served).create_sampling_client(model_path=sampler_path).result()
    bob_session = _post(served, "bob", "create_session", {"tags": []}).json()["session_id"]
    bob = {"X-API-Key": "tml-" + keys["bob"]}
    refused = [
        _post(served, "bob", "get_info", {"model_id": run_id}),
        _post(served, "bob", "optim_step", {"model_id": run_id, "seq_id": 9, "adam_params": {}}),
        _post(served, "bob", "weights_info", {"tinker_path": path}),
        _post(served, "bob", "create_sampling_session",
              {"session_id": bob_session, "sampling_session_seq_id": 0, "model_path": sampler_path}),
        _post(served, "bob", "load_weights",
              {"session_id": bob_session, "model_seq_id": 0, "path": path, "optimizer": True}),
        _post(served, "bob", "asample", {"sampling_session_id": sampler._sampling_session_id,
              "seq_id": 0, "num_samples": 1, "prompt": {"chunks": []}}),
        _post(served, "bob", "retrieve_future", {"request_id": "1"}),
        httpx.get(f"{url}/api/v1/training_runs/{run_id}", headers=bob),
        httpx.get(f"{url}/api/v1/training_runs/{run_id}/checkpoints", headers=bob),
    ]  # fmt: skip
    assert [r.status_code for r in refused] == [404] * len(refused), [r.text for r in refused]
    assert httpx.get(f"{url}/api/v1/training_runs", headers=bob).json()["training_runs"] == []
    alice = service(served)
    rest = alice.create_rest_client()
    listed = rest.list_checkpoints(run_id).result()
    assert {c.tinker_path for c in listed.checkpoints} == {path, sampler_path}
    rest.set_checkpoint_ttl_from_tinker_path(path, 7200).result()
    rest.delete_checkpoint_from_tinker_path(sampler_path).result()
    (kept,) = rest.list_checkpoints(run_id).result().checkpoints
    assert kept.tinker_path == path and kept.expires_at is not None

    session = _post(served, "alice", "create_session", {"tags": []}).json()["session_id"]
    bad = [
        ({"base_model": "gradacc/nope"}, "base_model"),
        ({"base_model": MODEL, "lora_config": {"rank": -1}}, "lora_config.rank"),
        ({"base_model": MODEL, "optimizer_config": {"type": "lion"}}, "optimizer_config.type"),
    ]
    for fields, named in bad:
        answer = _post(
            served, "alice", "create_model", {"session_id": session, "model_seq_id": 0, **fields}
        )
        assert answer.status_code == 422 and named in answer.json()["error"]["param"], answer.text
    assert (
        httpx.post(
            f"{url}/api/v1/create_session", json={}, headers={"X-API-Key": "tml-nope"}
        ).status_code
        == 401
    )
    adam = service(served).create_lora_training_client(MODEL, rank=2).result()
    with pytest.raises(tinker.RequestFailedError, match="created with 'adamw'"):
        adam.optim_step(OptimParamsBase(type="sgd", learning_rate=0.1)).result()
    one, two = wire(_data(2, seed=11)), {"grad_accumulation_normalization": "num_sequences"}
    adam.forward_backward(one[:1], "cross_entropy", {"grad_accumulation_normalization": "none"})
    adam.forward_backward(one[1:], "cross_entropy", two)
    with pytest.raises(tinker.RequestFailedError, match="disagree"):
        adam.optim_step(types.AdamParams(learning_rate=0.1)).result()


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A client's folder with the tokenizers written under it by the documented command, where
    the cookbook looks for ``gradacc/tiny-chat`` first."""
    folder = tmp_path_factory.mktemp("client")
    argv = [sys.executable, "-m", "commands.cli", "tinker-tokenizers", "--dir", str(folder)]
    written = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
    assert str(folder / MODEL) in written.stdout
    return folder


@pytest.fixture
def cookbook_dir(
    served: Served, tokenizers: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Where a loop writes its data and logs; it runs in the client's folder, with the key."""
    monkeypatch.chdir(tokenizers)
    monkeypatch.setenv("TINKER_API_KEY", "tml-" + served[2]["alice"])
    return tmp_path


@pytest.mark.parametrize("loop", sorted(tinker_loops.LOOPS))
def test_cookbook_loop_runs_to_the_end_and_its_sampler_answers(
    served: Served, cookbook_dir: Path, loop: str
) -> None:
    final = tinker_loops.LOOPS[loop](served[1], cookbook_dir)
    local = TrainingHost(ModelChoice("builtin:tiny-chat", rank=4))
    base = local.weights()
    local.set_weights(saved(served, final["sampler_path"]))
    moved = max(float((local.weights()[k] - base[k]).abs().max()) for k in base)
    # RL's groups of two mostly score alike (zero advantage, no gradient); the others train.
    assert moved > 0 or loop == "rl"
    sampler = service(served).create_sampling_client(model_path=final["sampler_path"]).result()
    prompt = [5, 17, 42, 9]
    params = types.SamplingParams(max_tokens=6, temperature=0.0, stop=[])
    answer = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result()
    local.model.eval()
    generated = local.model.generate(
        torch.tensor([prompt]), max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0
    )[0, len(prompt) :].tolist()
    assert list(answer.sequences[0].tokens) == generated


def test_an_export_downloads_and_a_named_sampler_is_served_by_chat_completions(
    served: Served,
) -> None:
    _, url, keys = served
    svc = service(served)
    whole = svc.create_lora_training_client(MODEL, rank=0).result()
    data = _data(4, seed=12)
    whole.forward_backward(wire(data), "cross_entropy")
    whole.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    exported = whole.save_weights_external("export").result()
    urls = svc.create_rest_client().get_external_weights_urls(exported.path).result()
    assert urls.expires.tzinfo is not None and "config.json" in urls.urls
    folder = Path(tempfile.mkdtemp())
    for relative, link in urls.urls.items():  # as the SDK's downloaders fetch them: no key
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(httpx.get(link).raise_for_status().content)
    assert httpx.get(link.replace("/tinker-files/", "/tinker-files/x")).status_code == 404
    model = AutoModelForCausalLM.from_pretrained(folder)  # plain transformers, nothing of ours
    want = whole.forward(wire(data), "cross_entropy").result().loss_fn_outputs
    for datum, got in zip(data, want, strict=True):
        logits = model(input_ids=torch.tensor([datum.tokens])).logits[0].float()
        hand = torch.log_softmax(logits, -1).gather(-1, datum.inputs["target_tokens"][:, None])[
            :, 0
        ]
        assert torch.allclose(hand.detach(), torch.tensor(got["logprobs"].tolist()), atol=1e-5)

    lora = svc.create_lora_training_client(MODEL, rank=4).result()
    lora.forward_backward(wire(data), "cross_entropy")
    lora.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    name = lora.save_weights_for_sampler("served").result().path
    messages = [{"role": "user", "content": "what is 2 plus 2"}]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = tokenizer.encode(text, add_special_tokens=False)
    sampler = svc.create_sampling_client(model_path=name).result()
    params = types.SamplingParams(max_tokens=8, temperature=0.0)
    sampled = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]
    chat = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["alice"], max_retries=0, timeout=120)
    answer = chat.chat.completions.create(
        model=name, messages=messages, max_tokens=8, temperature=0
    )  # type: ignore[arg-type]
    said = tokenizer.decode(sampled.tokens, skip_special_tokens=True)
    assert said and answer.choices[0].message.content == said, said
    bob = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["bob"], max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError):
        bob.chat.completions.create(model=name, messages=messages, max_tokens=2)  # type: ignore[arg-type]


def _job_windows(spec: JobSpec) -> list[list[Datum]]:
    """The job's accumulation windows as Tinker datums: each row of each micro-batch, its input
    and next tokens, weight 1 where the job trains a label (the core's own epoch plan: same
    rows, same order, same masks)."""
    tokenizer = load_tokenizer(spec)
    data = load_job_data(spec, tokenizer)
    b, k = spec.per_device_train_batch_size, spec.gradient_accumulation_steps
    assert isinstance(b, int) and k is not None
    plan = EpochPlan(data.train, batch_size=b, accumulation=k, seed=spec.seed,
                     pad_id=int(tokenizer.pad_token_id))  # fmt: skip
    loader = EpochLoader(plan)
    loader.set_epoch(0)
    windows: list[list[Datum]] = [[]]
    for micro in loader:
        for ids, mask, labels in zip(
            micro["input_ids"], micro["attention_mask"], micro["labels"], strict=True
        ):
            n = int(mask.sum())
            weights = (labels[1:n] != IGNORE_INDEX).float()
            windows[-1].append(
                Datum(ids[: n - 1].tolist(), {"target_tokens": ids[1:n], "weights": weights})
            )
        if micro["last_in_window"]:
            windows.append([])
    return windows[:-1]


def test_the_sdk_loop_with_num_loss_tokens_equals_a_gradacc_sft_job(
    served: Served, tmp_path: Path
) -> None:
    """One epoch of 37 chat rows at (b, K) = (4, 4), seed 42, plain SGD at a constant rate: the
    job's final weights, and a Tinker client sending the same windows (each as 3 calls)."""
    spec = JobSpec(**CHAT, per_device_train_batch_size=4, gradient_accumulation_steps=4,
                   max_train_samples=37, max_seq_length=64, num_train_epochs=1, seed=42,
                   optim="sgd", learning_rate=5e-2, max_grad_norm=0.0,
                   lr_scheduler_type="constant", warmup_steps=0)  # fmt: skip
    assert run_job_core(spec, tmp_path).status == "completed"
    job = final_weights(tmp_path)
    tc = (
        service(served)
        .create_lora_training_client(MODEL, rank=0, optimizer=OptimizerConfigBase(type="sgd"))
        .result()
    )
    windows = _job_windows(spec)
    assert len(windows) == 3  # 16 + 16 + 5 rows
    for window in windows:
        for part in (window[0::3], window[1::3], window[2::3]):
            tc.forward_backward(
                wire(part), "cross_entropy", {"grad_accumulation_normalization": TOKENS}
            )
        tc.optim_step(OptimParamsBase(type="sgd", learning_rate=5e-2))
    mine = saved(served, tc.save_state("like-the-job").result().path)
    renamed = {k.removeprefix("model."): v for k, v in mine.items()}
    common = renamed.keys() & job.keys()
    assert len(common) == len(renamed)
    largest = max(float(job[k].abs().max()) for k in common)
    moved = max(float((job[k] - TrainingHost(CHOICE).weights()[k]).abs().max()) for k in common)
    gap = max(float((renamed[k] - job[k]).abs().max()) for k in common)
    print(f"tinker vs job: {gap:.2e}; largest entry {largest:.2e}, training moved {moved:.2e}")
    assert moved > 1e-3 and gap <= 1e-5 * largest


def test_two_ranks_give_one_ranks_window(served: Served) -> None:
    """A session made with ``user_metadata={"ranks": "2"}``: its host job takes two devices (this
    module's worker has two), torchrun starts two ranks that each hold a replica and take half of
    every call. Forward logprobs come back in the call's order; a window of three calls, the
    model swapped out between them (one model in memory here: each swap collects the window onto
    rank 0), gives one rank's update (1e-6)."""
    settings, url, keys = served
    data = _data(10, seed=30)
    calls = [data[:7], data[7:9], data[9:]]
    one = sgd_update(served, calls, TOKENS)
    svc = tinker.ServiceClient(
        user_metadata={"ranks": "2"}, base_url=url, api_key="tml-" + keys["alice"]
    )
    sgd = OptimizerConfigBase(type="sgd")
    tc, other = (svc.create_lora_training_client(MODEL, rank=0, optimizer=sgd).result()
                 for _ in range(2))  # fmt: skip
    out = tc.forward(wire(data[:5]), "cross_entropy").result()
    want = TrainingHost(CHOICE).forward_backward(data[:5], "cross_entropy", {}, forward_only=True)
    for got, expected in zip(out.loss_fn_outputs, want.logprobs, strict=True):
        assert torch.allclose(torch.tensor(got["logprobs"].tolist()), expected, atol=1e-5)
    config = {"grad_accumulation_normalization": TOKENS}
    for call in calls:
        tc.forward_backward(wire(call), "cross_entropy", config).result()
        other.forward_backward(wire(data[:1]), "cross_entropy", config).result()  # a swap
    tc.optim_step(OptimParamsBase(type="sgd", learning_rate=LR)).result()
    after, base = (
        saved(served, tc.save_state("ranks").result().path),
        TrainingHost(CHOICE).weights(),
    )
    _close({k: after[k] - base[k] for k in base}, one, 1e-6)
    assert _host_job(settings, tc.model_id).num_processes == 2
    assert "2 ranks" in _host_logs(settings)


def _wait_status(url: str, bearer: dict[str, str], job_id: str, wanted: str) -> None:
    deadline, status = time.monotonic() + 240, ""
    while status != wanted:
        assert status not in ("failed", "cancelled") and time.monotonic() < deadline, status
        time.sleep(0.5)
        status = httpx.get(f"{url}/v1/jobs/{job_id}", headers=bearer).json()["status"]


def _preempted_by_a_job(served: Served, host_job: str) -> str:
    """A job of priority 5 posted while ``host_job`` runs: it preempts the host job and succeeds;
    its id."""
    settings, url, keys = served
    spec = {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment",
            "task": "sequence-classification", "backend": "pytorch", "num_train_epochs": 1,
            "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
            "learning_rate": 1e-3, "max_train_samples": 16, "priority": 5}  # fmt: skip
    bearer = {"Authorization": f"Bearer {keys['alice']}"}
    posted = httpx.post(f"{url}/v1/jobs", json=spec, headers=bearer, timeout=30)
    job_id = str(posted.raise_for_status().json()["id"])
    _wait_status(url, bearer, job_id, "succeeded")
    with session_scope(settings) as session:
        kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == host_job)).all()
    assert "preempting" in kinds, kinds
    return job_id


def test_a_session_is_placed_like_a_job_preempted_and_resumed_exactly(served: Served) -> None:
    """Last in this module (it posts a job, with ``GRADACC_PREEMPT`` on): one worker hosts a
    session's model, held there by the failpoint's file; a job of higher priority preempts the
    host job, which parks the model (its open window too) and is queued again; the job runs; the
    session's next call brings the model back, and the run ends with the uninterrupted run's
    weights. Host jobs stay out of the tenant's job list."""
    settings, url, keys = served
    data = _data(6, seed=20)
    windows = [data[:3], data[3:]]
    step = types.AdamParams(learning_rate=1e-2)
    expected = _uninterrupted(served, windows, step, seed=7)

    tc = service(served).create_lora_training_client(MODEL, rank=4, seed=7).result()
    with _staying(settings, tc.model_id):  # its host job stays until preempted
        tc.forward_backward(wire(windows[0]), "cross_entropy")
        tc.optim_step(step).result()
        tc.forward_backward(wire(windows[1][:1]), "cross_entropy").result()  # left open
        first = _host_job(settings, tc.model_id)
        assert (first.kind, first.status) == ("tinker", "running")
        job_id = _preempted_by_a_job(served, first.id)
    tc.forward_backward(wire(windows[1][1:]), "cross_entropy")
    tc.optim_step(step).result()
    resumed = saved(served, tc.save_state("resumed").result().path)
    _close(resumed, expected, 1e-6)
    bearer = {"Authorization": f"Bearer {keys['alice']}"}
    listed = {j["id"] for j in httpx.get(f"{url}/v1/jobs", headers=bearer).json()["data"]}
    assert first.id not in listed and job_id in listed
    assert httpx.get(f"{url}/v1/jobs/{first.id}", headers=bearer).status_code == 404
