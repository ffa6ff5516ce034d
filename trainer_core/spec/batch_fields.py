"""The job spec's batch fields: processes, micro-batch, K and the effective batch; two of the
last three decide the third (``trainer_core.spec.batching``). Part of ``JobSpec``."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from trainer_core.spec.batching import resolve_effective_batch
from trainer_core.spec.fields import MicroBatch
from trainer_core.spec.spec_base import SpecBase


class BatchFields(SpecBase):
    num_processes: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Data-parallel world size: processes (one per GPU, or gloo CPU processes) "
        "over all machines; the effective batch is micro-batch x K x num_processes",
        examples=[1],
    )
    num_machines: int = Field(
        default=1,
        ge=1,
        le=128,
        description="Machines the processes are spread over (num_processes must be a multiple)",
        examples=[1],
    )
    sharding: Literal["none", "fsdp"] = Field(
        default="none",
        description="'fsdp': each of the num_processes holds a share of the weights, "
        "gradients and optimizer state (FSDP2), for a model whose states do not fit one device; "
        "gradients reduced once per window, in fp32. 'none': every process holds the whole "
        "model (DDP)",
        examples=["none"],
    )
    max_restarts: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Times the job restarts from its last checkpoint when a process or rank "
        "dies (kill -9, the OOM killer); past it the job fails, naming every restart's cause",
        examples=[3],
    )
    per_device_train_batch_size: MicroBatch | Literal["auto"] = Field(
        default=8,
        description="Samples per micro-batch, or 'auto': the largest that fits the memory "
        "budget (then effective_batch_size is required)",
        examples=[8],
    )
    gradient_accumulation_steps: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="K: micro-batches whose gradients make one optimizer step (exactly); "
        "default 1, or effective_batch_size / per_device_train_batch_size; chosen by the "
        "machine with 'auto'",
        examples=[4],
    )
    effective_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=1 << 24,
        validate_default=True,
        description="Samples per optimizer step (micro-batch x K); give it instead of K",
        examples=[32],
    )
    per_device_eval_batch_size: int = Field(
        default=32, ge=1, le=65536, description="Samples per evaluation batch", examples=[32]
    )

    @field_validator("per_device_train_batch_size", mode="wrap")
    @classmethod
    def _micro_batch(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        """One error for the field, not one per member of ``int | "auto"``."""
        try:
            return handler(value)
        except ValidationError:
            raise ValueError("an integer from 1 to 65536, or 'auto'") from None

    @field_validator("effective_batch_size")
    @classmethod
    def _effective_batch(cls, value: int | None, info: ValidationInfo) -> int | None:
        """Two of (micro-batch, K, effective batch) decide the third; they must agree exactly."""
        if "per_device_train_batch_size" not in info.data:
            return value  # the micro-batch itself was invalid: reported on its own
        return resolve_effective_batch(
            info.data["per_device_train_batch_size"],
            info.data.get("gradient_accumulation_steps"),
            value,
            world=info.data.get("num_processes", 1),
        )

    @field_validator("num_machines")
    @classmethod
    def _machines_divide_processes(cls, value: int, info: ValidationInfo) -> int:
        processes = info.data.get("num_processes", 1)
        if processes % value:
            raise ValueError(f"num_processes ({processes}) must be a multiple of num_machines")
        return value

    @field_validator("sharding")
    @classmethod
    def _shards_over_processes(cls, value: str, info: ValidationInfo) -> str:
        if value == "fsdp" and info.data.get("num_processes", 1) < 2:
            raise ValueError("'fsdp' shards the model over num_processes: give 2 or more")
        return value

    @property
    def processes_per_machine(self) -> int:
        return self.num_processes // self.num_machines

    @property
    def auto_micro_batch(self) -> bool:
        return self.per_device_train_batch_size == "auto"
