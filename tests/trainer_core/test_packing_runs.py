"""``packing: true`` in whole runs: each backend, chat, prompt-completion and text data, trains
the padded run's weights (the trajectory bound: max |ΔW| ≤ 1e-3·max |W_final - W_initial|, 2
epochs of 101 rows, (b, K) = (4, 4): a partial last window with a 1-row micro-batch; fewer rows
move the weights too little for the bound to stand above Adam's amplified fp32 round-off, for a
reordered padded run too), reports its
packing efficiency, and is refused where it cannot apply. The one-window math is in
test_packing_exactness.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.trainer_core.helpers import (
    CAUSAL,
    CHAT,
    CLASSIFICATION,
    Weights,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    prompt_completion_file,
    run,
    tolerance,
)
from trainer_core.spec.job import JobSpec
from trainer_core.testing.recorder import Recorder

SHAPE = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,
         "max_seq_length": 64, "logging_steps": 1}  # fmt: skip
Run = tuple[Weights, Recorder, JobSpec]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pc = prompt_completion_file(tmp_path_factory.mktemp("pc"), rows=80)
    formats = {"messages": CHAT, "prompt-completion": {**CHAT, "dataset": str(pc)}, "text": CAUSAL}
    cache: dict[tuple[str, str, bool], Run] = {}

    def get(fmt: str, backend: str, packing: bool) -> Run:
        if (fmt, backend, packing) not in cache:
            spec = make_spec(formats[fmt], backend=backend, packing=packing, **SHAPE)
            out = tmp_path_factory.mktemp(f"{fmt}-{backend}-{packing}")
            recorder = Recorder()
            assert run(spec, out, callback=recorder).status == "completed"
            cache[fmt, backend, packing] = (final_weights(out), recorder, spec)
        return cache[fmt, backend, packing]

    return get


def _check_same_weights(trained: Any, fmt: str, backend: str) -> None:
    reference, padded, spec = trained(fmt, "pytorch", False)
    weights, packed, _ = trained(fmt, backend, True)
    bound = tolerance(initial_weights(spec), reference)
    gap = max_abs_diff(weights, reference)
    print(f"{fmt} {backend} packed vs padded: {gap:.2e} (bound {bound:.2e})")
    assert bound > 1e-6 and gap <= bound, gap
    for mine, theirs in zip(packed.epochs, padded.epochs, strict=True):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-4)
        assert mine["train_items"] == theirs["train_items"]  # the same trained tokens


@pytest.mark.parametrize("backend", ["pytorch", "accelerate", "trainer"])
def test_every_backend_packs_chat_into_the_padded_runs_weights(trained: Any, backend: str) -> None:
    _check_same_weights(trained, "messages", backend)


@pytest.mark.parametrize("fmt", ["prompt-completion", "text"])
def test_prompt_completion_and_text_pack_alike(trained: Any, fmt: str) -> None:
    _check_same_weights(trained, fmt, "pytorch")


def test_packing_efficiency_is_trained_tokens_over_tokens_computed(trained: Any) -> None:
    _, padded, _ = trained("messages", "pytorch", False)
    _, packed, _ = trained("messages", "pytorch", True)
    assert all("packing_efficiency" not in epoch for epoch in padded.epochs)
    for epoch in packed.epochs:
        # Trained tokens over the token slots computed: the untrained (prompts, each row's
        # first) and a packed row's unused tail keep it below 1.
        assert 0.1 < epoch["packing_efficiency"] < 1
    padding = [step["padding_fraction"] for step in packed.steps]
    padded_padding = [step["padding_fraction"] for step in padded.steps]
    print(f"padding fraction, mean of steps: packed {sum(padding) / len(padding):.3f}, "
          f"padded {sum(padded_padding) / len(padded_padding):.3f}")  # fmt: skip
    assert sum(padding) < 0.7 * sum(padded_padding)  # rows side by side: less slack (0.54x)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({**CLASSIFICATION}, "packing needs task causal-lm"),
        ({**CHAT, "dataset": "pairs.jsonl", "method": "dpo"}, "packing needs method sft"),
    ],
)
def test_packing_is_refused_where_it_does_not_apply(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says) as error:
        JobSpec(**spec, packing=True)
    assert error.value.errors()[0]["loc"] == ("packing",)
