"""The losses the Tinker API names, on one datum's target-token log-probabilities, and the
normalisation of an accumulation window (docs/tinker-protocol.md, section 4).

Every loss is a raw sum over the datum's tokens, never a mean: what a window accumulates over its
chunks, calls and ranks is a plain sum, so how the client cut the window cannot change it.
``p`` is the current model's log-probability of each target token, ``q`` the sampler's
(``loss_fn_inputs["logprobs"]``), ``A`` the advantages, ``w`` the weights, ``r = exp(p - q)``:

- ``cross_entropy``: ``-p * w`` (signed, fractional weights allowed: ``forward_backward_custom``
  sends ``w = -dC/dp``);
- ``importance_sampling``: ``-r * A``;
- ``ppo``: ``-min(r * A, clamp(r, lo, hi) * A)``, ``lo``/``hi`` the ratio bounds
  (``clip_low_threshold``, ``clip_high_threshold``; 0.8 and 1.2 unless given);
- ``cispo``: ``-stopgrad(clamp(r, lo, hi)) * p * A``;
- ``dro``: ``-(p * A - beta / 2 * (p - q) ** 2)`` (``beta``; 0.05 unless given).

At ``optim_step`` the window's summed gradient is divided by its ``Window.divisor()``: 1 for
``none`` (the stock SDK's meaning), the window's loss tokens for ``num_loss_tokens`` (positions of
non-zero weight; for a loss sent without weights, every target position), its sequences for
``num_sequences`` (datums with at least one loss token)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")
NEEDS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
}
NORMALISATIONS = ("none", "num_loss_tokens", "num_sequences")
NORMALISATION_KEY = "grad_accumulation_normalization"
CLIP = (0.8, 1.2)
BETA = 0.05


def check_inputs(loss: str, inputs: Mapping[str, Tensor], length: int) -> None:
    """A ValueError naming what is wrong: an unknown loss, a missing input, or one whose length
    is not the datum's (position i of the input predicts target i)."""
    if loss not in NEEDS:
        raise ValueError(f"loss_fn: one of {', '.join(LOSSES)} (got {loss!r})")
    for key in NEEDS[loss]:
        if key not in inputs:
            raise ValueError(f"loss_fn_inputs.{key}: {loss} needs it")
        if inputs[key].shape != (length,):
            shape = tuple(inputs[key].shape)
            raise ValueError(f"loss_fn_inputs.{key}: shape {shape}, the input holds {length}")


def target_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """Each position's log-probability of its target token: (N, V), (N,) -> (N,), in fp32."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.long()[:, None])[:, 0]


def datum_loss(
    loss: str, p: Tensor, inputs: Mapping[str, Tensor], config: Mapping[str, float | str]
) -> Tensor:
    """The datum's loss, summed over its tokens (a scalar that backpropagates into ``p``)."""
    if loss == "cross_entropy":
        return -(p * inputs["weights"].float()).sum()
    q, advantages = inputs["logprobs"].float(), inputs["advantages"].float()
    ratio = torch.exp(p - q)
    if loss == "importance_sampling":
        return -(ratio * advantages).sum()
    low, high = _bounds(inputs, config)
    if loss == "ppo":
        clipped = torch.clamp(ratio, low, high)
        return -torch.minimum(ratio * advantages, clipped * advantages).sum()
    if loss == "cispo":
        return -(torch.clamp(ratio, low, high).detach() * p * advantages).sum()
    beta = float(config.get("beta", BETA))
    return -(p * advantages - beta / 2 * (p - q) ** 2).sum()


def _bounds(
    inputs: Mapping[str, Tensor], config: Mapping[str, float | str]
) -> tuple[Tensor, Tensor]:
    """The ratio bounds: per token when the datum carries them, else the call's, else 0.8/1.2."""
    found = []
    for key, default in zip(("clip_low_threshold", "clip_high_threshold"), CLIP, strict=True):
        if key in inputs:
            found.append(inputs[key].float())
        else:
            found.append(torch.tensor(float(config.get(key, default))))
    return found[0], found[1]


def loss_tokens(inputs: Mapping[str, Tensor], length: int) -> int:
    """The datum's tokens that count for ``num_loss_tokens``."""
    weights = inputs.get("weights")
    if weights is None:
        return length
    return int((weights != 0).sum())


@dataclass
class Window:
    """What one accumulation window (every chunk and call before an ``optim_step``) counts, in
    whatever order its chunks arrive. A call's mode rides in its ``loss_fn_config``; a call
    without one (the custom-loss path sends none) follows the others."""

    tokens: int = 0
    sequences: int = 0
    modes: set[str] = field(default_factory=set)

    def add(self, config: Mapping[str, float | str], tokens_per_datum: list[int]) -> None:
        given = config.get(NORMALISATION_KEY)
        if given is not None:
            if given not in NORMALISATIONS:
                choices = ", ".join(NORMALISATIONS)
                raise ValueError(f"loss_fn_config.{NORMALISATION_KEY}: one of {choices}")
            self.modes.add(str(given))
        self.tokens += sum(tokens_per_datum)
        self.sequences += sum(1 for n in tokens_per_datum if n > 0)

    def merge(self, other: Window) -> None:
        """Another rank's or another chunk's counts."""
        self.tokens += other.tokens
        self.sequences += other.sequences
        self.modes |= other.modes

    def divisor(self) -> float:
        """What the window's summed gradient is divided by at ``optim_step``; a ValueError when
        its calls named different modes."""
        if len(self.modes) > 1:
            named = " and ".join(sorted(self.modes))
            raise ValueError(
                f"the calls of this window disagree on {NORMALISATION_KEY} ({named}): send the "
                "same value with every forward_backward before an optim_step"
            )
        mode = next(iter(self.modes), "none")
        if mode == "num_loss_tokens":
            return float(max(self.tokens, 1))
        if mode == "num_sequences":
            return float(max(self.sequences, 1))
        return 1.0
