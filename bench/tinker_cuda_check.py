"""The Tinker host on a CUDA device against the same host on the CPU (run by bench/gpu_check.sh on
a lent GPU machine; it needs no network): one window's SGD update (LoRA and full), greedy
sampling, and a swap-out on the GPU swapped back in on the CPU mid-window. Prints each gap and
exits 1 when one is past its bound (TF32 off: the bounds are float32 reduction-order noise).

Usage: python bench/tinker_cuda_check.py
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

import torch

from trainer_core.tinker_host.host import Datum, StepParams, TrainingHost
from trainer_core.tinker_host.model import ModelChoice
from trainer_core.tinker_host.sampling import SampleParams, sample

CPU, GPU = torch.device("cpu"), torch.device("cuda")
CONFIG = {"grad_accumulation_normalization": "num_loss_tokens"}


def rows(count: int, seed: int) -> list[Datum]:
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        ids = [rng.randint(5, 200) for _ in range(rng.randint(4, 24))]
        weights = torch.tensor([float(rng.random() < 0.7) for _ in ids[1:]])
        found.append(Datum(ids[:-1], {"target_tokens": torch.tensor(ids[1:]), "weights": weights}))
    return found


def gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].cpu() - b[k].cpu()).abs().max()) for k in a)


def main() -> int:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failed = False
    data = rows(12, seed=1)
    for rank in (0, 8):
        choice = ModelChoice("builtin:tiny-chat", rank=rank, seed=3)
        hosts = [TrainingHost(choice, family="sgd", device=d) for d in (CPU, GPU)]
        for host in hosts:
            host.forward_backward(data[:7], "cross_entropy", CONFIG)
            host.forward_backward(data[7:], "cross_entropy", CONFIG)
            host.optim_step(StepParams(family="sgd", learning_rate=0.5))
        worst = gap(hosts[0].weights(), hosts[1].weights())
        ok = worst <= 1e-5
        failed |= not ok
        print(f"rank {rank}: one window's update, CUDA vs CPU: {worst:.2e} (bound 1e-5) {ok}")
        params = SampleParams(max_tokens=12, temperature=0.0, stop=[])
        said = [sample(h.model, h.tokenizer, data[0].tokens, 1, params, prompt_logprobs=True)
                for h in hosts]  # fmt: skip
        same = said[0].sequences[0].tokens == said[1].sequences[0].tokens
        failed |= not same
        print(f"rank {rank}: greedy sample equal on CUDA and CPU: {same}")
    lora = ModelChoice("builtin:tiny-chat", rank=4, seed=2)
    stayed, moved = TrainingHost(lora, device=CPU), TrainingHost(lora, device=GPU)
    for host in (stayed, moved):
        host.forward_backward(data[:5], "cross_entropy", CONFIG)
    with tempfile.TemporaryDirectory() as folder:
        swap = Path(folder) / "swap.pt"
        moved.swap_out(swap)
        back = TrainingHost(lora, device=CPU)
        back.swap_in(swap)
    for host in (stayed, back):
        host.forward_backward(data[5:], "cross_entropy", CONFIG)
        host.optim_step(StepParams(learning_rate=1e-2))
    worst = gap(stayed.weights(), back.weights())
    ok = worst <= 1e-5
    failed |= not ok
    print(f"a window swapped out on CUDA, finished on the CPU: {worst:.2e} (bound 1e-5) {ok}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
