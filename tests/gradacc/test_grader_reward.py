"""A grader as a GRPO run's reward (``gradacc.graders.reward``): a multi grader of a
``string_check`` and a ``python`` grader whose code raises on some rows and spins past its CPU
limit on another. Each completion gets its sub-rewards by name and OpenAI's error kinds as 0 or 1;
in a run on ``builtin:tiny-chat`` (one window and one evaluation), the failures are counted in
the step record and the evaluation's, score 0, and the run goes on to its model."""

from __future__ import annotations

from typing import Any

from gradacc.graders import ERROR_KINDS, Grading, SandboxLimits
from gradacc.graders.reward import grader_reward
from trainer_core.spec.graders import parse_grader

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=1, memory_bytes=512 << 20, disk_bytes=4 << 20)
SOURCE = """def grade(sample, item):
    if item["mode"] == "raise":
        raise ValueError("a bad row")
    if item["mode"] == "spin":
        while True:
            pass
    return 0.5
"""
GRADER = parse_grader({
    "type": "multi", "name": "both", "calculate_output": "exact + code",
    "graders": {
        "exact": {"type": "string_check", "name": "exact", "operation": "eq",
                  "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"},
        "code": {"type": "python", "name": "code", "source": SOURCE},
    },
})  # fmt: skip
REWARD = grader_reward(GRADER, Grading(limits=LIMITS))


def errors_hit(errors: Any) -> list[str]:
    return [kind for kind, count in errors.items() if count]


def test_each_completion_carries_its_sub_rewards_and_error_kinds() -> None:
    fine = REWARD({"mode": "ok", "answer": "4"}, "4")
    assert (fine.reward, dict(fine.sub_rewards)) == (1.5, {"exact": 1.0, "code": 0.5})
    assert set(fine.errors) == set(ERROR_KINDS) and errors_hit(fine.errors) == []
    raised = REWARD({"mode": "raise", "answer": "4"}, "4")
    assert (raised.reward, dict(raised.sub_rewards)) == (1.0, {"exact": 1.0, "code": 0.0})
    assert errors_hit(raised.errors) == ["python_grader_runtime_error"]
