"""A GRPO run over a prompt dataset: one training run whose window w samples, grades and trains.

The run is one ``train`` call (``RolloutStream``): its epoch w is window w, whose rollouts are
sampled from the live policy when the window's first micro-batch is built, that is after window
w - 1's optimizer step (``grpo.windows``: each rank samples its share of the window's
groups, seeded per group, and the ranks all-gather the window before its first backward). So the
model, the optimizer's state (Adam's moments), the learning-rate schedule over all the windows
(``max_steps`` = the windows; warm-up as for any job) and the random state carry from one window
to the next, in each backend, at b, K and W as the job says.

A checkpoint (after each window with ``save_strategy: epoch``) resumes exactly with
``resume=True``: its weights, optimizer, schedule and RNG, the next window sampled from them under
its own seeds. It is refused when the GRPO settings or the prompts changed (``grpo.json``).

Example:
    >>> spec = JobSpec(model="builtin:tiny-chat", dataset="builtin:chat-arithmetic",
    ...                task="causal-lm", per_device_train_batch_size=4,
    ...                effective_batch_size=8, max_steps=2)
    >>> rows = prompt_rows([{"messages": [{"role": "user", "content": "2 plus 2"}],
    ...                      "answer": "4"}] * 4)
    >>> run = train_grpo(spec, GrpoSettings(group_size=4), rows,
    ...                  lambda item, text: float(item["answer"] in text), "runs/grpo")  # doctest: +SKIP
    >>> run.records[-1]["reward_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer_core.data.grpo import RolloutStream
from trainer_core.distributed import launched_world
from trainer_core.graders import Grading
from trainer_core.graders.reward import grader_reward
from trainer_core.grpo.evaluation import Evaluated, GrpoEvaluation
from trainer_core.grpo.metrics import window_metrics
from trainer_core.grpo.prompts import PromptRow, load_prompts
from trainer_core.grpo.sampling import Sampled
from trainer_core.grpo.windows import PolicyWindows, Reward, WindowSamples, window_shape
from trainer_core.loop.build import resolve_device
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.callbacks import (
    NULL_CALLBACK,
    Status,
    StopCheck,
    TrainingCallback,
    TrainResult,
    never_stop,
)
from trainer_core.spec.errors import DatasetError, JobError
from trainer_core.spec.grpo import GrpoSettings, as_graded
from trainer_core.spec.job import JobSpec
from trainer_core.spec.outputs import MODEL_DIR
from trainer_core.train import train

# What each window's epoch record carries over into the GRPO step record (the loss emits them).
LOSS_METRICS = ("train_loss", "clip_ratio", "kl", "learning_rate")
RUN_FILE = "grpo.json"  # what a resume must match: the settings and the prompts


@dataclass
class GrpoRun:
    """Per window: what was sampled (``samples``, every rank's), the step record (``records``,
    on every rank), and how many completions this process generated itself (``generated``)."""

    samples: list[Sampled] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    evaluations: list[Evaluated] = field(default_factory=list)  # every eval_interval windows
    model_dir: Path | None = None
    status: Status = "completed"


def window_count(spec: JobSpec, prompts: int, per_window: int) -> int:
    """``max_steps`` windows, else every whole window of prompts each epoch."""
    if per_window > prompts:
        raise ValueError(
            f"effective_batch_size: a window needs {per_window} prompts, the data holds {prompts}"
        )
    return spec.max_steps or spec.num_train_epochs * (prompts // per_window)


def _reference(spec: JobSpec) -> torch.nn.Module:
    """The starting model, frozen, on the job's device (with ranks, this rank's GPU)."""
    model: torch.nn.Module = load_model(spec, load_tokenizer(spec), None)
    device = resolve_device(spec)
    if device.type == "cuda":
        device = torch.device("cuda", launched_world().local_rank)
    return model.to(device).train(False)


def _record(
    step: int, window: WindowSamples | None, epoch_record: dict[str, Any], grad_norm: Any
) -> dict[str, Any]:
    """The step's metrics: the rewards' mean and std, each sub-grader's, the grader errors by
    kind, the sampled lengths (truncated ones included) and the share cut (``grpo_metrics``),
    and the loss's own (clip fraction, KL, the objective). A window sampled before a resume
    reports its loss only."""
    record = {"step": step} | {k: epoch_record[k] for k in LOSS_METRICS if k in epoch_record}
    if grad_norm is not None:
        record["grad_norm"] = grad_norm
    if window is None:
        return record
    graded = [as_graded(score) for score in window.scores]
    return record | window_metrics(window.sampled.completion_ids, window.sampled.truncated, graded)


class _WindowRecords(TrainingCallback):
    """The run's reports, as a GRPO run's: one step record per window (at the window's end),
    start, progress, batch size and checkpoints passed on; the inner run's epoch records (an
    epoch is a window there) and its own step records are not. Ranks other than 0 run
    ``other_ranks``: the same records and evaluations (which all-gather), reported to no one."""

    def __init__(
        self,
        callback: TrainingCallback,
        windows: PolicyWindows,
        run: GrpoRun,
        evaluation: GrpoEvaluation,
        windows_per_epoch: int,
    ) -> None:
        self.callback, self.windows, self.run = callback, windows, run
        self.evaluation, self.windows_per_epoch = evaluation, windows_per_epoch
        self.grad_norms: dict[int, Any] = {}
        self.other_ranks = (
            self
            if callback is NULL_CALLBACK
            else _WindowRecords(NULL_CALLBACK, windows, run, evaluation, windows_per_epoch)
        )

    def on_start(self, info: dict[str, Any]) -> None:
        self.callback.on_start(info)

    def on_progress(self, progress: dict[str, Any]) -> None:
        """The epoch over the prompts, not the inner run's (a window each)."""
        window = int(progress["epoch"])
        epoch = (window - 1) // self.windows_per_epoch + 1
        self.callback.on_progress(progress | {"epoch": epoch})

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        self.callback.on_checkpoint(info)

    def on_batch_size(self, info: dict[str, Any]) -> None:
        self.callback.on_batch_size(info)

    def on_step_metrics(self, record: dict[str, Any]) -> None:
        self.grad_norms[int(record["step"])] = record.get("grad_norm")

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        step = int(record["optimizer_steps"])
        window = self.windows.done.get(int(record["epoch"]) - 1)
        self.run.records.append(_record(step, window, record, self.grad_norms.pop(step, None)))
        if self.windows.model is not None:  # every eval_interval windows: the eval_ keys
            self.run.records[-1] |= self.evaluation.after_step(
                step, self.windows.model, self.windows.tokenizer
            )
        self.callback.on_step_metrics(self.run.records[-1])


