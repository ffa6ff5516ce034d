"""``trainer_core.loop.replan``: the re-plan every rank starts again with after one ran out of
memory. It halves b and doubles K (the window stays the same rows), counts a checkpoint's
position in the new micro-batches, applies only while smaller than the checkpoint's b, and says
when no smaller b is left."""

from __future__ import annotations

from pathlib import Path

from trainer_core.checkpoint.resume import RunState
from trainer_core.loop import replan


def state(b: int, k: int, micro_step: int) -> RunState:
    return RunState(epoch=2, micro_step=micro_step, global_step=9, micro_batch_size=b,
                    gradient_accumulation_steps=k, backend="pytorch", spec="f")  # fmt: skip


def test_halves_b_and_moves_the_checkpoint_to_the_same_window(tmp_path: Path) -> None:
    raised = replan.request(
        tmp_path, micro_batch=4, effective=16, world=2, tried=[4], exhausted="x"
    )
    assert isinstance(raised, replan.RanksReplan)
    plan = replan.read(tmp_path)
    assert plan == replan.Replan(micro_batch_size=2, accumulation=4, tried=[4, 2])
    at = state(4, 2, micro_step=6)  # 3 windows of 2 micro-batches of 4 rows done
    assert replan.in_force(tmp_path, at) == plan
    moved = replan.apply(at, plan)
    assert (moved.micro_batch_size, moved.gradient_accumulation_steps, moved.micro_step) == (
        2,
        4,
        12,
    )
    assert replan.in_force(tmp_path, None) == plan  # no checkpoint yet: from the start at b=2
    # A checkpoint written after the re-plan records b=2 itself: nothing left to apply.
    assert replan.in_force(tmp_path, state(2, 4, micro_step=4)) is None


def test_a_micro_batch_of_one_row_is_the_end(tmp_path: Path) -> None:
    replan.request(tmp_path, micro_batch=1, effective=8, world=2, tried=[2, 1], exhausted="no fit")
    plan = replan.read(tmp_path)
    assert plan is not None and plan.exhausted == "no fit"
    assert replan.in_force(tmp_path, None) is None
    assert replan.read(tmp_path / "nowhere") is None
