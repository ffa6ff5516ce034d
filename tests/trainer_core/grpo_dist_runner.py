"""Run under torchrun: one GRPO run of ``test_grpo_run`` (its prompts, settings and reward) on
every rank. ``torchrun --nproc_per_node 2 tests/trainer_core/grpo_dist_runner.py SPEC.json OUT``;
each rank writes ``OUT/samples-RANK.json``: the window's completions as it saw them (every
rank's, gathered) and how many it generated itself, per window; its step records' count; its
evaluations' samples (one after each window)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.trainer_core.test_grpo_run import EVALUATING, ROWS, VALIDATION, length_reward
from trainer_core.distributed import launched_world, leave
from trainer_core.grpo import train_grpo
from trainer_core.grpo.prompts import prompt_rows
from trainer_core.spec.job import JobSpec


def main(spec_file: str, out: str) -> int:
    world = launched_world()
    spec = JobSpec.model_validate_json(Path(spec_file).read_text())
    run = train_grpo(spec, EVALUATING, prompt_rows(ROWS), length_reward, out,
                     validation=prompt_rows(VALIDATION))  # fmt: skip
    samples = [sampled.completion_ids for sampled in run.samples]
    report = {"samples": samples, "generated": run.generated, "records": len(run.records),
              "evaluated": [evaluation.samples for evaluation in run.evaluations]}  # fmt: skip
    (Path(out) / f"samples-{world.rank}.json").write_text(json.dumps(report))
    leave(world)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
