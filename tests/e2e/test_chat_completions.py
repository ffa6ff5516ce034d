"""OpenAI's chat completions through the official ``openai`` SDK against a live ``gradacc serve``
(a worker and its predict server): a fine-tuned model answers greedily with exactly the tokens
``model.generate`` gives on the downloaded model with its saved chat template, ``usage`` equals
the tokenizer's counts, a stream's pieces join to the same text, ``n=2`` with a seed is
reproducible, ``stop`` is honoured; tools reach ChatML as ``apply_chat_template`` renders them; a
checkpoint and the base model answer; /v1/completions too;
what is not served is a 400 naming it, another tenant's model a 404 ``model_not_found``; a client
that closes its stream mid-way stops its generation, and the next request is answered."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import serve_with_keys
from tests.e2e.evals_checks import (
    STUB_ANSWER,
    UPSTREAM,
    check_compare_page,
    check_distillation,
    check_evals,
)
from tests.e2e.responses_checks import check_aliases, check_responses, check_train_sources
from tests.e2e.test_dashboard import CHROMIUM, browser_missing
from tests.support import serves, wait_final, wait_until
from tests.upstream_stub import StubUpstream, stub_upstream
from worker.predict.failpoints import SERVE_HOLD

pytestmark = pytest.mark.integration
LIMIT = 48  # GRADACC_SERVE_MAX_COMPLETION_TOKENS here
JOB = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
       "num_train_epochs": 1, "max_train_samples": 64, "max_eval_samples": 8,
       "per_device_train_batch_size": 8, "learning_rate": 5e-3}  # fmt: skip
MESSAGES: Any = [{"role": "user", "content": "what is 2 plus 3?"}]


@dataclass
class Stack:
    alice: openai.OpenAI
    bob: openai.OpenAI
    model: str  # alice's fine-tuned model
    checkpoint: str
    folder: Path  # its downloaded model/
    gate: Path  # while it exists, a stream parks at each token (SERVE_HOLD)
    log: Path
    url: str
    keys: dict[str, str]
    kind: str  # the stack: embedded, or pg_redis
    stub: StubUpstream  # the stand-in for an old hosted model, routed as evals_checks.UPSTREAM


def _download(url: str, key: str, job_id: str, into: Path) -> Path:
    answer = httpx.get(f"{url}/v1/jobs/{job_id}/artifacts/model", timeout=60,
                       headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    (extracted,) = into.iterdir()
    return extracted


@pytest.fixture(scope="module", params=["embedded", "pg_redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("chat")
    gate = home / "hold"
    # A stream left parked would hold the models past the next request's deadline (a 504).
    env = {"GRADACC_SERVE_MAX_COMPLETION_TOKENS": str(LIMIT), SERVE_HOLD: str(gate),
           "GRADACC_SERVE_TIMEOUT_S": "20", "GRADACC_PREDICT_SERVER": "true",
           "GRADACC_SERVE_ALIASES": json.dumps({"*": {"gpt-4o*": "builtin:tiny-chat"}}),
           "HF_HUB_CACHE": str(home / "hf-cache")}  # fmt: skip
    stub = StubUpstream(STUB_ANSWER)
    # (PostgreSQL stacks start no predict server unless told: settings_env.)
    with stub_upstream(stub), serve_with_keys(request, home, env | {
            "GRADACC_SERVE_UPSTREAMS": json.dumps({UPSTREAM: {"base_url": stub.url}})}) as (_, url, keys):  # fmt: skip
        headers = {"Authorization": f"Bearer {keys['alice']}"}
        with httpx.Client(base_url=url, timeout=60, headers=headers) as client:
            created = client.post("/v1/jobs", json=JOB)
            assert created.status_code == 201, created.text
            job_id = created.json()["id"]
            assert wait_final(client, job_id, timeout=240)["status"] == "succeeded"
            checkpoint = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"][0]["model"]
        sdks = {t: openai.OpenAI(base_url=f"{url}/v1", api_key=k, max_retries=0, timeout=60)
                for t, k in keys.items()}  # fmt: skip
        folder = _download(url, keys["alice"], job_id, home / "download")
        model = f"ft:builtin:tiny-chat:alice::{job_id}"
        # The predict server listens once torch is imported: a 503 until then (a tiny job can
        # train sooner).
        wait_until(lambda: serves(sdks["alice"], model), what="the predict server", timeout=60)
        yield Stack(
            sdks["alice"],
            sdks["bob"],
            model,
            checkpoint,
            folder,
            gate,
            home / "serve.log",
            url,
            keys,
            request.param,
            stub,
        )


def _generate(model: Any, tokenizer: Any, ids: list[int], max_new_tokens: int) -> list[int]:
    import torch

    tensor = torch.tensor([ids])
    out = model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor),
                         max_new_tokens=max_new_tokens, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    return [int(t) for t in out[0, len(ids) :]]


@pytest.fixture(scope="module")
def reference(stack: Stack) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(stack.folder), AutoTokenizer.from_pretrained(
        stack.folder
    )


def _expected(tokens: list[int], tokenizer: Any) -> tuple[str, str]:
    finish = "stop" if tokens and tokens[-1] == tokenizer.eos_token_id else "length"
    return tokenizer.decode(tokens, skip_special_tokens=True), finish


def test_greedy_chat_equals_generate_and_the_stream_joins_to_it(
    stack: Stack, reference: Any
) -> None:
    model, tokenizer = reference
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = _generate(model, tokenizer, ids, 24)
    content, finish = _expected(tokens, tokenizer)
    answer = stack.alice.chat.completions.create(model=stack.model, messages=MESSAGES,
                                                 max_completion_tokens=24, temperature=0)  # fmt: skip
    assert answer.object == "chat.completion" and answer.model == stack.model
    (choice,) = answer.choices
    assert (choice.message.content, choice.finish_reason) == (content, finish)
    assert choice.message.role == "assistant"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(ids), len(tokens))
    stream = stack.alice.chat.completions.create(model=stack.model, messages=MESSAGES,
                                                 max_completion_tokens=24, temperature=0, stream=True,
                                                 stream_options={"include_usage": True})  # fmt: skip
    chunks = list(stream)
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 1  # it did arrive in pieces
    assert "".join(pieces) == content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == finish
    assert chunks[-1].choices == [] and chunks[-1].usage == answer.usage


def test_n_with_a_seed_is_reproducible_and_stop_is_honoured(stack: Stack) -> None:
    def sample(seed: int) -> list[str | None]:
        answer = stack.alice.chat.completions.create(model=stack.model, messages=MESSAGES,
                                                     n=2, seed=seed, temperature=1.0, max_tokens=16)  # fmt: skip
        assert [c.index for c in answer.choices] == [0, 1]
        assert answer.usage is not None and answer.usage.completion_tokens > 0
        return [c.message.content for c in answer.choices]

    assert sample(7) == sample(7)
    greedy = stack.alice.completions.create(model=stack.model, prompt="what is 7 plus 1? ",
                                            max_tokens=16, temperature=0)  # fmt: skip
    text = greedy.choices[0].text
    assert len(text) >= 4, text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = stack.alice.completions.create(model=stack.model, prompt="what is 7 plus 1? ",
                                         max_tokens=16, temperature=0, stop=[stop])  # fmt: skip
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_completions_equal_generate(stack: Stack, reference: Any) -> None:
    model, tokenizer = reference
    prompt = "<|im_start|>user\nwhat is 7 plus 1?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(prompt)["input_ids"]
    tokens = _generate(model, tokenizer, ids, 12)
    content, finish = _expected(tokens, tokenizer)
    answer = stack.alice.completions.create(model=stack.model, prompt=prompt, max_tokens=12,
                                            temperature=0, logprobs=2)  # fmt: skip
    assert answer.object == "text_completion"
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == (content, finish)
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None
    assert len(logprobs.token_logprobs) == len(tokens)
    assert answer.usage is not None and answer.usage.completion_tokens == len(tokens)
    stream = stack.alice.completions.create(model=stack.model, prompt=prompt, max_tokens=12,
                                            temperature=0, stream=True)  # fmt: skip
    assert "".join(c.choices[0].text for c in stream if c.choices) == content


def test_a_checkpoint_and_the_base_model_answer(stack: Stack) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from trainer_core.builtin.models import builtin_tokenizer
    from trainer_core.model.trained import build_builtin

    kept = stack.alice.chat.completions.create(model=stack.checkpoint, messages=MESSAGES,
                                               max_tokens=8, temperature=0)  # fmt: skip
    assert kept.model == stack.checkpoint and kept.choices[0].message.content is not None
    tokenizer = builtin_tokenizer("builtin:tiny-chat")
    base = build_builtin("builtin:tiny-chat", 42, AutoModelForCausalLM, {}, tokenizer).eval()
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        content, finish = _expected(_generate(base, tokenizer, ids, 8), tokenizer)
    answer = stack.bob.chat.completions.create(model="builtin:tiny-chat", messages=MESSAGES,
                                               max_tokens=8, temperature=0)  # fmt: skip
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == (content, finish)


def test_refusals_name_what_they_refuse(stack: Stack) -> None:
    alice, bob = stack.alice, stack.bob
    with pytest.raises(openai.NotFoundError) as other:
        bob.chat.completions.create(model=stack.model, messages=MESSAGES)
    assert isinstance(other.value.body, dict) and other.value.body["code"] == "model_not_found"
    long = [{"role": "user", "content": "two plus three " * 400}]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_completion_tokens": LIMIT + 1}, "max_completion_tokens"),
        ({"messages": long}, "messages"),
        ({"messages": long, "max_tokens": 8}, "messages"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"},
         "tool_choice"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages.0.content.0.type"),
        ({"model": "builtin:tiny-bert"}, "model"),
    ]  # fmt: skip
    for extra, param in cases:
        body: dict[str, Any] = {"model": stack.model, "messages": MESSAGES, **extra}
        with pytest.raises(openai.BadRequestError) as refused:
            alice.chat.completions.create(**body)
        assert refused.value.param == param, (extra, refused.value.body)


def test_tools_reach_the_template_as_apply_chat_template_renders_them(
    stack: Stack, reference: Any
) -> None:
    """tiny-chat's ChatML renders tools: accepted, the prompt is the template's rendering with
    them (a past call's arguments as the object they encode), a stream joins to the answer."""
    _, tokenizer = reference
    tools: Any = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]  # fmt: skip
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    messages: Any = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "5"}]  # fmt: skip
    shown = [*messages[:-2], {**messages[-2], "tool_calls": [{**call, "function": {
        "name": "add", "arguments": {"a": 2, "b": 3}}}]}, messages[-1]]  # fmt: skip
    text = tokenizer.apply_chat_template(shown, tools=tools, add_generation_prompt=True,
                                         tokenize=False)  # fmt: skip
    assert "<tools>" in text and "<tool_call>" in text
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    asked = {"model": stack.model, "messages": messages, "tools": tools, "max_tokens": 8,
             "temperature": 0}  # fmt: skip
    answer = stack.alice.chat.completions.create(**asked)
    assert answer.usage is not None and answer.usage.prompt_tokens == len(ids)
    chunks = list(stack.alice.chat.completions.create(**asked, stream=True))
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == (answer.choices[0].message.content or "")


