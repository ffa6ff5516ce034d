"""GRPO (method ``grpo``, OpenAI's reinforcement fine-tuning), the torch-free part: the policy loss
(``PolicyLoss``), a run's settings (``GrpoSettings``), what a reward returns (``Graded``) and the
job spec's ``grpo`` object (``GrpoFields``, with its grader).

**The policy loss.** Each completion i of a window carries a fixed advantage A_i and, per token t,
the log-prob it was sampled with (old). With r_it = π_θ/π_old of the token, ε_low = ``epsilon``
and ε_high = ``epsilon_high`` (``epsilon`` when unset), the token's loss is PPO's clipped objective

    l_it = -min(r_it A_i, clip(r_it, 1 - ε_low, 1 + ε_high) A_i)  (+ β k3_it with a reference)

and the loss types differ only in how a window's tokens are averaged (``accumulation``,
"Rollouts"): ``dapo`` over its loss-carrying tokens, ``grpo`` over its completions of each one's
token mean, ``dr_grpo`` over its completions times the constant ``max_completion_length``;
``bnpo`` (a micro-batch's own token mean) is refused.

**A run's settings.** The job's batch fields count completions (b and K cut them), so a window
holds ``effective_batch_size / group_size`` prompts, each sampled ``group_size`` times.

**What a reward returns**: a plain float, or a ``Graded`` with the sub-graders' scores and the
grader errors counted by kind. The core runs the graders (``trainer_core.graders``); the run
aggregates what comes back (``trainer_core.grpo.metrics``).

**The job spec's ``grpo`` object** (``/v1/jobs``) holds the settings and the grader that scores
each sampled answer (``trainer_core.spec.graders``, OpenAI's grader objects). Part of
``JobSpec``: after the data fields (it reads ``method``), before the batch fields (the effective
batch must be a whole number of groups).

Example:
    >>> as_graded(0.5)
    Graded(reward=0.5, sub_rewards={}, errors={})
    >>> GrpoJob(group_size=4, grader={"type": "string_check", "name": "exact", "operation": "eq",
    ...         "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}).grader.type
    'string_check'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from trainer_core.spec.fields import refuse_inexact
from trainer_core.spec.graders import Grader
from trainer_core.spec.spec_base import SpecBase

LossType = Literal["dapo", "grpo", "dr_grpo"]
# Loss types whose objective is a function of how the window is cut: no normaliser computed once
# per window makes their accumulated gradient the one-forward gradient, so they are not trained.
PARTITION_DEPENDENT = {
    "bnpo": "it divides each micro-batch's token sum by that micro-batch's own token count (a "
    "mean of micro-batch means), so its gradient changes with the micro-batch size, K and the "
    "number of ranks",
}


class PolicyLoss(BaseModel):
    """The GRPO family's loss settings (TRL's names). Example:

    >>> PolicyLoss(loss_type="grpo", epsilon=0.2, beta=0.04).upper_clip
    1.2
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    loss_type: LossType = Field(
        default="dapo",
        description="dapo: the mean over the window's loss-carrying tokens; grpo: the mean over "
        "its completions of each completion's token mean; dr_grpo: the token sum over "
        "(completions x max_completion_length)",
    )
    epsilon: float = Field(default=0.2, gt=0, lt=1, description="the lower clip range (ε)")
    epsilon_high: float | None = Field(
        default=None, gt=0, le=10, description="the upper clip range (DAPO's clip-higher); none: ε"
    )
    beta: float = Field(
        default=0.0, ge=0, le=1000, description="weight of the k3 KL to the reference; 0: off"
    )
    max_completion_length: int = Field(
        default=256, ge=1, le=65536, description="the sampling budget; dr_grpo's constant"
    )
    mask_truncated_completions: bool = Field(
        default=True,
        description="a completion cut at max_completion_length (no EOS) carries no loss and is "
        "not counted in any normaliser",
    )
    scale_rewards: bool = Field(
        default=True,
        description="divide each group's centred rewards by the group's std (Dr. GRPO: false)",
    )

    @field_validator("loss_type", mode="before")
    @classmethod
    def _window_exact(cls, value: Any) -> Any:
        choose = "choose dapo (its window-exact counterpart), grpo or dr_grpo"
        return refuse_inexact(value, PARTITION_DEPENDENT, choose)

    @property
    def lower_clip(self) -> float:
        return 1.0 - self.epsilon

    @property
    def upper_clip(self) -> float:
        return 1.0 + (self.epsilon if self.epsilon_high is None else self.epsilon_high)


class GrpoSettings(PolicyLoss):
    """Sampling settings on top of the loss's. Example:

    >>> GrpoSettings(group_size=4, temperature=0.7, max_completion_length=32).group_size
    4
    """

    group_size: int = Field(
        default=8, ge=2, le=256, description="completions sampled per prompt (a group)"
    )
    temperature: float = Field(default=1.0, gt=0, le=10, description="the sampling temperature")
    generation_batch: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="at most this many completions per generate call: a window's groups are "
        "sampled in chunks of max(1, generation_batch // group_size) groups, each chunk under "
        "its own seed; what is sampled depends on it, never on b, K or the ranks",
    )
    eval_interval: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="evaluate on the validation prompts every this many windows; 0: never",
    )
    eval_samples: int = Field(
        default=8,
        ge=1,
        le=4096,
        description="validation prompts per evaluation (the first ones), one completion each",
    )
    num_iterations: int = Field(
        default=1, description="optimizer passes over each window's rollouts; only 1 is built"
    )

    @field_validator("num_iterations")
    @classmethod
    def _one_pass(cls, value: int) -> int:
        if value != 1:
            raise ValueError(
                f"num_iterations {value} is not built: each window's rollouts train once (1), "
                "so the old log-probs are the current policy's, detached"
            )
        return value

    def groups_per_call(self) -> int:
        """How many groups one ``generate`` call samples (a chunk of the window's groups)."""
        return max(1, self.generation_batch // self.group_size)

    def prompts_per_window(self, effective_batch_size: int) -> int:
        """The window's prompts: its completions (the job's effective batch) over the group."""
        if effective_batch_size % self.group_size:
            raise ValueError(
                f"effective_batch_size: {effective_batch_size} completions are not a whole "
                f"number of groups of {self.group_size}"
            )
        return effective_batch_size // self.group_size


@dataclass(frozen=True)
class Graded:
    """One completion's score: ``reward`` trains; ``sub_rewards`` (a multi grader's, by the names
    of its ``graders`` map) and ``errors`` (OpenAI's error kinds, 0 or 1 per completion) are
    reported."""

    reward: float
    sub_rewards: Mapping[str, float] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)


Reward = Callable[[Mapping[str, Any], str], "float | Graded"]


def as_graded(value: float | Graded) -> Graded:
    """A float reward as a ``Graded`` without sub-graders or errors."""
    return value if isinstance(value, Graded) else Graded(float(value))


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
