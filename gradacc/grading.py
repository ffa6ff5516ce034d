"""What a grading gets from this server (the graders themselves are the core's:
``trainer_core.graders``): the python grader's sandbox limits an operator sets
(``GRADACC_GRADER_*``). A training job's model graders ask through
``gradacc.serving.ask.served_chat`` (``/v1/fine_tuning/alpha/graders/run`` through the API's chat
path: the same messages and sampling to the same servers), and the models they may name are checked by
``gradacc.serving.grader_models``."""

from __future__ import annotations

from gradacc.settings import Settings
from trainer_core.graders import SandboxLimits


def sandbox_limits(settings: Settings) -> SandboxLimits:
    """The settings' limits, for every caller that grades: a training run's reward and
    ``/v1/fine_tuning/alpha/graders/run``; the disk limit stays the sandbox's own (1 GiB)."""
    return SandboxLimits(
        wall_s=settings.grader_wall_s,
        cpu_s=settings.grader_cpu_s,
        memory_bytes=settings.grader_memory_bytes,
        pids=settings.grader_pids,
        cpus=settings.grader_cpus,
        uid=settings.grader_uid,
        cgroup=settings.grader_cgroup,
    )
