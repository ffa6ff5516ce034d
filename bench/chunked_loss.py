"""Cross-entropy in chunks of tokens against whole logits, at 4,096 tokens of Qwen3's 151,936-token
vocabulary: one SFT micro-step (forward and backward) of a small decoder whose head dominates,
fp32 on this machine's CPU. Prints each one's peak resident memory above the model's (sampled
every 2 ms in a thread: the logits are allocated, touched and freed whole, so they show) and its
median time over interleaved repeats. ``python bench/chunked_loss.py [--tokens 4096]``."""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import psutil
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from trainer_core.accumulation import IGNORE_INDEX, micro_step_loss

VOCAB = 151_936


class Peak:
    def __init__(self) -> None:
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.002)

    def __enter__(self) -> Peak:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()


def step(model: torch.nn.Module, batch: dict[str, Any], chunk: int | None) -> tuple[float, int]:
    """Seconds and the peak bytes above the start of one forward + backward."""
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    with Peak() as peak:
        micro_step_loss(model, batch, causal=True, chunk=chunk).loss.backward()  # type: ignore[no-untyped-call]
    return time.perf_counter() - started, peak.peak - peak.start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=256, n_layer=2, n_head=4, n_positions=args.tokens,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = GPT2LMHeadModel(config).train()
    ids = torch.randint(0, VOCAB, (1, args.tokens))
    labels = ids.clone()
    labels[:, :8] = IGNORE_INDEX
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
             "n_window_items": args.tokens - 8}  # fmt: skip
    whole_logits = args.tokens * VOCAB * 4
    print(f"{args.tokens} tokens x {VOCAB} vocabulary: whole logits {whole_logits / 2**30:.2f} GiB "
          f"in fp32; chunk {args.chunk} tokens; {torch.get_num_threads()} threads")  # fmt: skip
    step(model, batch, None), step(model, batch, args.chunk)  # warm both paths
    runs: dict[str, list[tuple[float, int]]] = {"whole": [], "chunked": []}
    for _ in range(args.repeats):  # interleaved: the machine's speed moves between runs
        runs["whole"].append(step(model, batch, None))
        runs["chunked"].append(step(model, batch, args.chunk))
    print("| loss | median s | peak above start (MiB) |")
    print("|---|---:|---:|")
    medians = {}
    for name, found in runs.items():
        medians[name] = statistics.median(s for s, _ in found)
        peak = max(b for _, b in found)
        print(f"| {name} | {medians[name]:.2f} | {peak / 2**20:.0f} |")
    peaks = {name: max(b for _, b in found) for name, found in runs.items()}
    print(f"memory: whole / chunked = {peaks['whole'] / max(peaks['chunked'], 1):.1f}x; "
          f"speed: chunked / whole = {medians['whole'] / medians['chunked']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
