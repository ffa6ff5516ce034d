"""The predict server's cache keeps one base for the LoRA adapters made on it
(``worker.predict.cache``): two jobs' adapters and the built-in model they were trained from share
one loaded base, each answers with exactly its merged model's greedy tokens whichever was used
last, and the LRU evicts adapters and bases in order of use (a base taking its adapters along),
passing over a model whose rows the batcher is running (issue 33)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.trainer_core.helpers import CHAT, make_spec, run
from trainer_core.model.trained import load_trained
from worker.predict.batcher import Batcher, choices, events
from worker.predict.cache import Loaded, ModelCache
from worker.predict.generation import Sampling

CPU = torch.device("cpu")
MESSAGES = [{"role": "user", "content": "what is 2 plus 3?"}]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Three LoRA jobs (merge_lora, for reference): a and b on tiny-chat of seed 42, c on seed 7.
    For each, the view the service serves (adapters and the base's name) and the merged model."""
    found = {}
    for name, seed, rate in (("a", 42, 1e-2), ("b", 42, 3e-2), ("c", 7, 1e-2)):
        out = tmp_path_factory.mktemp(name)
        spec = make_spec(CHAT, num_train_epochs=2, max_train_samples=32, learning_rate=rate,
                         per_device_train_batch_size=8, lora={"r": 4, "alpha": 8},
                         merge_lora=True, seed=seed)  # fmt: skip
        assert run(spec, out).status == "completed"
        view = out / ".lora-model"
        shutil.copytree(out / "adapter", view)
        (view / "gradacc_base.json").write_text(json.dumps({"model": spec.model, "seed": seed}))
        found[name] = (view, out / "model")
    return found


@torch.inference_mode()
def _greedy(model: Any, tokenizer: Any, n: int = 10) -> list[int]:
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                         do_sample=False, pad_token_id=tokenizer.eos_token_id)  # fmt: skip
    return [int(t) for t in out[0, ids.shape[1] :]]


def _served(loaded: Loaded) -> list[int]:
    loaded.activate()
    return _greedy(loaded.model, loaded.tokenizer)


def test_adapters_share_their_base_and_answer_as_their_merged_models(
    jobs: dict[str, tuple[Path, Path]],
) -> None:
    cache = ModelCache(capacity=2, adapter_capacity=4)
    a = cache.get(jobs["a"][0], causal=True, device=CPU)
    b = cache.get(jobs["b"][0], causal=True, device=CPU)
    base = cache.builtin("builtin:tiny-chat", 42, CPU)
    assert a.model is b.model is base.model  # one module tree
    assert (cache.base_loads, cache.adapter_loads) == (1, 2)
    merged = {n: AutoModelForCausalLM.from_pretrained(jobs[n][1]) for n in ("a", "b")}
    expected = {n: _greedy(merged[n], a.tokenizer) for n in ("a", "b")}
    plain = cache.builtin("builtin:tiny-chat", 42, CPU)
    assert plain is base
    # Negative control: the two jobs and the base differ, so a wrong adapter would show.
    assert len({tuple(expected["a"]), tuple(expected["b"]), tuple(_served(base))}) == 3
    for loaded, name in ((a, "a"), (b, "b"), (b, "b"), (a, "a"), (base, None), (b, "b")):
        answer = _served(loaded)
        assert answer == (expected[name] if name else _served(plain)), name
    assert (cache.base_loads, cache.adapter_loads) == (1, 2)  # nothing read again


def test_the_lru_evicts_adapters_then_bases_with_their_adapters(
    jobs: dict[str, tuple[Path, Path]],
) -> None:
    cache = ModelCache(capacity=1, adapter_capacity=1)
    a = cache.get(jobs["a"][0], causal=True, device=CPU)
    cache.get(jobs["b"][0], causal=True, device=CPU)  # one adapter at most: a goes
    assert (cache.base_loads, cache.adapter_loads) == (1, 2)
    assert cache.get(jobs["a"][0], causal=True, device=CPU) is not a  # read again, b out
    assert cache.stats() == {"base_loads": 1, "adapter_loads": 3, "bases": 1, "adapters": 1}
    c = cache.get(jobs["c"][0], causal=True, device=CPU)  # another base: seed 42's goes, a too
    assert cache.stats() == {"base_loads": 2, "adapter_loads": 4, "bases": 1, "adapters": 1}
    assert c.model is not a.model
    big = ModelCache(capacity=2, adapter_capacity=8)
    for name in ("a", "b", "c", "a", "b", "c"):
        big.get(jobs[name][0], causal=True, device=CPU)
    assert big.stats() == {"base_loads": 2, "adapter_loads": 3, "bases": 2, "adapters": 3}


def test_a_base_whose_last_adapter_goes_is_plain_again(
    jobs: dict[str, tuple[Path, Path]],
) -> None:
    cache = ModelCache(capacity=2, adapter_capacity=1)
    base = cache.builtin("builtin:tiny-chat", 42, CPU)
    before = _served(base)
    cache.get(jobs["a"][0], causal=True, device=CPU)
    assert type(base.model).__name__ == "PeftModelForCausalLM"
    cache.get(jobs["c"][0], causal=True, device=CPU)  # on seed 7's base; a goes
    assert cache.builtin("builtin:tiny-chat", 42, CPU) is base  # the base stays, plain again
    assert cache.stats() == {"base_loads": 2, "adapter_loads": 2, "bases": 2, "adapters": 1}
    assert not any("lora_" in name for name, _ in base.model.named_parameters())
    assert _served(base) == before


