"""Reinforcement fine-tuning's policy loss, the torch-free part: the GRPO-family loss types, their
settings, and why ``bnpo`` is refused.

Each completion i of a window carries a fixed advantage A_i and, per token t, the log-prob it was
sampled with (old). With r_it = π_θ/π_old of the token, ε_low = ``epsilon`` and ε_high =
``epsilon_high`` (``epsilon`` when unset), the token's loss is PPO's clipped objective

    l_it = -min(r_it A_i, clip(r_it, 1 - ε_low, 1 + ε_high) A_i)  (+ β k3_it with a reference)

and the loss types differ only in how a window's tokens are averaged (``accumulation``,
"Rollouts"): ``dapo`` over its loss-carrying tokens, ``grpo`` over its completions of each one's
token mean, ``dr_grpo`` over its completions times the constant ``max_completion_length``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
        if isinstance(value, str) and value in PARTITION_DEPENDENT:
            raise ValueError(
                f"{value!r} is not trained: {PARTITION_DEPENDENT[value]}; choose dapo (its "
                "window-exact counterpart), grpo or dr_grpo"
            )
        return value

    @property
    def lower_clip(self) -> float:
        return 1.0 - self.epsilon

    @property
    def upper_clip(self) -> float:
        return 1.0 + (self.epsilon if self.epsilon_high is None else self.epsilon_high)
