"""Run under torchrun: train each job of a JSON list in turn, counting DDP's all-reduces.

``torchrun --nproc_per_node 2 tests/trainer_core/dist_runner.py JOBS.json``, where JOBS.json is
``[{"spec": {...}, "out": "DIR"}, ...]`` (a GRPO job adds ``rollouts`` and ``loss``; a job with
``preempt_at_poll`` N is preempted at its N-th window and resumed by the same ranks). One launch
trains several jobs, so the ~4 s import of torch and transformers is paid once per rank. Rank 0 writes ``DIR/comm.json``: the counts of
``CommCounter`` (``syncs``: backward passes whose gradients were all-reduced), the run's status
its metrics and its step records (FSDP2's gradient reductions: ``reductions``; whether it was
preempted and resumed).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from trainer_core.data.grpo import Rollouts, rollout_split
from trainer_core.distributed import launched_world, leave, observe_ddp
from trainer_core.spec.grpo import PolicyLoss
from trainer_core.spec.job import JobSpec
from trainer_core.testing.comm_counter import CommCounter
from trainer_core.testing.recorder import Recorder
from trainer_core.train import train


def main(jobs_file: str) -> int:
    counter = CommCounter()
    observe_ddp(counter.attach)
    counter.count_fsdp_reductions()
    world = launched_world()
    for job in json.loads(Path(jobs_file).read_text()):
        counter.reset()
        steps = Recorder()
        spec = JobSpec.model_validate(job["spec"])
        rollouts = None
        if "rollouts" in job:  # a window of fixed GRPO rollouts and its loss (data.grpo)
            rollouts = rollout_split(Rollouts(**job["rollouts"]), PolicyLoss(**job["loss"]))
        stop = _preempting(job.get("preempt_at_poll"))
        result = train(
            spec, Path(job["out"]), resume=True, callback=steps, rollouts=rollouts, should_stop=stop
        )
        preempted = result.status == "preempted"
        if preempted:  # resumed at once, by the same ranks
            result = train(spec, Path(job["out"]), resume=True, callback=steps, rollouts=rollouts)
        if world.is_main:
            report = {
                **counter.counts(),
                "status": result.status,
                "metrics": result.metrics,
                "steps": steps.steps,
                "preempted": preempted,
            }
            (Path(job["out"]) / "comm.json").write_text(json.dumps(report))
    leave(world)
    return 0


def _preempting(poll: int | None) -> Callable[[], str | None]:
    """A stop check that asks for a preemption at its ``poll``-th call (every rank polls once
    per window), or never."""
    calls = 0

    def stop() -> str | None:
        nonlocal calls
        calls += 1
        return "preempt" if poll is not None and calls == poll else None

    return stop


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