def _on_folder_base(adapters: Path, base: Path, into: Path, *, link: bool) -> Path:
    """An adapter view whose base is a model folder inside it, hard-linked as the service
    links a base in (``gradacc.sources.fine_tuned``), or copied."""
    shutil.copytree(adapters, into)
    (into / "gradacc_base.json").unlink()
    shutil.copytree(base, into / "base", copy_function=os.link if link else shutil.copy2)
    return into


def test_adapters_on_one_linked_base_folder_share_it(
    jobs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    whole = jobs["c"][1]  # a model folder as a base (any of the same architecture)
    one = _on_folder_base(jobs["a"][0], whole, tmp_path / "one", link=True)
    two = _on_folder_base(jobs["b"][0], whole, tmp_path / "two", link=True)
    copied = _on_folder_base(jobs["b"][0], whole, tmp_path / "copied", link=False)
    cache = ModelCache(capacity=4, adapter_capacity=4)
    served = cache.get(whole, causal=True, device=CPU)
    first = cache.get(one, causal=True, device=CPU)
    assert cache.get(two, causal=True, device=CPU).model is first.model is served.model
    assert cache.base_loads == 1
    assert cache.get(copied, causal=True, device=CPU).model is not first.model  # other files
    assert cache.base_loads == 2
    merged = load_trained(one, AutoModelForCausalLM, label_kwargs={})
    assert _served(first) == _greedy(merged, first.tokenizer)
    assert _served(served) == _greedy(AutoModelForCausalLM.from_pretrained(whole), first.tokenizer)


def _prompt(tokenizer: Any) -> list[int]:
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_a_pinned_adapter_is_not_evicted(
    jobs: dict[str, tuple[Path, Path]], caplog: pytest.LogCaptureFixture
) -> None:
    cache = ModelCache(capacity=1, adapter_capacity=1)
    a = cache.get(jobs["a"][0], causal=True, device=CPU)
    a.pin()
    with caplog.at_level(logging.WARNING, logger="worker.predict.cache"):
        b = cache.get(jobs["b"][0], causal=True, device=CPU)  # over capacity: a is in use
        assert "2 adapters loaded, over the 1 allowed" in caplog.text
        assert cache.stats()["adapters"] == 2 and a.adapter in a.base.adapters
        assert cache.builtin("builtin:tiny-chat", 7, CPU).model is not a.model
        assert "2 bases loaded, over the 1 allowed" in caplog.text  # a's base is in use too
    assert cache.stats()["adapters"] == 1 and b.adapter not in a.base.adapters  # b was free
    a.unpin()
    cache.get(jobs["b"][0], causal=True, device=CPU)  # the next use trims: a and seed 7 go
    assert cache.stats() == {"base_loads": 2, "adapter_loads": 3, "bases": 1, "adapters": 1}
    assert a.adapter not in a.base.adapters


def test_two_adapters_in_use_at_once_each_answer_as_their_own(
    jobs: dict[str, tuple[Path, Path]],
) -> None:
    """One adapter allowed, two requested while both have rows: b's load comes while a's rows
    wait in the batcher, so evicting a would fail them ("unloaded while in use")."""
    cache, batcher = ModelCache(capacity=1, adapter_capacity=1), Batcher()
    a = batcher.call(lambda: cache.get(jobs["a"][0], causal=True, device=CPU))
    entered, gate = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        gate.wait(120)

    # The scheduler runs this call: what is submitted meanwhile queues behind it, in order.
    threading.Thread(target=batcher.call, args=(hold,)).start()
    assert entered.wait(60)
    greedy = Sampling(max_tokens=10, temperature=0)
    deadline = time.monotonic() + 120
    rows_a = choices(a, _prompt(a.tokenizer), greedy, deadline=deadline)
    batcher.submit(rows_a)
    loaded: list[Loaded] = []
    load_b = lambda: loaded.append(cache.get(jobs["b"][0], causal=True, device=CPU))  # noqa: E731
    loading = threading.Thread(target=batcher.call, args=(load_b,))
    loading.start()
    while batcher._inbox.qsize() < 2:  # a's row, then b's load, queued behind the held call
        time.sleep(0.001)
    gate.set()
    loading.join(120)
    (b,) = loaded
    rows_b = choices(b, _prompt(b.tokenizer), greedy, deadline=deadline)
    batcher.submit(rows_b)
    eos, answers = a.tokenizer.eos_token_id, []
    for name, rows in (("a", rows_a), ("b", rows_b)):
        (done,) = [event.done for event in events(rows) if event.done]
        expected = _greedy(AutoModelForCausalLM.from_pretrained(jobs[name][1]), a.tokenizer)
        expected = expected[: expected.index(eos) + 1] if eos in expected else expected
        assert done.tokens == expected, name  # (generate pads after the end-of-text token)
        answers.append(done.tokens)
    assert answers[0] != answers[1]  # a wrong adapter would show
