"""Micro-batch, K and effective batch: two of them decide the third, exactly.

The effective batch (rows per optimizer step) is the user's; the micro-batch is the machine's. So
effective = micro-batch x K x world size (the job's processes), and the rules here are the ones
the spec checks at POST and the run applies when the micro-batch changes (a probe, or an
out-of-memory error that halves it). Cheap to import: no torch.
"""

from __future__ import annotations

from typing import Literal


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def accumulation_for(effective: int, micro_batch: int, world: int) -> int:
    """K = effective / (micro-batch x world size): derived, never chosen. Exact for every
    micro-batch the spec or the run admits (a divisor of effective / world)."""
    per_step = micro_batch * world
    if effective % per_step:
        raise ValueError(f"{effective} is not a multiple of {micro_batch} x {world} processes")
    return effective // per_step


def micro_batch_for(effective: int, accumulation: int, world: int) -> int:
    """b = effective / (K x world size): the micro-batch that the effective batch, K and the
    process count decide."""
    per_micro_batch = accumulation * world
    if effective % per_micro_batch:
        processes = f" x num_processes {world}" if world > 1 else ""
        raise ValueError(
            f"{effective} is not a multiple of gradient_accumulation_steps {accumulation}{processes}"
        )
    return effective // per_micro_batch


def resolve_effective_batch(
    micro_batch: int | Literal["auto"],
    accumulation: int | None,
    effective: int | None,
    *,
    world: int = 1,
) -> int | None:
    """The effective batch a spec asks for (micro-batch x K x ``world`` processes), or a
    ``ValueError`` saying which values would work."""
    if micro_batch == "auto":
        if effective is None:
            raise ValueError("required when per_device_train_batch_size is 'auto'")
        if accumulation is not None:
            raise ValueError(
                "with per_device_train_batch_size 'auto' the machine chooses "
                "gradient_accumulation_steps: leave it out"
            )
        if effective % world:
            raise ValueError(f"{effective} is not a multiple of num_processes {world}")
        return effective
    if effective is None:
        return micro_batch * (accumulation or 1) * world
    per_step = micro_batch * world  # rows of one micro-batch over all processes
    if effective % per_step:
        processes = f" x num_processes {world}" if world > 1 else ""
        options = ", ".join(str(d) for d in divisors(effective // world) if d <= 65536)
        options = options if effective % world == 0 else "none (not a multiple of num_processes)"
        raise ValueError(
            f"{effective} is not a multiple of per_device_train_batch_size {micro_batch}"
            f"{processes}; per_device_train_batch_size could be one of {options}, or 'auto'"
        )
    derived = accumulation_for(effective, micro_batch, world)
    if accumulation is not None and accumulation != derived:
        raise ValueError(
            f"{effective} / (per_device_train_batch_size {micro_batch} x {world} processes) = "
            f"{derived}, but gradient_accumulation_steps is {accumulation}: give two of the three"
        )
    return effective


def smaller_micro_batch(micro_batch: int) -> int | None:
    """The micro-batch to retry with after running out of memory: the largest divisor of this one
    that is at most half of it (so K grows by a whole factor and the window stays the same rows);
    None when it is 1 already."""
    if micro_batch <= 1:
        return None
    return max(d for d in divisors(micro_batch) if d <= micro_batch // 2)
