"""/v1/jobs/{id}/checkpoints: every checkpoint the job keeps (``save_total_limit``'s latest and the
best), newest first, each with its step, epoch, metrics, whether it is the best, where to
download it and the name that trains a new job from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from api.schemas.jobs import CheckpointList, CheckpointRead
from gradacc.sources import fine_tuned
from gradacc.tables import Job
from trainer_core.spec.outputs import CHECKPOINT_STATE, kept_checkpoints


def list_checkpoints(job: Job, job_dir: Path) -> CheckpointList:
    kept = kept_checkpoints(job_dir)
    if not kept:
        return CheckpointList(data=[])
    newest = kept[0][2]
    best = (newest.get("selection") or {}).get("best_step")
    data = [_read(job, step, folder, state, best) for step, folder, state in kept]
    return CheckpointList(data=data, first_id=data[0].id, last_id=data[-1].id)


def _read(
    job: Job, step: int, folder: Path, state: dict[str, Any], best: int | None
) -> CheckpointRead:
    epochs = state.get("metrics") or [{}]
    # The latest epoch's record, then the evaluation the run made at (or last before) this step.
    metrics = {**epochs[-1], **(state.get("evaluation") or {})}
    return CheckpointRead(
        id=f"ckpt-{job.id}-{step}",
        created_at=int((folder / CHECKPOINT_STATE).stat().st_mtime),
        fine_tuning_job_id=job.id,
        fine_tuned_model_checkpoint=f"/v1/jobs/{job.id}/artifacts/checkpoint-{step}",
        model=fine_tuned.checkpoint_name(job, step),
        step_number=step,
        epoch=state["epoch"],
        metrics=metrics,
        is_best=step == best,
    )
