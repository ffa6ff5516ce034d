"""Serving throughput: 1, 4 and 16 concurrent greedy requests of 64 tokens to the predict server's
OpenAI endpoint, against plain sequential ``model.generate`` on the same model in the same run.

The server is the real one, in process: an ``Engine`` and ``start_openai_server`` on a free
loopback port, driven over HTTP (``/v1/completions``, streamed, so the first token's arrival is
seen) by one thread per request, all sent at once. Its model is an ~11M GPT-2 built from a config
(n_embd 384, 6 layers, 6 heads, the built-in tokenizer's vocabulary, random weights from seed 0)
and handed to the engine in place of the built-in ``builtin:tiny-gpt2`` the requests name.
The sequential side runs the same prompts through ``model.generate`` one after another, as
arriving together: a request's time to first token counts the requests before it.

For each concurrency: requests/s, completion tokens/s, time to first token p50/p99 (ms), best
of --repeats. Prints; asserts nothing.

    .venv/bin/python bench/serve.py [--concurrency 1,4,16] [--tokens 64] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.generation.streamers import BaseStreamer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gradacc.serving.resolve import TENANT_HEADER, ServedModel
from gradacc.settings import Settings
from trainer_core.builtin.models import builtin_tokenizer
from worker.predict.engine import Engine
from worker.predict.openai.server import start_openai_server

TOKEN = "bench-serve-token-0123456789"
MODEL = "builtin:tiny-gpt2"


@dataclass
class Loaded:
    """What the engine hands the batcher: a plain model (no adapters to put on)."""

    model: Any
    tokenizer: Any
    device: torch.device


@dataclass
class Run:
    seconds: float
    tokens: int
    first_token_s: list[float]  # per request, from the moment all were sent


def _model() -> Loaded:
    tokenizer = builtin_tokenizer(MODEL)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=384, n_layer=6,
                        n_head=6, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    model: Any = GPT2LMHeadModel(config)
    model.eval()  # no dropout (none configured either)
    return Loaded(model, tokenizer, torch.device("cpu"))


class _Engine(Engine):
    """The bench's model for every name (the engine's own loading is not measured here)."""

    def __init__(self, settings: Settings, loaded: Loaded) -> None:
        super().__init__(settings, lambda: torch.device("cpu"))
        self.loaded = loaded

    def load(self, served: ServedModel) -> Any:
        return self.loaded


def _prompts(n: int) -> list[str]:
    return [f"request {i}: the quick brown fox jumped over the lazy dog and" for i in range(n)]


def _one_request(client: httpx.Client, prompt: str, tokens: int, t0: float,
                 out: list[Any]) -> None:  # fmt: skip
    body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    headers = {"Authorization": f"Bearer {TOKEN}", TENANT_HEADER: "bench"}
    first, used = None, 0
    with client.stream("POST", "/v1/completions", json=body, headers=headers) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if first is None and event["choices"] and event["choices"][0]["text"]:
                first = time.perf_counter() - t0
            if event.get("usage"):
                used = event["usage"]["completion_tokens"]
    out.append((first, used))


def _served(url: str, concurrency: int, tokens: int) -> Run:
    results: list[Any] = []
    # One client made beforehand (making one costs ~30 ms of the GIL: it is not the server's).
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    client = httpx.Client(base_url=url, timeout=300, limits=limits)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=_one_request, args=(client, p, tokens, t0, results))
               for p in _prompts(concurrency)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - t0
    client.close()
    assert len(results) == concurrency and all(f is not None for f, _ in results), results
    return Run(seconds, sum(u for _, u in results), [f for f, _ in results])


class _FirstToken(BaseStreamer):
    def __init__(self) -> None:
        self.calls, self.at = 0, 0.0

    def put(self, value: torch.Tensor) -> None:
        self.calls += 1
        if self.calls == 2:  # the first call is the prompt
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


@torch.inference_mode()
def _sequential(loaded: Loaded, concurrency: int, tokens: int) -> Run:
    tokenizer, model = loaded.tokenizer, loaded.model
    firsts, spent = [], 0
    t0 = time.perf_counter()
    for prompt in _prompts(concurrency):
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        streamer = _FirstToken()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=tokens, do_sample=False, streamer=streamer,
                             pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)  # fmt: skip
        firsts.append(streamer.at - t0)
        spent += out.shape[1] - ids.shape[1]
    return Run(time.perf_counter() - t0, spent, firsts)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(name: str, concurrency: int, run: Run) -> str:
    p50 = statistics.median(run.first_token_s) * 1000
    p99 = _p(run.first_token_s, 0.99) * 1000
    return (f"{name:<22} {concurrency:>3} {concurrency / run.seconds:>8.2f} "
            f"{run.tokens / run.seconds:>9.0f} {p50:>9.0f} {p99:>9.0f}")  # fmt: skip


def _level(url: str, loaded: Loaded, n: int, tokens: int, repeats: int) -> None:
    """Both sides at concurrency ``n``, alternating, the best run of each printed."""
    best: dict[str, Run] = {}
    for _ in range(repeats):
        for name, run in (("server (batched)", _served(url, n, tokens)),
                          ("sequential generate", _sequential(loaded, n, tokens))):  # fmt: skip
            if name not in best or run.seconds < best[name].seconds:
                best[name] = run
    for name, run in best.items():
        print(_row(name, n, run))
    served, plain = best["server (batched)"], best["sequential generate"]
    ratio = (served.tokens / served.seconds) / (plain.tokens / plain.seconds)
    print(f"{'  tokens/s ratio':<22} {n:>3} {ratio:>8.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    loaded = _model()
    params = sum(p.numel() for p in loaded.model.parameters())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), serve_token=TOKEN)
        server, url = start_openai_server(settings, _Engine(settings, loaded), TOKEN)
        print(f"GPT-2 of {params / 1e6:.1f}M parameters, {args.tokens} greedy tokens a request, "
              f"torch threads {torch.get_num_threads()}; best of {args.repeats}")  # fmt: skip
        print(f"{'':<22} {'n':>3} {'req/s':>8} {'tokens/s':>9} {'TTFT p50':>9} {'TTFT p99':>9}")
        _served(url, 2, 4)  # warm-up: imports, first allocations
        _sequential(loaded, 1, 4)
        try:
            for n in (int(c) for c in args.concurrency.split(",")):
                _level(url, loaded, n, args.tokens, args.repeats)
        finally:
            server.shutdown()


if __name__ == "__main__":
    main()
