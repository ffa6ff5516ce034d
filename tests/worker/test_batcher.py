"""The predict server's batcher (``worker.predict.batcher``) on the built-in tiny models, in
process: rows decoded together give each what it gets alone, and what ``model.generate`` gives;
a seeded row draws the same whatever runs beside it; stop strings, cancellation and deadlines
end one row and leave the others as they were."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.model.trained import build_builtin
from worker.predict.batcher import Batcher, GenerationFailed, Row, choices, events
from worker.predict.generation import Completion, Sampling

PROMPTS = ["the cat sat on", "what is 2 plus 3?", "a", "the quick brown fox jumped over the lazy dog",
           "hello there, how are you today"]  # fmt: skip
GREEDY = Sampling(max_tokens=16, temperature=0)
SAMPLED = Sampling(max_tokens=12, temperature=1.0, top_p=0.9)


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    device: torch.device


@pytest.fixture(scope="module", params=["builtin:tiny-gpt2", "builtin:tiny-chat"])
def loaded(request: pytest.FixtureRequest) -> Loaded:
    tokenizer = builtin_tokenizer(request.param)
    model = build_builtin(request.param, 42, AutoModelForCausalLM, {}, tokenizer).eval()
    return Loaded(model, tokenizer, torch.device("cpu"))


@pytest.fixture(scope="module")
def batcher() -> Iterator[Batcher]:
    yield Batcher()


def _ids(loaded: Loaded) -> list[list[int]]:
    return [list(loaded.tokenizer(p)["input_ids"]) for p in PROMPTS]


def _rows(loaded: Loaded, prompt: list[int], sampling: Sampling = GREEDY, **kw: Any) -> list[Row]:
    return choices(loaded, prompt, sampling, deadline=time.monotonic() + 60, **kw)


def _together(batcher: Batcher, groups: list[list[Row]]) -> list[list[Completion]]:
    """Every group submitted at once (they share batches), each group's completions."""
    for rows in groups:
        batcher.submit(rows)
    return [_collect(rows) for rows in groups]


def _collect(rows: list[Row]) -> list[Completion]:
    done = {e.index: e.done for e in events(rows) if e.done is not None}
    return [done[row.index] for row in rows]


def _joins_after(batcher: Batcher, k: int, late: list[Row]) -> Callable[[], bool]:
    """A cancellation check that submits ``late`` once its row has ``k`` tokens (so they join a
    running batch at a step boundary, not by timing) and never cancels."""
    asked = [0]

    def check() -> bool:
        asked[0] += 1
        if asked[0] == k:
            batcher.submit(late)
        return False

    return check


@torch.inference_mode()
def _generate(loaded: Loaded, ids: list[int], max_new_tokens: int) -> list[int]:
    tensor = torch.tensor([ids])
    out = loaded.model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor),
                                max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=loaded.tokenizer.pad_token_id,
                                eos_token_id=loaded.tokenizer.eos_token_id)  # fmt: skip
    return [int(t) for t in out[0, len(ids) :]]


def test_greedy_rows_batched_equal_alone_and_generate(loaded: Loaded, batcher: Batcher) -> None:
    prompts = _ids(loaded)
    reference = [_generate(loaded, p, GREEDY.max_tokens) for p in prompts]
    alone = [batcher.complete(_rows(loaded, p))[0].tokens for p in prompts]
    assert alone == reference
    steps = batcher.steps
    together = _together(batcher, [_rows(loaded, p) for p in prompts])
    assert [c[0].tokens for c in together] == reference
    assert batcher.steps - steps <= GREEDY.max_tokens  # one decode for all of them
    # Rows joining a running batch (its cache left padded to theirs, or theirs to its).
    late = [_rows(loaded, p) for p in prompts[2:]]
    first = _rows(
        loaded, prompts[0], cancelled=_joins_after(batcher, 3, [r for g in late for r in g])
    )
    second = _rows(loaded, prompts[1], cancelled=_joins_after(batcher, 6, []))
    joined = _together(batcher, [first, second]) + [_collect(rows) for rows in late]
    assert [c[0].tokens for c in joined] == reference


