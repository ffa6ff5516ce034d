"""What a run will do that its author may not expect, said at its start: each line becomes a
``warning`` event (the run goes on). Nothing a job trains on is cut or set aside without one."""

from __future__ import annotations

from typing import Any

from trainer_core.loop.context import RunContext


def start_warnings(ctx: RunContext) -> list[str]:
    found = [*_data_warnings(ctx)]
    rows, effective = len(ctx.data.train), ctx.spec.effective_batch_size
    if effective is not None and effective > rows:
        found.append(
            f"the effective batch ({effective}) is larger than the {rows} training rows: each "
            "epoch is a single, partial optimizer step"
        )
    elif ctx.steps_per_epoch < 2:
        found.append(
            f"{ctx.steps_per_epoch} optimizer step per epoch ({rows} rows, effective batch "
            f"{effective}): lower the effective batch for more updates"
        )
    return found


def _data_warnings(ctx: RunContext) -> list[str]:
    data, limit = ctx.data, ctx.spec.max_seq_length
    found = []
    if any(data.dropped.values()):
        found.append(
            f"{data.dropped.get('train', 0)} training and {data.dropped.get('eval', 0)} eval rows "
            f"have nothing to train after truncation at max_seq_length {limit} (or no trained "
            "part at all): they are left out"
        )
    for split, name in (("train", "training"), ("eval", "eval")):
        cut: dict[str, Any] = data.truncated.get(split) or {}
        if cut.get("rows"):
            found.append(
                f"truncation at max_seq_length {limit} cut {cut['rows']} {name} rows: "
                f"{cut['tokens']} tokens dropped, {cut['trained_tokens']} of them trained ones; "
                "raise max_seq_length to train them"
            )
    if data.held_out:
        found.append(
            f"{data.held_out} training rows ({ctx.spec.validation_split_percentage} %) are held "
            "out to evaluate on, not trained (no eval_dataset): give one, or set "
            "validation_split_percentage to 0 to train on every row"
        )
    return found
