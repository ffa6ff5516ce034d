"""The Tinker training host against hand references on builtin:tiny-chat: the window's update
whatever the chunking, order and micro-batches; ``none`` as the raw weighted sum; forward
logprobs and greedy sampling against a plain forward and ``generate``; save and restore."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from trainer_core.tinker_host.host import Datum, StepParams, TrainingHost
from trainer_core.tinker_host.model import ModelChoice
from trainer_core.tinker_host.sampling import SampleParams, sample

CHOICE = ModelChoice("builtin:tiny-chat", rank=0)
LR = 0.5


def _data(count: int, seed: int = 0) -> list[Datum]:
    rng = random.Random(seed)
    data = []
    for _ in range(count):
        n = rng.randint(3, 9)
        tokens = [rng.randint(5, 200) for _ in range(n + 1)]
        weights = torch.tensor([float(rng.random() < 0.7) for _ in range(n)])
        inputs = {"target_tokens": torch.tensor(tokens[1:]), "weights": weights}
        data.append(Datum(tokens[:-1], inputs))
    return data


def _update(host: TrainingHost, calls: list[list[Datum]], mode: str) -> dict[str, torch.Tensor]:
    before = host.weights()
    for call in calls:
        host.forward_backward(call, "cross_entropy", {"grad_accumulation_normalization": mode})
    host.optim_step(StepParams(family="sgd", learning_rate=LR))
    return {k: v - before[k] for k, v in host.weights().items()}


def _hand_update(data: list[Datum], divide: float) -> dict[str, torch.Tensor]:
    """One plain loop: the summed weighted NLL of every datum, divided, one SGD step."""
    host = TrainingHost(CHOICE, family="sgd")
    model = host.model
    total = torch.zeros(())
    for datum in data:
        logits = model(input_ids=torch.tensor([datum.tokens])).logits[0]
        logp = torch.log_softmax(logits.float(), -1)
        picked = logp.gather(-1, datum.inputs["target_tokens"][:, None])[:, 0]
        total = total - (picked * datum.inputs["weights"]).sum()
    (total / divide).backward()
    return {name: -LR * p.grad for name, p in host.params.items()}


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float) -> float:
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= tol, worst
    return worst


def test_window_is_exact_whatever_the_chunking_order_and_micro_batches() -> None:
    data = _data(24)
    tokens = sum(int((d.inputs["weights"] != 0).sum()) for d in data)
    reference = _hand_update(data, tokens)
    largest = max(float(v.abs().max()) for v in reference.values())
    assert largest > 0
    one = _update(TrainingHost(CHOICE, family="sgd"), [data], "num_loss_tokens")
    _close(one, reference, 1e-5 * largest)
    rng = random.Random(3)
    for parts in (3, 8):
        calls = [data[i::parts] for i in range(parts)]
        rng.shuffle(calls)
        _close(_update(TrainingHost(CHOICE, family="sgd"), calls, "num_loss_tokens"), one, 1e-6)
    for micro in (1, 4):
        host = TrainingHost(CHOICE, family="sgd", micro_batch=micro)
        _close(_update(host, [data], "num_loss_tokens"), one, 1e-6)


def test_none_is_the_raw_signed_sum_and_sequences_divide_by_rows() -> None:
    data = _data(6, seed=1)
    for datum in data:  # signed, fractional weights, as forward_backward_custom sends them
        datum.inputs["weights"] = datum.inputs["weights"] * -0.37
    _close(
        _update(TrainingHost(CHOICE, family="sgd"), [data], "none"), _hand_update(data, 1.0), 1e-6
    )
    rows = sum(1 for d in data if bool((d.inputs["weights"] != 0).any()))
    got = _update(TrainingHost(CHOICE, family="sgd"), [data[:2], data[2:]], "num_sequences")
    _close(got, _hand_update(data, rows), 1e-6)


def test_disagreeing_modes_are_refused_before_anything_changes() -> None:
    host = TrainingHost(CHOICE, family="sgd")
    data = _data(2)
    host.forward_backward(data[:1], "cross_entropy", {"grad_accumulation_normalization": "none"})
    host.forward_backward(
        data[1:], "cross_entropy", {"grad_accumulation_normalization": "num_sequences"}
    )
    before = host.weights()
    with pytest.raises(ValueError, match="disagree"):
        host.optim_step(StepParams(family="sgd", learning_rate=LR))
    _close(host.weights(), before, 0.0)
    with pytest.raises(ValueError, match="created with 'sgd'"):
        host.optim_step(StepParams(family="adamw"))


def test_forward_logprobs_and_greedy_sampling_match_plain_transformers() -> None:
    host = TrainingHost(CHOICE)
    data = _data(3, seed=2)
    out = host.forward_backward(data, "cross_entropy", {}, forward_only=True)
    assert all(p.grad is None for p in host.params.values())  # forward-only touches no gradient
    for datum, got in zip(data, out.logprobs, strict=True):
        logits = host.model(input_ids=torch.tensor([datum.tokens])).logits[0]
        want = torch.log_softmax(logits.float(), -1).gather(
            -1, datum.inputs["target_tokens"][:, None]
        )[:, 0]
        assert torch.allclose(got, want.detach(), atol=1e-6)
    prompt = data[0].tokens
    params = SampleParams(max_tokens=12, temperature=0.0, stop=[])
    got = sample(host.model, host.tokenizer, prompt, 2, params, prompt_logprobs=True)
    generated = host.model.generate(
        torch.tensor([prompt]),
        max_new_tokens=12,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()
    assert [s.tokens for s in got.sequences] == [generated, generated]
    assert all(s.stop_reason == "length" for s in got.sequences)
    assert got.prompt_logprobs is not None and got.prompt_logprobs[0] != got.prompt_logprobs[0]
    assert got.prompt_logprobs[1:] == pytest.approx(
        torch.log_softmax(host.model(input_ids=torch.tensor([prompt])).logits[0].float(), -1)[:-1]
        .gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
        .tolist(),
        abs=1e-5,
    )


def test_save_and_restore_continue_as_the_uninterrupted_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _data(8, seed=4)
    lora = ModelChoice("builtin:tiny-chat", rank=4, seed=1)
    step = StepParams(learning_rate=1e-2)
    straight = TrainingHost(lora)
    for i in range(3):
        straight.forward_backward(data[i::3], "cross_entropy", {})
        straight.optim_step(step)
    first = TrainingHost(lora)
    first.forward_backward(data[0::3], "cross_entropy", {})
    first.optim_step(step)
    first.save(tmp_path / "state.pt", optimizer=True)
    second = TrainingHost(lora)
    second.restore(tmp_path / "state.pt", optimizer=True)
    for i in (1, 2):
        second.forward_backward(data[i::3], "cross_entropy", {})
        second.optim_step(step)
    _close(second.weights(), straight.weights(), 0.0)
    assert len(straight.params) < 40  # adapters only


def test_a_model_swapped_out_mid_window_goes_on_as_if_it_had_stayed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _data(6, seed=5)
    config = {"grad_accumulation_normalization": "num_loss_tokens"}
    lora = ModelChoice("builtin:tiny-chat", rank=4, seed=2)
    stayed, swapped = TrainingHost(lora), TrainingHost(lora)
    for host in (stayed, swapped):
        host.forward_backward(data[:2], "cross_entropy", config)
        host.optim_step(StepParams(learning_rate=1e-2))
        host.forward_backward(data[2:4], "cross_entropy", config)  # a window left open
    swapped.swap_out(tmp_path / "swap.pt")
    back = TrainingHost(lora)
    back.swap_in(tmp_path / "swap.pt")
    for host in (stayed, back):
        host.forward_backward(data[4:], "cross_entropy", config)
        host.optim_step(StepParams(learning_rate=1e-2))
    _close(back.weights(), stayed.weights(), 0.0)
    assert back.steps == stayed.steps == 2 and not (tmp_path / "swap.pt").exists()


def _two_ranks(rank: int, store: str, out: str) -> None:
    """One of two data-parallel ranks: each adds its share of every call; rank 0 swaps the model
    out mid-window (after ``collect``) and both swap it back in before the window ends."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    data, lora = _data(8, seed=6), ModelChoice("builtin:tiny-chat", rank=4, seed=2)
    config = {"grad_accumulation_normalization": "num_loss_tokens"}
    host = TrainingHost(lora)
    for call in (data[0:5], data[5:6]):  # uneven: the second call's one datum is rank 0's
        host.forward_backward(call[rank::2], "cross_entropy", config)
    host.collect()
    swap = f"{out}.swap"
    if rank == 0:
        host.swap_out(Path(swap))
    dist.barrier()
    back = TrainingHost(lora)
    back.swap_in(Path(swap), whole=rank == 0, unlink=False)
    back.forward_backward(data[6:8][rank::2], "cross_entropy", config)
    back.optim_step(StepParams(learning_rate=1e-2))
    torch.save(back.weights(), f"{out}.{rank}")
    dist.destroy_process_group()


def test_two_ranks_give_the_one_rank_update(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same window over two gloo ranks (each given a share of every call, a swap-out
    mid-window) and on one: the same update; the replicas stay identical."""
    data, lora = _data(8, seed=6), ModelChoice("builtin:tiny-chat", rank=4, seed=2)
    config = {"grad_accumulation_normalization": "num_loss_tokens"}
    one = TrainingHost(lora)
    before = one.weights()
    for call in (data[0:5], data[5:6], data[6:8]):
        one.forward_backward(call, "cross_entropy", config)
    one.optim_step(StepParams(learning_rate=1e-2))
    out = str(tmp_path / "weights")
    torch.multiprocessing.start_processes(
        _two_ranks, args=(str(tmp_path / "store"), out), nprocs=2, start_method="fork"
    )
    ranks = [torch.load(f"{out}.{rank}", weights_only=True) for rank in (0, 1)]
    _close(ranks[1], ranks[0], 0.0)
    _close(ranks[0], one.weights(), 1e-6)
    assert max(float((one.weights()[k] - before[k]).abs().max()) for k in before) > 1e-3
