"""Sampling a Tinker model: ``num_samples`` continuations of a prompt, each token's
log-probability under the sampled distribution's model (temperature applied), the stop reason,
and on request the prompt's own log-probabilities (position 0 has none: NaN)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

Stop = list[str] | list[int] | None


@dataclass(frozen=True)
class SampleParams:
    """``stop`` None: the model's EOS; a list adds its strings or token ids to EOS; [] stops on
    nothing but ``max_tokens``. Temperature 0 is greedy."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    seed: int | None = None
    stop: Stop = None


@dataclass
class Sequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" or "length"


@dataclass
class Samples:
    sequences: list[Sequence]
    prompt_logprobs: list[float] | None = field(default=None)


@torch.no_grad()
def sample(
    model: Any,
    tokenizer: Any,
    prompt: list[int],
    n: int,
    params: SampleParams,
    *,
    prompt_logprobs: bool,
) -> Samples:
    if not prompt:
        raise ValueError("prompt: it holds no tokens")
    was_training = model.training
    model.eval()
    try:
        generator = torch.Generator()
        if params.seed is None:
            generator.seed()  # a fresh draw per call
        else:
            generator.manual_seed(params.seed)
        device = next(model.parameters()).device
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        found = None
        sequences = []
        for _ in range(n):  # the prompt again for each: a continuation grows its cache in place
            out = model(input_ids=ids, use_cache=True)
            if prompt_logprobs and found is None:
                found = _prompt_logprobs(out.logits[0], prompt)
            sequences.append(_continue(model, tokenizer, out, len(prompt), params, generator))
    finally:
        model.train(was_training)
    return Samples(sequences, found)


def _prompt_logprobs(logits: Tensor, prompt: list[int]) -> list[float]:
    logp = torch.log_softmax(logits.float(), dim=-1)
    targets = torch.tensor(prompt[1:], dtype=torch.long, device=logits.device)
    values = logp[:-1].gather(-1, targets[:, None])[:, 0].tolist()
    return [math.nan, *values]


def _continue(
    model: Any, tokenizer: Any, first: Any, length: int, params: SampleParams, generator: Any
) -> Sequence:
    eos = tokenizer.eos_token_id
    stop_ids = {s for s in params.stop or [] if isinstance(s, int)}
    stop_texts = [s for s in params.stop or [] if isinstance(s, str)]
    if params.stop is None or params.stop:
        stop_ids |= {eos} if eos is not None else set()
    logits, past = first.logits[0, -1], first.past_key_values
    tokens: list[int] = []
    logprobs: list[float] = []
    for _ in range(params.max_tokens):
        token, logprob = _pick(logits.float().cpu(), params, generator)  # a CPU generator's draw
        tokens.append(token)
        logprobs.append(logprob)
        if token in stop_ids or _ends_with(tokenizer, tokens, stop_texts):
            return Sequence(tokens, logprobs, "stop")
        device = logits.device
        ids = torch.tensor([[token]], dtype=torch.long, device=device)
        position = torch.tensor([[length + len(tokens) - 1]], dtype=torch.long, device=device)
        out = model(input_ids=ids, past_key_values=past, position_ids=position, use_cache=True)
        logits, past = out.logits[0, -1], out.past_key_values
    return Sequence(tokens, logprobs, "length")


def _pick(logits: Tensor, params: SampleParams, generator: Any) -> tuple[int, float]:
    if params.temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits))
        return token, float(logp[token])
    scaled = logits / params.temperature
    if params.top_k > 0:
        kth = torch.topk(scaled, min(params.top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    if params.top_p < 1.0:
        ordered, order = torch.sort(scaled, descending=True)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(-1)
        cut = cumulative - torch.softmax(ordered, dim=-1) >= params.top_p
        scaled[order[cut]] = -math.inf
    logp = torch.log_softmax(scaled, dim=-1)
    token = int(torch.multinomial(logp.exp(), 1, generator=generator))
    return token, float(logp[token])


def _ends_with(tokenizer: Any, tokens: list[int], texts: list[str]) -> bool:
    """Whether a stop string has appeared. Checked after every token, so an occurrence ends in
    the newest token and lies within the last 4 bytes per character of the longest stop string:
    only that tail is decoded (with a token of margin), not the whole continuation each time."""
    if not texts:
        return False
    tail = 4 * max(len(stop) for stop in texts) + 2
    text = tokenizer.decode(tokens[-tail:])
    return any(stop in text for stop in texts)
