"""``gradacc preview FILE --model M``: what a job on this local dataset would train, before
uploading or training it: the first rows' tokens with the trained ones marked ``[[...]]`` (after
the causal shift), each row's trained and total tokens (the counts the trainer divides by) and
its warnings (``trainer_core.preview``); then the job's memory plan per device (weights, gradients,
optimizer state, activations, logits), against ``--device-memory-gb`` when given. ``--json``
prints the preview as the API returns it.

Example::

    gradacc preview chats.jsonl --model builtin:qwen3-8b-shape --num-processes 8 \
        --sharding fsdp --batch-size 1 --gradient-checkpointing --device-memory-gb 80
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradacc preview", description=__doc__)
    parser.add_argument("file", help="a .jsonl, .json, .csv or .parquet dataset")
    parser.add_argument("--model", required=True, help="builtin:tiny-chat, a folder, a hub id")
    parser.add_argument("--chat-template", help="'chatml' or Jinja text; default the model's")
    parser.add_argument(
        "--format",
        default="auto",
        dest="dataset_format",
        choices=("auto", "messages", "prompt-completion", "text"),
    )
    parser.add_argument("--max-seq-length", type=int, default=None)
    parser.add_argument("--rows", type=int, default=3, help="the first N rows (at most 50)")
    parser.add_argument(
        "--all-tokens",
        action="store_true",
        help="messages: train every token, not only the assistant's",
    )
    parser.add_argument(
        "--no-empty-reasoning",
        action="store_true",
        help="leave an empty <think></think> the template writes untrained",
    )
    plan = parser.add_argument_group("the memory plan (the job's fields; unset: its defaults)")
    plan.add_argument("--batch-size", dest="per_device_train_batch_size", type=int)
    plan.add_argument("--accumulation", dest="gradient_accumulation_steps", type=int)
    plan.add_argument("--num-processes", type=int)
    plan.add_argument("--sharding", choices=("none", "fsdp"))
    plan.add_argument("--lora-r", type=int, help="LoRA of this rank on the model's defaults")
    plan.add_argument("--load-in-4bit", action="store_true", default=None)
    plan.add_argument("--gradient-checkpointing", action="store_true", default=None)
    plan.add_argument("--mixed-precision", choices=("no", "bf16", "fp16"))
    plan.add_argument("--loss-chunk-tokens", type=int)
    plan.add_argument("--device-memory-gb", type=float, help="a device's memory, to compare")
    parser.add_argument("--json", action="store_true", help="the preview as JSON")
    return parser


PLAN_FIELDS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_processes",
    "sharding",
    "load_in_4bit",
    "gradient_checkpointing",
    "mixed_precision",
    "loss_chunk_tokens",
)


def spec_of(args: argparse.Namespace) -> JobSpec:
    fields: dict[str, Any] = {
        "model": args.model,
        "dataset": args.file,
        "task": "causal-lm",
        "dataset_format": args.dataset_format,
        "chat_template": args.chat_template,
        "assistant_only_loss": not args.all_tokens,
        "train_empty_reasoning": not args.no_empty_reasoning,
    }
    if args.max_seq_length is not None:
        fields["max_seq_length"] = args.max_seq_length
    fields |= {name: getattr(args, name) for name in PLAN_FIELDS if getattr(args, name) is not None}
    if args.lora_r is not None:
        fields["lora"] = {"r": args.lora_r}
    return JobSpec(**fields)


def marked(tokens: list[dict[str, Any]]) -> str:
    """The row's text with each run of trained tokens in ``[[...]]``."""
    out, inside = [], False
    for token in tokens:
        if token["trained"] != inside:
            out.append("[[" if token["trained"] else "]]")
            inside = token["trained"]
        out.append(token["text"])
    return "".join(out) + ("]]" if inside else "")


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from trainer_core.preview import preview  # torch and transformers: only once asked

    try:
        device = None if args.device_memory_gb is None else int(args.device_memory_gb * 2**30)
        result = preview(spec_of(args), rows=args.rows, device_bytes=device)
    except (ValidationError, JobError) as exc:
        print(f"gradacc preview: {exc}")
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"format {result['format']}, max_seq_length {result['max_length']}")
    for row in result["rows"]:
        print(f"\nrow {row['index'] + 1}: {row['trained']} of {row['total']} tokens trained")
        print(marked(row["tokens"]))
        for warning in row["warnings"]:
            print(f"  warning: {warning}")
    plan = result["memory_plan"]
    if plan is not None:
        fits = {True: "fits", False: "does NOT fit", None: ""}[plan["fits"]]
        print(f"\n{plan['line']}{' ' + fits if fits else ''}")
    return 0
