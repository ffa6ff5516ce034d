"""The Responses API and model aliases checked through the official SDK on test_chat_completions'
stack (its trained model is shared): a response is the text greedy generation gives on the
downloaded model and chat completions give; its stream joins to it; a stored conversation
continues; tenants see only their own; aliases answer as the model they name."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

QUESTION, FOLLOW_UP = "what is 2 plus 3?", "and 3 plus 4?"
INSTRUCTIONS = "Answer with a number."
TOKENS = 16
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_NAME = "ft:gpt-4o-mini-2024-07-18:acme::AbC123"


def _generated(model: Any, tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, int, int]:
    """The greedy answer's text, the prompt's and the answer's token counts."""
    import torch

    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    tensor = torch.tensor([ids])
    out = model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor),
                         max_new_tokens=TOKENS, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    tokens = out[0, len(ids) :].tolist()
    return tokenizer.decode(tokens, skip_special_tokens=True), len(ids), len(tokens)


def _chat(sdk: openai.OpenAI, model: str, messages: list[dict[str, str]]) -> str | None:
    answer = sdk.chat.completions.create(model=model, messages=messages,  # type: ignore[arg-type]
                                         max_completion_tokens=TOKENS, temperature=0)  # fmt: skip
    return answer.choices[0].message.content


def check_responses(
    alice: openai.OpenAI, bob: openai.OpenAI, name: str, model: Any, tokenizer: Any
) -> None:
    first = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}]
    text, prompt_tokens, answer_tokens = _generated(model, tokenizer, first)
    assert _chat(alice, name, first) == text
    asked = {"model": name, "max_output_tokens": TOKENS, "temperature": 0}
    response = alice.responses.create(input=QUESTION, instructions=INSTRUCTIONS, **asked)
    assert (response.object, response.model, response.output_text) == ("response", name, text)
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (
        prompt_tokens,
        answer_tokens,
    )
    # The stream: typed events whose deltas join to the same text, ending with the usage.
    events = list(alice.responses.create(input=QUESTION, instructions=INSTRUCTIONS, stream=True,
                                         store=False, **asked))  # fmt: skip
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == text
    last = events[-1]
    assert last.type == f"response.{response.status}"  # completed, or incomplete at the limit
    assert last.response.usage == response.usage and last.response.output_text == text
    with pytest.raises(openai.NotFoundError):  # store: false
        alice.responses.retrieve(last.response.id)
    # A stored conversation continues (instructions are not carried over, as OpenAI does).
    second = alice.responses.create(input=FOLLOW_UP, previous_response_id=response.id, **asked)
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": text},
               {"role": "user", "content": FOLLOW_UP}]  # fmt: skip
    assert second.output_text == _generated(model, tokenizer, history)[0]
    assert second.output_text == _chat(alice, name, history)
    assert alice.responses.retrieve(response.id).output_text == text
    (item,) = alice.responses.input_items.list(second.id).data
    assert item.type == "message" and item.content[0].text == FOLLOW_UP  # type: ignore[union-attr]
    # Another tenant reaches none of it.
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(input=FOLLOW_UP, previous_response_id=response.id, **asked)
    alice.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(second.id)


def check_aliases(
    alice: openai.OpenAI, bob: openai.OpenAI, url: str, keys: dict[str, str], name: str
) -> None:
    def put(tenant: str, alias: str, model: str) -> httpx.Response:
        return httpx.put(f"{url}/v1/aliases/{alias}", json={"model": model}, timeout=30,
                         headers={"Authorization": f"Bearer {keys[tenant]}"})  # fmt: skip

    assert put("alice", OLD_NAME, name).status_code == 200
    messages = [{"role": "user", "content": QUESTION}]
    expected = _chat(alice, name, messages)
    assert _chat(alice, OLD_NAME, messages) == expected
    under_alias = alice.responses.create(model=OLD_NAME, input=QUESTION, temperature=0,
                                         max_output_tokens=TOKENS)  # fmt: skip
    assert under_alias.output_text == expected
    listed = {m.id: m for m in alice.models.list()}
    assert (listed[OLD_NAME].model_extra or {}).get("alias_for") == name
    # The operator's (GRADACC_SERVE_ALIASES: "gpt-4o*" for every tenant), listed with alice's.
    assert _chat(bob, "gpt-4o-2024-08-06", messages) == _chat(bob, "builtin:tiny-chat", messages)
    shown = httpx.get(f"{url}/v1/aliases", headers={"Authorization": f"Bearer {keys['alice']}"})
    assert {(a["alias"], a["set_by"]) for a in shown.json()["data"]} == {
        ("gpt-4o*", "operator"),
        (OLD_NAME, "tenant"),
    }
    # Alice's alias is hers: bob's request under it names nothing; he cannot point one at her model.
    with pytest.raises(openai.NotFoundError):
        _chat(bob, OLD_NAME, messages)
    refused = put("bob", OLD_NAME, name)
    assert refused.status_code == 404 and refused.json()["error"]["param"] == "model"
    gone = httpx.delete(f"{url}/v1/aliases/{OLD_NAME}",
                        headers={"Authorization": f"Bearer {keys['alice']}"})  # fmt: skip
    assert gone.status_code == 200
    with pytest.raises(openai.NotFoundError):
        _chat(alice, OLD_NAME, messages)


def check_train_sources(
    alice: openai.OpenAI,
    bob: openai.OpenAI,
    url: str,
    keys: dict[str, str],
    name: str,
    folder: Path,
) -> None:
    """What a tenant can train from, it can talk to: its uploaded model (``file-…``, sent as
    docs/models.md's ``tar czf model.tar.gz -C folder .``) and a hub model in the server's cache
    (here a fake cache holding the same weights) answer as the ``ft:`` model they copy."""
    archive = folder.parent / "upload.tar.gz"
    subprocess.run(["tar", "czf", str(archive), "-C", str(folder), "."], check=True)
    sent = httpx.post(f"{url}/v1/files", data={"purpose": "model"}, timeout=60,
                      files={"file": ("model.tar.gz", archive.read_bytes())},
                      headers={"Authorization": f"Bearer {keys['alice']}"})  # fmt: skip
    assert sent.status_code == 201, sent.text
    uploaded = sent.json()["id"]
    hub_id = "acme/tiny-chat-copy"
    repo = folder.parents[1] / "hf-cache" / f"models--{hub_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    messages = [{"role": "user", "content": QUESTION}]
    expected = _chat(alice, name, messages)
    assert _chat(alice, uploaded, messages) == expected  # was 404 "does not exist"
    assert _chat(alice, hub_id, messages) == expected
    with pytest.raises(openai.NotFoundError):  # an upload is its tenant's
        _chat(bob, uploaded, messages)
    with pytest.raises(openai.NotFoundError, match="Hugging Face cache"):
        _chat(alice, "acme/not-cached", messages)
