"""A GRPO run's settings, the torch-free part: the policy loss (``reinforcement.PolicyLoss``) and
how each window's rollouts are sampled.

The job's batch fields count completions (b and K cut them), so a window holds
``effective_batch_size / group_size`` prompts, each sampled ``group_size`` times.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from trainer_core.spec.reinforcement import PolicyLoss


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
        default=64, ge=1, le=4096,
        description="at most this many completions per generate call: a window's groups are "
        "sampled in chunks of max(1, generation_batch // group_size) groups, each chunk under "
        "its own seed; what is sampled depends on it, never on b, K or the ranks",
    )  # fmt: skip
    eval_interval: int = Field(
        default=0, ge=0, le=1_000_000,
        description="evaluate on the validation prompts every this many windows; 0: never",
    )  # fmt: skip
    eval_samples: int = Field(
        default=8, ge=1, le=4096,
        description="validation prompts per evaluation (the first ones), one completion each",
    )  # fmt: skip
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
