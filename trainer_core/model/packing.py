"""Whether a model's attention keeps packed rows apart, checked on the model itself.

Packing (``data.packing``) relies on the model turning position ids that restart at 0 into a
block-diagonal attention (transformers' ``create_causal_mask`` does for GPT-2, Llama, Qwen and
most decoders in 5.x, with sdpa, eager, flex and flash-attention varlen). A model that builds its
own mask, or ignores ``position_ids``, would let each row attend to the rows before it and
silently train something else. So before training we ask the model, not a list: one short row
alone and the same row packed behind another must give the same logits.
"""

from __future__ import annotations

import torch

from trainer_core.spec.errors import JobError

_FIRST, _SECOND = list(range(3, 12)), list(range(12, 18))  # two short rows of token ids


def packed_logits_gap(model: torch.nn.Module, device: torch.device) -> float:
    """max |Δ logits| of the second row, alone vs packed behind the first, over max |logits|."""
    ids = torch.tensor([_FIRST + _SECOND], device=device)
    positions = torch.tensor([list(range(len(_FIRST))) + list(range(len(_SECOND)))], device=device)
    alone = torch.tensor([_SECOND], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = model(input_ids=ids, position_ids=positions, use_cache=False).logits
            single = model(input_ids=alone, use_cache=False).logits
    finally:
        model.train(was_training)
    tail = packed[0, len(_FIRST) :].float()
    reference = single[0].float()
    return float((tail - reference).abs().max() / reference.abs().max().clamp(min=1e-6))


def check_rows_isolated(model: torch.nn.Module, device: torch.device, name: str) -> None:
    """Refuse ``packing`` for a model whose attention lets a packed row see another one."""
    floating = next(model.parameters()).dtype
    bound = 1e-4 if floating == torch.float32 else 2e-2  # fp32 round-off, or bf16/fp16's
    try:
        gap = packed_logits_gap(model, device)
    except (TypeError, ValueError) as error:  # a forward without position_ids or use_cache
        raise JobError(
            f"packing: {name} cannot isolate packed rows (its forward refused position ids: "
            f"{error}); train it without packing",
            param="packing",
        ) from error
    if not gap <= bound:
        raise JobError(
            f"packing: {name} does not isolate packed rows (a row's logits change by "
            f"{gap:.2e} of their size when another row is packed before it: its attention "
            "ignores the restarting position ids); train it without packing",
            param="packing",
        )
