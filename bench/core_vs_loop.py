"""Whole process: ``python -m trainer_core run`` against a hand-written loop on the same spec.

A 40-epoch tiny job (tiny GPT-2 on tiny-stories, 128 rows, b 4, K 4) with the default checkpoint
policy (every epoch, written in the background). The hand-written loop is what a user would write:
tokenize in one call, a shuffling DataLoader, the model's mean loss / K, clip, step, an eval pass
per epoch and the final ``save_pretrained``, no checkpoints. Both are timed from process start to
exit, interleaved, REPEATS times; the ratio is hand time / core time (1.0: the core costs nothing).
Both run one torch thread (``OMP_NUM_THREADS=1``): on a shared 2-core machine two spinning OpenMP
threads slow a tiny model's steps by up to ~9x, at random, which would drown the difference.

    .venv/bin/python bench/core_vs_loop.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC = {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories", "task": "causal-lm",
        "num_train_epochs": 40, "max_train_samples": 128, "max_eval_samples": 16,
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,
        "learning_rate": 5e-3, "seed": 1}  # fmt: skip


def hand_loop(spec_file: Path, out: Path, clock: dict[str, float] | None = None) -> None:
    """The hand-written job; ``clock`` (bench/fixed_cost.py) gets its phases' wall times."""
    clock = {} if clock is None else clock
    mark = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        clock[phase] = clock.get(phase, 0.0) + now - mark
        mark = now

    sys.path.insert(0, str(HERE.parent))
    import torch
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForLanguageModeling

    from trainer_core.builtin.corpus import BUILDERS
    from trainer_core.model.load import load_model, load_tokenizer
    from trainer_core.spec.job import JobSpec

    spec = JobSpec.model_validate_json(spec_file.read_text())
    tokenizer = load_tokenizer(spec)
    torch.manual_seed(spec.seed)
    model = load_model(spec, tokenizer, None)
    lap("model and plan")

    def rows(split: str, n: int | None) -> list[dict[str, list[int]]]:
        texts = BUILDERS[spec.dataset](split)["text"][:n]
        ids = tokenizer(texts, truncation=True, max_length=spec.max_seq_length)["input_ids"]
        return [{"input_ids": r} for r in ids if len(r) >= 2]

    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    b, k = spec.per_device_train_batch_size, spec.gradient_accumulation_steps
    train = DataLoader(rows("train", spec.max_train_samples), b, shuffle=True, collate_fn=collator)  # type: ignore[arg-type]
    evaluation = DataLoader(rows("validation", spec.max_eval_samples), 32, collate_fn=collator)  # type: ignore[arg-type]
    lap("data")
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate)
    lap("model and plan")
    for _epoch in range(spec.num_train_epochs):
        model.train()
        for i, batch in enumerate(train):
            (model(**batch).loss / k).backward()
            if (i + 1) % k == 0 or i + 1 == len(train):
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        lap("train steps")
        model.eval()
        with torch.inference_mode():
            losses = [float(model(**batch).loss) for batch in evaluation]
        lap("evaluation")
        (out / "metrics.jsonl").open("a").write(json.dumps({"eval_loss": sum(losses)}) + "\n")
        lap("the rest")
    model.save_pretrained(out / "model")
    lap("final save")


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
                   cwd=HERE.parent)  # fmt: skip
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hand", nargs=2, type=Path)
    args = parser.parse_args()
    if args.hand:
        hand_loop(*args.hand)
        return 0
    core, hand, stalls = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        spec_file = Path(scratch) / "spec.json"
        spec_file.write_text(json.dumps(SPEC))
        for i in range(args.repeats):
            out = Path(scratch) / f"core{i}"
            core.append(_timed([sys.executable, "-m", "trainer_core", "run", str(spec_file),
                                "--output-dir", str(out)]))  # fmt: skip
            summary = json.loads((out / "summary.json").read_text())
            stalls.append((summary["checkpoints_saved"], summary["checkpoint_stall_seconds"]))
            (Path(scratch) / f"hand{i}").mkdir()
            hand.append(_timed([sys.executable, __file__, "--hand", str(spec_file),
                                str(Path(scratch) / f"hand{i}")]))  # fmt: skip
    print("| run | core (s) | hand-written (s) | hand / core | core's checkpoints: saves, stall |")
    print("|---|---|---|---|---|")
    for i, (c, h, (n, stall)) in enumerate(zip(core, hand, stalls, strict=True)):
        print(f"| {i + 1} | {c:.2f} | {h:.2f} | {h / c:.3f} | {n}, {stall:.3f} s |")
    ratio = statistics.median(h / c for c, h in zip(core, hand, strict=True))
    print(f"| median of the pairs | | | {ratio:.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
