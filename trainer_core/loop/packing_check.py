"""Whether a model's attention keeps packed rows apart, checked on the model itself, and the
packed layout its attention wants (``data.packing``).

Packing relies on the model turning position ids that restart at 0 into a block-diagonal
attention (transformers' ``create_causal_mask`` does for GPT-2, Llama, Qwen and most decoders in
5.x, with sdpa, eager and flex; flash-attention uses its variable-length kernel, for a batch of
one packed row only). A model that builds its own mask, or ignores ``position_ids``, would let
each row attend to the rows before it and silently train something else. So before training we
ask the model, not a list: three short rows, packed in the layout the run will use, must give
the logits each gives alone.
"""

from __future__ import annotations

import torch

from trainer_core.accumulation import IGNORE_INDEX, forward_inputs
from trainer_core.data.packing import Layout, pack, place
from trainer_core.spec.errors import JobError

_ROWS = [list(range(3, 12)), list(range(12, 18)), list(range(18, 21))]  # 9, 6, 3 tokens: in
# bins as wide as the longest, the third shares a packed row with the second


def packing_layout(model: torch.nn.Module) -> Layout:
    """One packed row for flash-attention's varlen kernel; rows no wider than the longest for
    the attentions that compute a (block-diagonal) mask in full."""
    config = getattr(model, "config", None)
    attention = str(getattr(config, "_attn_implementation", "") or "")
    return "one-row" if attention.startswith("flash") else "bins"


def _probe_batch() -> dict[str, torch.Tensor]:
    width = max(len(row) for row in _ROWS)
    ids = torch.zeros((len(_ROWS), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(_ROWS):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": ids.masked_fill(mask == 0, IGNORE_INDEX),
    }


def packed_logits_gap(model: torch.nn.Module, device: torch.device, layout: Layout) -> float:
    """max |Δ logits| of the rows packed vs each alone, over max |logits|."""
    packed = pack(_probe_batch(), layout)
    del packed["labels"]
    placed = place([len(row) for row in _ROWS], layout)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            inputs = {
                k: v.to(device)
                for k, v in forward_inputs(packed).items()
                if isinstance(v, torch.Tensor)
            } | {"use_cache": False}
            logits = model(**inputs).logits.float()
            gap = scale = torch.zeros((), device=device)
            for i, rows in enumerate(placed):
                start = 0
                for row in rows:
                    alone = (
                        model(input_ids=torch.tensor([_ROWS[row]], device=device), use_cache=False)
                        .logits[0]
                        .float()
                    )
                    mine = logits[i, start : start + len(_ROWS[row])]
                    gap = torch.maximum(gap, (mine - alone).abs().max())
                    scale = torch.maximum(scale, alone.abs().max())
                    start += len(_ROWS[row])
    finally:
        model.train(was_training)
    return float(gap / scale.clamp(min=1e-6))


def check_rows_isolated(
    model: torch.nn.Module, device: torch.device, name: str, layout: Layout
) -> None:
    """Refuse ``packing`` for a model whose attention lets a packed row see another one."""
    floating = next(model.parameters()).dtype
    bound = 1e-4 if floating == torch.float32 else 2e-2  # fp32 round-off, or bf16/fp16's
    try:
        gap = packed_logits_gap(model, device, layout)
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