def _check_resumable(
    output_dir: Path, settings: GrpoSettings, prompts: Sequence[PromptRow], resume: bool
) -> None:
    """A resume must sample what the checkpoint's run would have: the same settings and prompts
    (the spec is checked by ``train``). Written on every start, checked on a resume."""
    rows = json.dumps(
        [[list(r.messages), dict(r.item)] for r in prompts], sort_keys=True, default=str
    )
    run = {
        "settings": settings.model_dump(mode="json"),
        "prompts": hashlib.sha256(rows.encode()).hexdigest(),
    }
    path = output_dir / RUN_FILE
    if resume and path.exists() and json.loads(path.read_text()) != run:
        raise JobError(
            f"output_dir: {output_dir} holds a GRPO run with other settings or "
            "prompts; resume it with its own, or start in a new output_dir",
            param="output_dir",
        )
    if launched_world().is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run, indent=2))


def train_grpo(
    spec: JobSpec,
    settings: GrpoSettings,
    prompts: Sequence[PromptRow],
    reward: Reward,
    output_dir: Path | str,
    *,
    callback: TrainingCallback = NULL_CALLBACK,
    should_stop: StopCheck = never_stop,
    resume: bool = False,
    validation: Sequence[PromptRow] | None = None,
) -> GrpoRun:
    """Sample, grade and train window after window in one run; see the module docstring.
    ``validation``: the prompts evaluated every ``settings.eval_interval`` windows (``grpo_eval``)."""
    assert spec.effective_batch_size is not None  # resolved by the spec
    per_window = settings.prompts_per_window(spec.effective_batch_size)
    output_dir, run = Path(output_dir), GrpoRun()
    windows_total = window_count(spec, len(prompts), per_window)
    _check_resumable(output_dir, settings, prompts, resume)
    evaluation = GrpoEvaluation(
        validation, settings, reward, seed=spec.seed, output_dir=output_dir, world=launched_world()
    )
    tokenizer = load_tokenizer(spec)
    # β > 0: the KL is to the starting model (as DPO's reference), frozen for the whole run.
    windows = PolicyWindows(
        seed=spec.seed,
        settings=settings,
        prompts=prompts,
        tokenizer=tokenizer,
        reward=reward,
        per_window=per_window,
        world=launched_world(),
        reference=_reference(spec) if settings.beta else None,
        before_first=lambda model: evaluation.before_training(model, tokenizer),
    )
    shape = window_shape(prompts, tokenizer, settings, spec.effective_batch_size)
    result = train(
        spec.model_copy(update={"max_steps": windows_total}),
        output_dir,
        callback=_WindowRecords(
            callback, windows, run, evaluation, max(len(prompts) // per_window, 1)
        ),
        should_stop=should_stop,
        resume=resume,
        rollouts=RolloutStream(shape, windows),
    )
    run.samples = [windows.done[w].sampled for w in sorted(windows.done)]
    run.generated = [windows.done[w].generated for w in sorted(windows.done)]
    run.evaluations = evaluation.evaluations
    run.status, run.model_dir = result.status, output_dir / MODEL_DIR
    return run


def train_grpo_job(
    spec: JobSpec,
    output_dir: Path | str,
    *,
    grading: Grading | None = None,
    callback: TrainingCallback = NULL_CALLBACK,
    should_stop: StopCheck = never_stop,
    resume: bool = True,
) -> TrainResult:
    """A job of method grpo as the spec says it: its prompts from its sources, its grader as the
    reward (``grading``: what the grader may call on, the sandbox's limits and a chat model for
    model graders; without one, a model grader scores 0 as ``model_grader_server_error``), and
    ``train_grpo`` in ``output_dir``. The worker and ``python -m trainer_core run`` both enter
    here."""
    assert spec.grpo is not None  # method grpo: the spec requires it
    prompts = load_prompts(spec)
    if spec.grpo.eval_interval and not prompts.validation:
        raise DatasetError(
            "grpo.eval_interval: evaluating needs validation prompts, and the "
            "job has none: give eval_dataset",
            param="grpo.eval_interval",
        )
    reward = grader_reward(spec.grpo.grader, grading)
    out = Path(output_dir)
    run = train_grpo(
        spec,
        spec.grpo,
        prompts.train,
        reward,
        out,
        callback=callback,
        should_stop=should_stop,
        resume=resume,
        validation=prompts.validation,
    )
    summary = dict(run.records[-1]) if run.records else {}
    return TrainResult(run.status, metrics=run.records, summary=summary, output_dir=out)
