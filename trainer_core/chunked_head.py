"""A causal LM's head applied a chunk of tokens at a time (``loss_chunk_tokens``), so that the
[tokens x vocabulary] logits are never held whole: at 8k tokens of a 151,936-token vocabulary
they are ~4.9 GB in fp32 for one micro-batch, often more than the model's activations.

The model's decoder runs as usual and returns its last hidden states; each chunk of them goes
through the head (``get_output_embeddings``: a plain ``Linear``, weights tied or not), its
log-softmax picks the label's log-prob, and the chunk's logits are dropped. The backward
recomputes each chunk's logits from the saved hidden states and the head's weight (the softmax
minus the one-hot, times the incoming gradient), so the peak is one chunk's logits either way.
The result is each token's negative log-likelihood, as ``accumulation.token_nll`` computes it
from whole logits: the losses of every method (SFT's sum, DPO's per-sequence sums, GRPO's
per-token log-probs) are made from it unchanged, and so is their normalisation.

Only a model whose logits are its head on its last hidden state, and nothing else (no logit
soft-capping or scaling), can be chunked; ``check_head`` compares the two on a short input once,
before training, and refuses any other by name.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def decoder_and_head(model: torch.nn.Module) -> tuple[Any, torch.nn.Linear]:
    """The model's decoder (what returns its last hidden states) and its output head."""
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not callable(get_decoder) or not isinstance(head, torch.nn.Linear):
        raise ValueError("its head is not a plain linear layer on a decoder")
    return get_decoder(), head


def chunked_token_nll(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    labels: torch.Tensor,
    chunk: int,
    *,
    predicted: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T-1) float32 negative log-likelihood of each label after the causal shift (0 where
    ignored), and with ``predicted`` each position's argmax (detached), chunk by chunk. The
    backward recomputes each chunk's logits (its incoming gradient differs per token: DPO's
    and GRPO's losses)."""
    hidden, target = _shifted(model, inputs, labels)
    _, head = decoder_and_head(model)
    nll, argmax = _ChunkedNLL.apply(  # type: ignore[no-untyped-call]
        hidden, head.weight, head.bias, target.reshape(-1), chunk, predicted
    )
    return nll.view(target.shape), (argmax.view(target.shape) if predicted else None)


