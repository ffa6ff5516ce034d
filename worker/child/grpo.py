"""Method grpo in the training child: the job's prompts, its grader as the reward, and the core's
``train_grpo`` in the job's folder. Importing this module is cheap; calling it imports torch.

The reward is ``gradacc.graders.reward.grader_reward``: each completion is graded by
``run_grader`` (a failing grader scores 0, its error kind counted in the step record, and the run
goes on); model graders call their upstream server (``upstream_chat``), python graders run in the
sandbox with the operator's limits (``GRADACC_GRADER_*``). The run reports through the same
callback as any job (progress, one step record per window with ``reward_mean`` and the rest,
checkpoints), stops between micro-steps on a cancel and at a window's end on a preemption, and
resumes from its checkpoint.
"""

from __future__ import annotations

from gradacc.graders import Grading
from gradacc.graders.limits import sandbox_limits
from gradacc.graders.reward import grader_reward
from gradacc.graders.upstream_chat import upstream_chat
from gradacc.settings import Settings
from trainer_core.spec.callbacks import StopCheck, TrainingCallback, TrainResult
from trainer_core.spec.errors import DatasetError
from trainer_core.spec.job import JobSpec


def run_grpo(
    spec: JobSpec,
    settings: Settings,
    job_id: str,
    *,
    callback: TrainingCallback,
    should_stop: StopCheck,
) -> TrainResult:
    """Train ``job_id`` with GRPO in its folder (``resume``: a job handed over continues)."""
    from trainer_core.grpo import train_grpo
    from trainer_core.grpo.prompts import load_prompts

    assert spec.grpo is not None  # method grpo: the spec requires it
    prompts = load_prompts(spec)
    if spec.grpo.eval_interval and not prompts.validation:
        raise DatasetError("grpo.eval_interval: evaluating needs validation prompts, and the "
                           "job has none: give eval_dataset", param="grpo.eval_interval")  # fmt: skip
    grading = Grading(chat=upstream_chat(settings.serve_upstreams), limits=sandbox_limits(settings))
    reward = grader_reward(spec.grpo.grader, grading)
    out = settings.jobs_dir / job_id
    run = train_grpo(spec, spec.grpo, prompts.train, reward, out, callback=callback,
                     should_stop=should_stop, resume=True,
                     validation=prompts.validation)  # fmt: skip
    summary = dict(run.records[-1]) if run.records else {}
    return TrainResult(run.status, metrics=run.records, summary=summary, output_dir=out)
