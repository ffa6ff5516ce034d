"""Cross-entropy a chunk of tokens at a time (``loss_chunk_tokens``, ``trainer_core.chunked_head``):
the same losses and gradients as the whole logits', in fp32, for SFT's sum (gradients made in the
forward), for the per-token losses DPO and GRPO are made of (logits recomputed in the backward),
and through a run; a model whose logits are not its head's is refused by name. The peak memory
and speed at 4,096 tokens are bench/chunked_loss.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from transformers import GPT2Config, GPT2LMHeadModel

from tests.trainer_core.dpo_pairs import pairs_file, start
from tests.trainer_core.grpo_rollouts import make_rollouts, policy_loss, starting_model
from tests.trainer_core.helpers import (
    CHAT,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.accumulation import (
    IGNORE_INDEX,
    PairLoss,
    micro_step_loss,
    pair_micro_step,
    rollout_micro_step,
    sequence_token_nll,
)
from trainer_core.chunked_head import check_head
from trainer_core.data.dpo import collate_pairs
from trainer_core.data.grpo import collate_rollouts, rollout_split
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec

QWEN3_VOCAB = 151_936
# fp32 sums in another order (the tied head's gradient adds 120 token rows per vocabulary row
# in the plain path, a chunk's at a time here): 1.2e-6 seen under load; a wrong scale is ~1.
RELATIVE = 1e-5


def grads(model: torch.nn.Module) -> torch.Tensor:
    flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return flat


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def wide() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A two-layer decoder on Qwen3's vocabulary (its head: 151,936 x 32, tied), and a batch of
    three rows of different lengths with untrained prompts and padding."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=QWEN3_VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = GPT2LMHeadModel(config).train()
    ids = torch.randint(0, QWEN3_VOCAB, (3, 40))
    mask = torch.ones_like(ids)
    mask[1, 30:], mask[2, 12:] = 0, 0
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    labels[:, :5] = IGNORE_INDEX  # a prompt
    trained = int((labels[:, 1:] != IGNORE_INDEX).sum())
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels, "n_window_items": trained}
    return model, batch


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_on_qwen3_s_vocabulary_the_gradient_is_the_whole_logits(
    wide: tuple[torch.nn.Module, dict[str, torch.Tensor]], chunk: int
) -> None:
    model, batch = wide
    plain = micro_step_loss(model, {**batch, "count_hits": True}, causal=True)
    plain.loss.backward()  # type: ignore[no-untyped-call]
    expected = grads(model)
    chunked = micro_step_loss(model, {**batch, "count_hits": True}, causal=True, chunk=chunk)
    chunked.loss.backward()  # type: ignore[no-untyped-call]
    assert float(chunked.summed) == pytest.approx(float(plain.summed), rel=1e-6)
    assert int(chunked.hits or 0) == int(plain.hits or 0)
    assert gap(grads(model), expected) <= RELATIVE
    # Per token, with a different incoming gradient on each (DPO's and GRPO's case).
    weights = torch.rand(3, 39)
    (sequence_token_nll(model, batch) * weights).sum().backward()  # type: ignore[no-untyped-call]
    expected = grads(model)
    (sequence_token_nll(model, batch, chunk) * weights).sum().backward()  # type: ignore[no-untyped-call]
    assert gap(grads(model), expected) <= RELATIVE


def test_dpo_s_and_grpo_s_micro_steps_chunked_are_the_plain_ones(tmp_path: Path) -> None:
    spec = make_spec(CHAT, dataset=str(pairs_file(tmp_path, count=6)), method="dpo",
                     validation_split_percentage=0, rpo_alpha=0.5)  # fmt: skip
    model, split, pad = start(spec)
    batch = collate_pairs(split, [0, 1, 2, 3], pad, split.reference[spec.model])
    batch |= {"n_window_items": 6, "n_window_tokens": 50}
    loss = PairLoss(spec.dpo_beta, rpo_alpha=0.5)
    results = []
    for chunk in (None, 9):
        step = pair_micro_step(model, batch, loss, None, chunk)
        step.loss.backward()  # type: ignore[no-untyped-call]
        results.append((float(step.summed), grads(model)))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-6)
    assert gap(results[1][1], results[0][1]) <= RELATIVE

    grpo = JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic", task="causal-lm")
    rollouts = rollout_split(make_rollouts(grpo), policy_loss("grpo"))
    policy = starting_model(grpo)
    rows = collate_rollouts(rollouts, list(range(6)), pad)
    rows |= {"n_window_items": 12, "n_window_tokens": sum(rollouts.trained),
             "n_window_completions": 12}  # fmt: skip
    found = []
    for chunk in (None, 11):
        step = rollout_micro_step(policy, rows, rollouts.loss, chunk)
        step.loss.backward()  # type: ignore[no-untyped-call]
        found.append(grads(policy))
    assert gap(found[1], found[0]) <= RELATIVE


def test_a_chunked_run_equals_the_plain_run_at_another_b_and_k(tmp_path: Path) -> None:
    """Chunked at (2, 4) against whole logits at (8, 1): the same training, within the bar."""
    common = {"num_train_epochs": 1, "max_train_samples": 24, "validation_split_percentage": 0}
    chunked = make_spec(CHAT, **common, per_device_train_batch_size=2,
                        gradient_accumulation_steps=4, loss_chunk_tokens=16)  # fmt: skip
    plain = make_spec(CHAT, **common, per_device_train_batch_size=8, gradient_accumulation_steps=1)
    run(chunked, tmp_path / "chunked")
    run(plain, tmp_path / "plain")
    reference = final_weights(tmp_path / "plain")
    bound = tolerance(initial_weights(plain), reference)
    assert max_abs_diff(final_weights(tmp_path / "chunked"), reference) <= bound


def test_what_cannot_be_chunked_is_refused_by_name() -> None:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    capped = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, final_logit_softcapping=0.05,
    ))  # fmt: skip
    with pytest.raises(JobError, match="soft-capped or scaled") as refused:
        check_head(capped, torch.device("cpu"), "gemma-2-tiny")
    assert refused.value.param == "loss_chunk_tokens" and "gemma-2-tiny" in refused.value.message
    with pytest.raises(ValidationError, match="loss_chunk_tokens needs task causal-lm"):
        JobSpec(model="builtin:tiny-bert", dataset="builtin:sentiment", loss_chunk_tokens=64)
