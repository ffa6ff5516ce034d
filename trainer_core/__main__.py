"""``python -m trainer_core run SPEC.json --output-dir DIR``: one job, no service."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainer_core.callbacks import TrainingCallback
from trainer_core.spec import JobSpec

EXIT_BAD_SPEC = 2
EXIT_JOB_ERROR = 3
COLUMNS = ("epoch", "train_loss", "eval_loss", "eval_accuracy", "eval_f1", "eval_perplexity",
           "learning_rate", "samples_per_second")  # fmt: skip


class PrintEpochs(TrainingCallback):
    def on_start(self, info: dict[str, Any]) -> None:
        print(
            f"training {info['num_train_samples']} rows, {info['total_steps']} optimizer steps "
            f"(effective batch {info['effective_batch_size']}) on {info['device']}",
            file=sys.stderr,
        )

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        cells = [f"{k}={record[k]:.4g}" if isinstance(record[k], float) else f"{k}={record[k]}"
                 for k in COLUMNS if k in record]  # fmt: skip
        print("  ".join(cells), file=sys.stderr)


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
    from trainer_core.distributed import launched_world, leave
    from trainer_core.errors import JobError  # imports below pull in torch: after validation
    from trainer_core.train import train

    try:
        result = train(spec, args.output_dir, callback=PrintEpochs(), resume=not args.no_resume,
                       progress_bar=sys.stderr.isatty())  # fmt: skip
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_core")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train one job spec locally")
    run.add_argument("spec", type=Path, help="a JSON job spec")
    run.add_argument("--output-dir", type=Path, required=True)
    run.add_argument("--no-resume", action="store_true", help="ignore a checkpoint in output-dir")
    args = parser.parse_args(argv)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