def test_seeded_rows_draw_the_same_whatever_runs_beside_them(
    loaded: Loaded, batcher: Batcher
) -> None:
    prompt = _ids(loaded)[1]
    alone = batcher.complete(_rows(loaded, prompt, SAMPLED, n=2, seed=7))
    companions = [_rows(loaded, p, SAMPLED, n=2, seed=3) for p in _ids(loaded)]
    beside = _together(batcher, [*companions, _rows(loaded, prompt, SAMPLED, n=2, seed=7)])[-1]
    assert [c.tokens for c in beside] == [c.tokens for c in alone]
    assert alone[0].tokens != alone[1].tokens  # each choice draws from its own generator
    other = batcher.complete(_rows(loaded, prompt, SAMPLED, n=2, seed=8))
    assert [c.tokens for c in other] != [c.tokens for c in alone]


def test_a_stop_string_ends_its_own_row_only(loaded: Loaded, batcher: Batcher) -> None:
    prompts = _ids(loaded)
    plain = batcher.complete(_rows(loaded, prompts[0]))[0]
    assert len(plain.text) >= 4, plain.text
    stop = plain.text[len(plain.text) // 2 : len(plain.text) // 2 + 2]
    stopping = Sampling(max_tokens=GREEDY.max_tokens, temperature=0, stop=(stop,))
    cut, other = _together(
        batcher, [_rows(loaded, prompts[0], stopping), _rows(loaded, prompts[0])]
    )
    assert (cut[0].text, cut[0].finish_reason) == (plain.text[: plain.text.index(stop)], "stop")
    assert other[0].tokens == plain.tokens and other[0].text == plain.text


def test_a_cancelled_row_leaves_and_the_others_go_on(loaded: Loaded, batcher: Batcher) -> None:
    # The longest prompt leaves: the columns only it used are dropped from the others' cache.
    prompts = [_ids(loaded)[i] for i in (3, 0, 2)]
    reference = [batcher.complete(_rows(loaded, p))[0].tokens for p in prompts]
    asked = [0]

    def gone_after_two() -> bool:
        asked[0] += 1
        return asked[0] >= 2

    groups = [_rows(loaded, prompts[0], cancelled=gone_after_two), _rows(loaded, prompts[1]),
              _rows(loaded, prompts[2])]  # fmt: skip
    gone, *others = _together(batcher, groups)
    assert gone[0].cancelled and len(gone[0].tokens) == 2
    assert [c[0].tokens for c in others] == reference[1:]
    assert not any(c[0].cancelled for c in others)


def test_deadlines(loaded: Loaded, batcher: Batcher) -> None:
    prompts = _ids(loaded)
    late = choices(loaded, prompts[0], GREEDY, deadline=time.monotonic() - 1)
    assert batcher.complete(late)[0].timed_out and not late[0].text.done.tokens
    # A deadline that passes mid-way (moved by the row's own check, not by a clock race).
    (row,) = _rows(loaded, prompts[1])
    asked = [0]

    def expire_after_three() -> bool:
        asked[0] += 1
        if asked[0] == 3:
            row.deadline = 0.0
        return False

    row.cancelled = expire_after_three
    (done,) = batcher.complete([row])
    assert done.timed_out and len(done.tokens) == 4


def test_logprobs_are_the_models_own(loaded: Loaded, batcher: Batcher) -> None:
    prompt = _ids(loaded)[1]
    wanting = Sampling(max_tokens=4, temperature=0, top_logprobs=2)
    (done,) = batcher.complete(_rows(loaded, prompt, wanting))
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([prompt + done.tokens[:-1]])).logits[
            0, len(prompt) - 1 :
        ]
    expected = logits.float().log_softmax(-1)
    assert len(done.logprobs) == len(done.tokens) == 4
    for step, (token, found) in enumerate(zip(done.tokens, done.logprobs, strict=True)):
        assert found.logprob == pytest.approx(float(expected[step, token]), abs=1e-4)
        assert len(found.top) == 2 and found.top[0][1] == pytest.approx(found.logprob, abs=1e-6)


def test_a_failed_batch_fails_its_rows_and_the_batcher_goes_on(
    loaded: Loaded, batcher: Batcher
) -> None:
    too_long = [1] * (loaded.model.config.n_positions + 8)  # past the position table
    with pytest.raises(GenerationFailed):
        batcher.complete(_rows(loaded, too_long))
    assert batcher.complete(_rows(loaded, _ids(loaded)[0]))[0].tokens
