"""A peer side by side: TRL's ``SFTTrainer`` and the gradacc core on the same model, the same chat
data and the same (b, K), on this machine. Prints trained tokens/s for each and each one's
(b, K) vs (b·K, 1) weight gap (max |Δw| after one epoch, same seed, same data order).

Both start from one saved copy of builtin:tiny-chat (its template has generation markers, so
TRL's ``assistant_only_loss`` works) and train the assistant tokens of chat-arithmetic
conversations, with AdamW, a constant learning rate, no warm-up, no clipping, fp32 on the CPU.
Trained tokens/s counts the same tokens for both: the assistant tokens of the epoch after the
shift (what gradacc reports as train_items), divided by each one's own clock of its training
loop (gradacc's epoch train_seconds, the Trainer's train_runtime); tokenizing is outside both.

TRL is a bench-only extra (``pip install -e '.[bench]'``), not a runtime dependency.

    .venv/bin/python bench/vs_trl.py [--rows 256] [--b 4] [--k 4] [--repeats 3]
    .venv/bin/python bench/vs_trl.py --method grpo [--group 4] [--windows 8] [--max-completion 16]

``--method grpo`` compares TRL's ``GRPOTrainer`` instead (``bench/vs_trl_grpo.py``): completions/s
and optimizer steps/s at the same model, prompts, group size and (b, K).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import cast

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from vs_trl_grpo import compare  # this folder is on sys.path when run as a script

from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.job import JobSpec
from trainer_core.train import train

LR, SEED, MAX_LEN = 1e-3, 7, 128


def prepare(root: Path, rows: int) -> tuple[Path, Path]:
    """The base model folder and a messages JSONL (weights dropped: TRL has no per-turn weight)."""
    spec = JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic", task="causal-lm")
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tokenizer, None)
    base = root / "base"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    data = root / "chat.jsonl"
    with data.open("w") as out:
        conversations = cast(list[list[dict[str, str]]], chat_arithmetic("train")["messages"])
        for conversation in conversations[:rows]:
            turns = [{"role": m["role"], "content": m["content"]} for m in conversation]
            out.write(json.dumps({"messages": turns}) + "\n")
    return base, data


def ours(base: Path, data: Path, out: Path, b: int, k: int) -> tuple[float, int]:
    spec = JobSpec.model_validate(
        {"model": str(base), "dataset": str(data), "task": "causal-lm",
         "per_device_train_batch_size": b, "gradient_accumulation_steps": k,
         "num_train_epochs": 1, "learning_rate": LR, "lr_scheduler_type": "constant",
         "max_grad_norm": 0, "seed": SEED, "max_seq_length": MAX_LEN, "save_strategy": "no",
         "eval_dataset": str(data), "max_eval_samples": 8}
    )  # fmt: skip
    result = train(spec, out)
    epoch = result.metrics[-1]
    return float(epoch["train_seconds"]), int(epoch["train_items"])


def trl_run(base: Path, data: Path, out: Path, b: int, k: int) -> float:
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer  # type: ignore[attr-defined]

    config = SFTConfig(
        output_dir=str(out), per_device_train_batch_size=b, gradient_accumulation_steps=k,
        num_train_epochs=1, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        max_grad_norm=0.0, seed=SEED, data_seed=SEED, max_length=MAX_LEN,
        assistant_only_loss=True, packing=False, use_cpu=True, report_to=[], save_strategy="no",
        logging_steps=1_000_000, dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    torch.manual_seed(SEED)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(base),
        args=config,
        train_dataset=load_dataset("json", data_files=str(data), split="train"),
        processing_class=AutoTokenizer.from_pretrained(base),
    )
    output = trainer.train()
    trainer.save_model(str(out / "model"))
    return float(output.metrics["train_runtime"])  # the Trainer's own clock of its loop


def gap(a: Path, b: Path) -> float:
    left, right = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return max(float((left[key] - right[key]).abs().max()) for key in left)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--b", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--method", choices=("sft", "grpo"), default="sft")
    parser.add_argument("--group", type=int, default=4, help="grpo: completions per prompt")
    parser.add_argument("--windows", type=int, default=8, help="grpo: optimizer steps")
    parser.add_argument("--max-completion", type=int, default=16, help="grpo: tokens")
    args = parser.parse_args()
    if args.method == "grpo":
        with tempfile.TemporaryDirectory() as tmp:
            compare(prepare(Path(tmp), 1)[0], Path(tmp), args)
        return
    b, k = args.b, args.k
    times: dict[str, list[float]] = {"gradacc": [], "trl": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base, data = prepare(root, args.rows)
        tokens = 0
        for repeat in range(args.repeats):  # interleaved
            seconds, tokens = ours(base, data, root / f"ours-{repeat}", b, k)
            times["gradacc"].append(seconds)
            times["trl"].append(trl_run(base, data, root / f"trl-{repeat}", b, k))
        ours(base, data, root / "ours-big", b * k, 1)
        trl_run(base, data, root / "trl-big", b * k, 1)
        gaps = {
            "gradacc": gap(root / "ours-0" / "model", root / "ours-big" / "model"),
            "trl": gap(root / "trl-0" / "model", root / "trl-big" / "model"),
        }
        start = load_file(str(base / "model.safetensors"))
        update = load_file(str(root / "ours-big" / "model" / "model.safetensors"))
        moved = max(float((update[key] - start[key]).abs().max()) for key in start)
    print(f"chat-arithmetic, {args.rows} rows, builtin:tiny-chat, b={b} K={k}, 1 epoch, "
          f"{tokens} trained tokens, median of {args.repeats}")  # fmt: skip
    for name in ("gradacc", "trl"):
        seconds = statistics.median(times[name])
        print(f"  {name:8} {tokens / seconds:8.0f} trained tokens/s   ({b},{k}) vs ({b * k},1) "
              f"max|dw| {gaps[name]:.2e}")  # fmt: skip
    ratio = statistics.median(times["trl"]) / statistics.median(times["gradacc"])
    print(f"  gradacc / TRL tokens/s: {ratio:.2f}x; largest weight update {moved:.2e}")


if __name__ == "__main__":
    main()