def test_a_client_that_goes_away_frees_the_models(stack: Stack) -> None:
    stack.gate.touch()  # the stream parks at its first token until its client is gone
    try:
        stream = stack.alice.chat.completions.create(model=stack.model, messages=MESSAGES,
                                                     max_tokens=LIMIT, temperature=0, stream=True)  # fmt: skip
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        stream.close()
        # Answered only once the parked stream let go of the models (or a 504 at its deadline).
        after = stack.alice.chat.completions.create(model=stack.model, messages=MESSAGES,
                                                    max_tokens=4, temperature=0)  # fmt: skip
        assert after.choices[0].message.content is not None
        lines = wait_until(lambda: [line for line in stack.log.read_text().splitlines()
                                    if "its client went away" in line],
                           what="the predict server's note of the closed stream", timeout=30)  # fmt: skip
        assert f"after 1 of {LIMIT} tokens" in lines[0]
    finally:
        stack.gate.unlink(missing_ok=True)


def test_responses_answer_as_chat_does_stream_store_and_continue(
    stack: Stack, reference: Any
) -> None:
    model, tokenizer = reference
    check_responses(stack.alice, stack.bob, stack.model, model, tokenizer)


def test_aliases_answer_as_the_model_they_name(stack: Stack) -> None:
    check_aliases(stack.alice, stack.bob, stack.url, stack.keys, stack.model)


def test_an_uploaded_model_and_a_cached_hub_model_answer(stack: Stack) -> None:
    check_train_sources(stack.alice, stack.bob, stack.url, stack.keys, stack.model, stack.folder)


def test_evals_grade_each_model_as_graders_run_does_by_hand(stack: Stack) -> None:
    """On one stack (the other repeats the same code path): 50 items against the fine-tuned
    model, its base and the upstream stand-in."""
    if stack.kind != "embedded":
        pytest.skip("run on the embedded stack; the production stack's runner is tested by kill")
    eval_id, runs, differ = check_evals(stack.alice, stack.bob, stack.model, stack.stub)
    if not Path(CHROMIUM).exists():
        browser_missing("chromium is not installed")
    check_compare_page(stack.url, stack.keys["alice"], eval_id, runs, differ)


def test_a_distillation_of_the_upstream_model_trains(stack: Stack) -> None:
    if stack.kind != "embedded":
        pytest.skip("run on the embedded stack; the production stack's runner is tested by kill")
    check_distillation(stack.alice, stack.url, stack.keys["alice"], stack.stub)
