"""``python -m trainer_core run SPEC.json --output-dir DIR``: one job, no service."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainer_core.loop.step_lines import StepLines as StepsFile
from trainer_core.spec.callbacks import TrainingCallback
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import DATA_CACHE_DIR, STEPS_FILE, SUMMARY_FILE

EXIT_BAD_SPEC = 2
EXIT_JOB_ERROR = 3
COLUMNS = (
    "epoch",
    "train_loss",
    "eval_loss",
    "eval_accuracy",
    "eval_f1",
    "eval_perplexity",
    "learning_rate",
    "samples_per_second",
)


PROGRESS_EVERY_S = 5.0  # without a terminal (no progress bar): a progress line this often


def _say(line: str) -> None:
    """Through tqdm, which clears its bar, prints, and draws the bar again below the line."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


class PrintEpochs(TrainingCallback):
    def __init__(self, *, progress_lines: bool, steps_file: Path | None = None) -> None:
        self.progress_lines = progress_lines
        self.last_line = time.monotonic()
        self.latest: dict[str, Any] = {}
        self.steps = StepsFile(steps_file) if steps_file is not None else None

    def on_start(self, info: dict[str, Any]) -> None:
        _say(
            f"training {info['num_train_samples']} rows, {info['total_steps']} optimizer steps "
            f"(effective batch {info['effective_batch_size']}) on {info['device']}"
        )

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        self.latest = record
        if self.steps is not None:
            self.steps.append(record)

    def on_progress(self, progress: dict[str, Any]) -> None:
        if not self.progress_lines or time.monotonic() - self.last_line < PROGRESS_EVERY_S:
            return
        self.last_line = time.monotonic()
        line = f"epoch {progress['epoch']} step {progress['step']}/{progress['total_steps']}"
        if "train_loss" in self.latest:
            line += f"  loss {self.latest['train_loss']:.4g}  ETA {self.latest['eta_seconds']:.0f}s"
        _say(line)

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        cells = [
            f"{k}={record[k]:.4g}" if isinstance(record[k], float) else f"{k}={record[k]}"
            for k in COLUMNS
            if k in record
        ]
        _say("  ".join(cells))


def finished_before(spec: JobSpec, output_dir: Path) -> bool:
    """``output_dir`` holds a completed run of this very spec."""
    try:
        summary = json.loads((output_dir / SUMMARY_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(summary.get("status") == "completed" and summary.get("spec") == spec.model_dump())


def spec_errors(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()]


def load_spec(path: Path) -> JobSpec:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"error: cannot read spec {path}: {exc}") from exc
    return JobSpec.model_validate(raw)


def run_command(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except ValidationError as exc:
        for line in spec_errors(exc):
            print(f"invalid spec: {line}", file=sys.stderr)
        return EXIT_BAD_SPEC
    if not args.no_resume and finished_before(spec, args.output_dir):
        print(
            f"{args.output_dir} already holds a completed run of this spec (summary.json); "
            "pass --no-resume to train it again from the start, or another --output-dir",
            file=sys.stderr,
        )
        return 0
    import torch  # imports below pull in torch: after validation

    from trainer_core.data.cache import DataCache
    from trainer_core.distributed import launched_world, leave
    from trainer_core.entry import run_job
    from trainer_core.graders import Grading
    from trainer_core.spec.errors import JobError

    if args.threads:
        torch.set_num_threads(args.threads)
    terminal = sys.stderr.isatty()
    try:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        steps = args.output_dir / STEPS_FILE
        callback = PrintEpochs(progress_lines=not terminal, steps_file=steps)
        cache = None if args.no_cache else DataCache(args.cache_dir or default_cache_dir())
        # A GRPO job's python graders run in the sandbox at its default limits; a model grader
        # has no server to ask here and scores 0 (model_grader_server_error, counted).
        result = run_job(
            spec,
            args.output_dir,
            callback=callback,
            resume=not args.no_resume,
            progress_bar=terminal,
            data_cache=cache,
            grading=Grading(),
        )
    except JobError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        return EXIT_JOB_ERROR
    finally:
        leave(launched_world())  # under torchrun: every rank runs this command
    if not launched_world().is_main:
        return 0  # rank 0 prints the results
    print(json.dumps(result.summary.get("final_metrics"), indent=2))
    print(f"{result.status}: outputs in {args.output_dir}", file=sys.stderr)
    return 0


def default_cache_dir() -> Path:
    """The service's tokenized-data cache: a rerun, a resume or a job on the same data skips
    tokenizing, whichever of the two made the entry."""
    return Path(os.environ.get("GRADACC_HOME") or "var") / DATA_CACHE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_core")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train one job spec locally")
    run.add_argument("spec", type=Path, help="a JSON job spec")
    run.add_argument("--output-dir", type=Path, required=True)
    run.add_argument("--no-resume", action="store_true", help="ignore a checkpoint in output-dir")
    run.add_argument("--threads", type=int, default=0, help="torch threads (default: all cores)")
    run.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"tokenized-data cache (default: $GRADACC_HOME/{DATA_CACHE_DIR}, the "
        "service's; GRADACC_HOME defaults to var)",
    )
    run.add_argument("--no-cache", action="store_true", help="tokenize into a temporary folder")
    merge = commands.add_parser("merge", help="a trained model folder with its adapters merged")
    merge.add_argument("folder", type=Path, help="a model or adapter folder (model/trained.py)")
    merge.add_argument("--output-dir", type=Path, required=True, help="written whole, once")
    merge.add_argument("--classifier", action="store_true", help="a sequence classifier")
    args = parser.parse_args(argv)
    if args.command == "merge":
        from trainer_core.model.merge import merge_folder

        merge_folder(args.folder, args.output_dir, causal=not args.classifier)
        return 0
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
