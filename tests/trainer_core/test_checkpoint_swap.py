"""The checkpoint swap (``writer.install``) killed at each point between its renames: the folders
a kill leaves, exactly as it leaves them, then what a resume reads and what the next save does.

Found by the two-copy load test: a run killed after its new ``checkpoint/`` landed but before the
previous one (``checkpoint.old``) was kept or deleted resumed, then failed at its next save with
"Directory not empty" (``test_selection.py``'s kill and resume)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerState

from trainer_core.checkpoint.format import (
    DISCARDED,
    WEIGHTS,
    best_checkpoint,
    discard,
    read_state_json,
)
from trainer_core.checkpoint.writer import Snapshot, install, write_files
from trainer_core.spec.outputs import kept_checkpoints, step_of


def snap(step: int) -> Snapshot:
    """A real checkpoint's files, tiny: one weight whose value is its step."""
    return Snapshot(
        weights={"w": torch.full((2,), float(step))},
        config_json="{}",
        optimizer={},
        scheduler={},
        rng={},
        trainer_state=TrainerState(global_step=step),
        state={"global_step": step},
    )


def folder_of(path: Path, step: int) -> Path:
    path.mkdir(parents=True)
    write_files(path, snap(step))
    return path


def names(job: Path) -> list[str]:
    return sorted(p.name for p in job.iterdir())


def interrupted_after_the_new_one_landed(job: Path) -> Path:
    """``checkpoint/`` of step 8 in place, ``checkpoint.old`` of step 6 neither kept nor deleted."""
    folder_of(job / "checkpoint.old", 6)
    return folder_of(job / "checkpoint", 8)


@pytest.mark.parametrize(("keep", "best", "after"), [
    (1, None, ["checkpoint"]),  # the policy deletes step 6, as the killed save would have
    (1, 6, ["checkpoint", "checkpoint-6"]),  # the best is kept beyond the limit
    (2, None, ["checkpoint", "checkpoint-8"]),  # the last two: 10 and 8
])  # fmt: skip
def test_the_next_save_after_a_kill_between_the_swap_and_the_cleanup(
    tmp_path: Path, keep: int, best: int | None, after: list[str]
) -> None:
    latest = interrupted_after_the_new_one_landed(tmp_path)
    install(latest, snap(10), keep, best)  # before the fix: OSError, "Directory not empty"
    assert names(tmp_path) == after
    for name in after:
        step = 10 if name == "checkpoint" else int(name.split("-")[1])
        assert step_of(tmp_path / name) == step
        assert load_file(str(tmp_path / name / WEIGHTS))["w"].tolist() == [step, step]


def test_a_resume_after_that_kill_reads_the_new_one_and_can_load_the_old_best(
    tmp_path: Path,
) -> None:
    """The kill came at the last save: no save follows the resume, and ``load_best_model_at_end``
    needs step 6's folder, which the killed save was about to rename ``checkpoint-6``."""
    latest = interrupted_after_the_new_one_landed(tmp_path)
    state = read_state_json(latest)
    assert state == {"global_step": 8}
    assert names(tmp_path) == ["checkpoint", "checkpoint-6"]
    assert best_checkpoint(latest, 6) == tmp_path / "checkpoint-6"
    assert [step for step, _, _ in kept_checkpoints(tmp_path)] == [8, 6]
    # The next save prunes it when the policy does not keep it.
    install(latest, snap(10), 1, None)
    assert names(tmp_path) == ["checkpoint"]


def test_a_kill_between_the_two_renames_puts_the_old_one_back(tmp_path: Path) -> None:
    folder_of(tmp_path / "checkpoint.old", 6)
    folder_of(tmp_path / "checkpoint.tmp", 8)  # written, not yet renamed in
    latest = tmp_path / "checkpoint"
    assert read_state_json(latest) == {"global_step": 6}
    install(latest, snap(10), 1, None)
    assert names(tmp_path) == ["checkpoint"] and step_of(latest) == 10


def test_a_kill_during_a_delete_leaves_nothing_a_reader_takes_for_a_checkpoint(
    tmp_path: Path,
) -> None:
    """A folder is deleted by renaming it out of sight first: what a kill mid-delete leaves is
    under the discarded prefix, never a ``checkpoint-<step>`` missing its weights (its state file,
    written last, could outlive them: a deletion goes in directory order)."""
    latest = folder_of(tmp_path / "checkpoint", 8)
    stale = folder_of(tmp_path / "checkpoint-4", 4)
    half = folder_of(tmp_path / f"{DISCARDED}checkpoint-2", 2)  # a delete killed midway
    (half / WEIGHTS).unlink()
    assert [step for step, _, _ in kept_checkpoints(tmp_path)] == [8, 4]
    discard(stale)
    assert not stale.exists() and not (tmp_path / f"{DISCARDED}checkpoint-4").exists()
    assert read_state_json(latest) == {"global_step": 8}  # a resume clears the leftovers
    assert names(tmp_path) == ["checkpoint"]


@pytest.mark.parametrize("left", ["both", "old only"])
def test_ranks_recovering_at_once_agree(tmp_path: Path, left: str) -> None:
    """Every rank reads the checkpoint at start: four at once, 25 times over, each time from the
    state a kill left. None fails on a rename another one did first, and all read the same."""
    for round_ in range(25):
        job = tmp_path / str(round_)
        folder_of(job / "checkpoint.old", 6)
        if left == "both":
            folder_of(job / "checkpoint", 8)
        start, read = threading.Barrier(4), []

        def rank(job: Path = job, start: threading.Barrier = start, read: list = read) -> None:
            start.wait()
            read.append(read_state_json(job / "checkpoint"))

        with ThreadPoolExecutor(4) as pool:
            for done in [pool.submit(rank) for _ in range(4)]:
                done.result()  # raises what a rank raised
        step = 8 if left == "both" else 6
        assert read == [{"global_step": step}] * 4
        assert names(job) == (["checkpoint", "checkpoint-6"] if left == "both" else ["checkpoint"])
