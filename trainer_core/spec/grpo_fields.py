"""The job spec's ``grpo`` object: method ``grpo`` (reinforcement fine-tuning, GRPO family) on
/v1/jobs. It holds ``GrpoSettings`` (the loss and the sampling, ``trainer_core.spec.grpo``) and the
grader that scores each sampled answer (``trainer_core.spec.graders``, OpenAI's grader objects).
Part of ``JobSpec``: after the data fields (it reads ``method``), before the batch fields (the
effective batch must be a whole number of groups).

Example:

>>> GrpoJob(group_size=4, grader={"type": "string_check", "name": "exact", "operation": "eq",
...         "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}).grader.type
'string_check'
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from trainer_core.spec.graders import Grader
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.spec_base import SpecBase


class GrpoJob(GrpoSettings):
    """The GRPO settings and the job's grader: its reward."""

    grader: Grader = Field(
        description="OpenAI's grader object (string_check, text_similarity, python, score_model, "
        "multi): each sampled answer's reward"
    )


class GrpoFields(SpecBase):
    grpo: GrpoJob | None = Field(
        default=None,
        validate_default=True,
        description="method grpo only, and required there: group_size (completions per prompt), "
        "loss_type (dapo, grpo, dr_grpo), beta, epsilon, epsilon_high, num_iterations, "
        "max_completion_length, temperature, scale_rewards, mask_truncated_completions, "
        "eval_interval, eval_samples, and the grader. The batch fields count completions",
        examples=[None],
    )

    @field_validator("grpo")
    @classmethod
    def _only_with_grpo(cls, value: GrpoJob | None, info: ValidationInfo) -> GrpoJob | None:
        method = info.data.get("method")
        if method == "grpo" and value is None:
            raise ValueError("method grpo needs grpo: {grader, group_size, ...}")
        if value is not None and method is not None and method != "grpo":
            raise ValueError(f"grpo applies to method grpo, not {method}")
        return value

    @field_validator("effective_batch_size", check_fields=False)
    @classmethod
    def _whole_groups(cls, value: Any, info: ValidationInfo) -> Any:
        """A window samples ``effective_batch_size / group_size`` prompts: a whole number."""
        grpo, data = info.data.get("grpo"), info.data
        b, k = data.get("per_device_train_batch_size"), data.get("gradient_accumulation_steps")
        total = value
        if total is None and isinstance(b, int):  # not resolved yet: b x K x processes
            total = b * (k or 1) * data.get("num_processes", 1)
        if isinstance(grpo, GrpoJob) and isinstance(total, int) and total % grpo.group_size:
            raise ValueError(
                f"{total} completions are not a whole number of groups of {grpo.group_size} "
                "(grpo.group_size): the batch fields count completions"
            )
        return value
