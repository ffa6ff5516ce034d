"""A grader as a GRPO run's reward (``trainer_core.graders.reward``): a multi grader of a
``string_check`` and a ``python`` grader whose code raises on some rows and spins past its CPU
limit on another. Each completion gets its sub-rewards by name and OpenAI's error kinds as 0 or 1;
in a run on ``builtin:tiny-chat`` (one window and one evaluation), the failures are counted in
the step record and the evaluation's, score 0, and the run goes on to its model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_core.graders import ERROR_KINDS, Grading, SandboxLimits
from trainer_core.graders.reward import grader_reward
from trainer_core.grpo import train_grpo
from trainer_core.grpo.prompts import prompt_rows
from trainer_core.spec.graders import parse_grader
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.job import JobSpec

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


def rows(*modes: str) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"two plus {i}"}], "answer": str(2 + i),
             "mode": mode} for i, mode in enumerate(modes)]  # fmt: skip


def test_a_failing_grader_is_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    """One window (a raising prompt and a fine one, 2 completions each), then one evaluation
    (a prompt whose grader spins past its CPU second, and a fine one)."""
    spec = JobSpec.model_validate({
        "model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
        "optim": "sgd", "learning_rate": 0.1, "max_steps": 1, "validation_split_percentage": 0,
        "seed": 3, "effective_batch_size": 4, "per_device_train_batch_size": 4,
    })  # fmt: skip
    settings = GrpoSettings(group_size=2, max_completion_length=6, eval_interval=1,
                            eval_samples=2)  # fmt: skip
    run = train_grpo(spec, settings, prompt_rows(rows("raise", "ok")), REWARD, tmp_path,
                     validation=prompt_rows(rows("spin", "ok")))  # fmt: skip
    assert run.status == "completed" and run.model_dir is not None and run.model_dir.is_dir()
    (record,) = run.records
    assert record["grader_errors/python_grader_runtime_error"] == 2
    assert record["grader_errors/unresponsive_reward_error"] == 0 and record["grader_errors"] == 2
    assert record["rewards/code/mean"] == 0.25  # 0, 0 (raised), 0.5, 0.5
    assert record["rewards/code/std"] == 0.25
    assert record["eval_grader_errors/unresponsive_reward_error"] == 1
    assert record["eval_grader_errors"] == 1
    spun, fine = run.evaluations[0].samples
    assert spun["errors"] == ["unresponsive_reward_error"] and spun["sub_rewards"]["code"] == 0.0
    assert fine["errors"] == [] and fine["sub_rewards"]["code"] == 0.5
    for sample in (spun, fine):
        assert sample["reward"] == sample["sub_rewards"]["exact"] + sample["sub_rewards"]["code"]
