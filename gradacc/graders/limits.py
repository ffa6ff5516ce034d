"""The python grader's sandbox limits an operator sets (``GRADACC_GRADER_CPU_S``,
``GRADACC_GRADER_WALL_S``, ``GRADACC_GRADER_MEMORY_BYTES``, ``GRADACC_GRADER_PIDS``,
``GRADACC_GRADER_CPUS``, ``GRADACC_GRADER_UID``, ``GRADACC_GRADER_CGROUP``), for every caller that
grades: a training run's reward and ``/v1/fine_tuning/alpha/graders/run``."""

from __future__ import annotations

from gradacc.graders.sandbox import SandboxLimits
from gradacc.settings import Settings


def sandbox_limits(settings: Settings) -> SandboxLimits:
    """The settings' limits; the disk limit stays the sandbox's own (1 GiB, OpenAI's)."""
    return SandboxLimits(wall_s=settings.grader_wall_s, cpu_s=settings.grader_cpu_s,
                         memory_bytes=settings.grader_memory_bytes, pids=settings.grader_pids,
                         cpus=settings.grader_cpus, uid=settings.grader_uid,
                         cgroup=settings.grader_cgroup)  # fmt: skip