def chunked_nll_sum(
    model: torch.nn.Module,
    inputs: dict[str, Any],
    labels: torch.Tensor,
    chunk: int,
    *,
    predicted: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Σ of the labels' negative log-likelihoods (a 0-dim float32 tensor: SFT's summed loss)
    and the argmax as above. Its gradient is computed chunk by chunk in the forward itself (a
    sum's incoming gradient is one number, applied in the backward): no chunk is computed
    twice, so it costs what the whole logits cost, without holding them."""
    hidden, target = _shifted(model, inputs, labels)
    _, head = decoder_and_head(model)
    total, argmax = _ChunkedNLLSum.apply(  # type: ignore[no-untyped-call]
        hidden, head.weight, head.bias, target.reshape(-1), chunk, predicted
    )
    return total, (argmax.view(target.shape) if predicted else None)


def _shifted(
    model: torch.nn.Module, inputs: dict[str, Any], labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's last hidden state, flat, beside the label it predicts (the next one)."""
    decoder, _ = decoder_and_head(model)
    hidden = decoder(**inputs).last_hidden_state[:, :-1]
    return hidden.reshape(-1, hidden.shape[-1]), labels[:, 1:]


class _Grads:
    """The head's gradients, made chunk by chunk: the hidden states' in their dtype, the
    weight's and bias's summed in fp32 (matmuls in the weight's dtype: no copy of it)."""

    def __init__(
        self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> None:
        self.hidden = torch.zeros_like(hidden)
        self.weight = torch.zeros_like(weight, dtype=torch.float32)
        self.bias = None if bias is None else torch.zeros_like(bias, dtype=torch.float32)

    def add(
        self, part: slice, dlogits: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor
    ) -> None:
        self.hidden[part] = (dlogits.to(weight.dtype) @ weight).to(hidden.dtype)
        self.weight += (dlogits.to(weight.dtype).T @ hidden[part].to(weight.dtype)).float()
        if self.bias is not None:
            self.bias += dlogits.sum(0)

    def out(
        self, weight: torch.Tensor, bias: torch.Tensor | None, scale: torch.Tensor | float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        grad_bias = (
            None if self.bias is None or bias is None else (self.bias * scale).to(bias.dtype)
        )
        return self.hidden * scale, (self.weight * scale).to(weight.dtype), grad_bias


def _chunks(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    chunk: int,
    *,
    argmax: torch.Tensor | None = None,
    grads: _Grads | None = None,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each label's NLL, chunk by chunk; with ``grads``, each chunk's gradient added to them:
    d nll / d logits = softmax - the label's one-hot (0 where ignored), times ``scale`` per
    token (1 when unset)."""
    nll = torch.zeros(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk):
        part = slice(start, start + chunk)
        logits = F.linear(hidden[part], weight, bias).float()
        nll[part] = F.cross_entropy(
            logits, labels[part], ignore_index=IGNORE_INDEX, reduction="none"
        )
        if argmax is not None:
            argmax[part] = logits.argmax(-1)
        if grads is None:
            continue
        kept = labels[part] != IGNORE_INDEX
        dlogits = logits.softmax(-1)
        one_hot = kept.to(dlogits.dtype).unsqueeze(-1)  # 0 where ignored (its index: any)
        dlogits.scatter_add_(1, labels[part].clamp(min=0).unsqueeze(-1), -one_hot)
        dlogits *= (kept if scale is None else scale[part] * kept).unsqueeze(-1)
        grads.add(part, dlogits, hidden, weight)
    return nll


def _autocast_of(device: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


class _ChunkedNLL(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        chunk: int,
        predicted: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.autocast, ctx.chunk = _autocast_of(hidden.device.type), chunk
        ctx.save_for_backward(hidden, weight, bias, labels)
        argmax = torch.zeros(hidden.shape[0] * predicted, dtype=torch.long, device=hidden.device)
        nll = _chunks(hidden, weight, bias, labels, chunk, argmax=argmax if predicted else None)
        ctx.mark_non_differentiable(argmax)
        return nll, argmax

    @staticmethod
    def backward(
        ctx: Any, grad_nll: torch.Tensor, _: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, labels = ctx.saved_tensors
        enabled, dtype = ctx.autocast
        grads = _Grads(hidden, weight, bias)
        with torch.autocast(hidden.device.type, dtype=dtype, enabled=enabled):  # as forward
            _chunks(hidden, weight, bias, labels, ctx.chunk, grads=grads, scale=grad_nll)
        return *grads.out(weight, bias), None, None, None


class _ChunkedNLLSum(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        chunk: int,
        predicted: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        argmax = torch.zeros(hidden.shape[0] * predicted, dtype=torch.long, device=hidden.device)
        ctx.grads = _Grads(hidden, weight, bias)
        nll = _chunks(
            hidden,
            weight,
            bias,
            labels,
            chunk,
            argmax=argmax if predicted else None,
            grads=ctx.grads,
        )
        ctx.save_for_backward(weight, bias)
        ctx.mark_non_differentiable(argmax)
        return nll.sum(), argmax

    @staticmethod
    def backward(
        ctx: Any, grad_total: torch.Tensor, _: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        weight, bias = ctx.saved_tensors
        grads = ctx.grads.out(weight, bias, grad_total)
        ctx.grads = None
        return *grads, None, None, None


@torch.no_grad()
def check_head(model: torch.nn.Module, device: torch.device, name: str) -> None:
    """Refuse, naming the model, one whose logits are not its head on its last hidden state
    (soft-capped, scaled, or no plain head): chunking would compute another loss."""
    from trainer_core.spec.errors import JobError

    try:
        decoder, head = decoder_and_head(model)
    except ValueError as exc:
        raise JobError(
            f"loss_chunk_tokens: {name} cannot be chunked: {exc}", param="loss_chunk_tokens"
        ) from None
    ids = torch.arange(3, 11, device=device).unsqueeze(0) % head.out_features
    was_training = model.training
    model.train(False)
    try:
        whole = model(input_ids=ids).logits.float()
        parts = head(decoder(input_ids=ids).last_hidden_state).float()
    finally:
        model.train(was_training)
    if not torch.allclose(whole, parts, rtol=1e-4, atol=1e-4):
        raise JobError(
            f"loss_chunk_tokens: {name}'s logits are not its head on its last hidden "
            "state (soft-capped or scaled): its loss cannot be chunked",
            param="loss_chunk_tokens",
        )
