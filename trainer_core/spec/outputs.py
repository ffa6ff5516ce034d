"""The names of what a run writes in its output folder, in one place for the core that writes
them and the service that serves them (``api.services.artifacts``) or reads them back (the worker).

    <output_dir>/
      model/              the final model (save_pretrained, safetensors) and its tokenizer
      adapter/            a LoRA job's adapters (with merge_lora, model/ holds them merged)
      checkpoint/         the latest checkpoint; older kept ones are checkpoint-<step>/
        gradacc_state.json  our position in the run, written last: marks the folder complete
      metrics.jsonl       one record per finished epoch
      steps.jsonl         one record per logging step (the core's CLI; the service keeps them in
                          its database)
      summary.json        the run's summary, once it ended
      tensorboard/        event files, with report_to: ["tensorboard"]
      train.log           the training process's log (the service's worker writes it)
      evaluations.jsonl   each evaluation's report and samples
      pending_writes.jsonl  the service's journal of database writes that wait out an outage
      replan.json         a multi-process job's out-of-memory re-plan (b halved, K doubled)
      preempt.request     the worker asks rank 0 of a multi-process job to checkpoint and stop
      rank0.exit          rank 0's exit status, read by the rank launcher
      rank_failures*.json the ranks that failed in torchrun's last run (one file per machine)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Under GRADACC_HOME: the tokenized-data cache the service's workers and the core's CLI share.
DATA_CACHE_DIR = "cache/data"
MODEL_DIR = "model"
ADAPTER_DIR = "adapter"
# An adapter folder's base, named by the folder itself (``trainer_core.model.trained``): a base
# model's files inside it, or a built-in model and the seed its weights are made from.
ADAPTER_BASE_DIR = "base"
ADAPTER_BUILTIN_BASE = "gradacc_base.json"
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_STATE = "gradacc_state.json"
METRICS_FILE = "metrics.jsonl"
STEPS_FILE = "steps.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"  # each evaluation's report and samples
SUMMARY_FILE = "summary.json"
TENSORBOARD_DIR = "tensorboard"
TRAIN_LOG = "train.log"
WORKER_JOURNAL = "pending_writes.jsonl"
# A multi-process job's files, written by the worker's rank launcher and its ranks.
PREEMPT_FILE = "preempt.request"
RANK0_EXIT_FILE = "rank0.exit"


def step_of(folder: Path) -> int:
    """The global step a checkpoint folder was written at (-1: not a complete checkpoint)."""
    try:
        return int(json.loads((folder / CHECKPOINT_STATE).read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1


def kept_checkpoints(job_dir: Path) -> list[tuple[int, Path, dict[str, Any]]]:
    """(global step, folder, saved state) of each complete checkpoint kept, newest first."""
    found = []
    for folder in job_dir.glob(f"{CHECKPOINT_DIR}*"):
        if folder.name != CHECKPOINT_DIR and not folder.name.startswith(f"{CHECKPOINT_DIR}-"):
            continue
        try:
            state = json.loads((folder / CHECKPOINT_STATE).read_text())
            found.append((int(state["global_step"]), folder, state))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or left half-made by a kill: not a checkpoint
    return sorted(found, key=lambda item: item[0], reverse=True)
