"""Domain errors. Plain exceptions; ``api.errors`` maps them to HTTP in one place."""

from __future__ import annotations


class DomainError(Exception):
    code = "error"
    param: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class JobNotFound(DomainError):
    code = "job_not_found"
    param = "job_id"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id


class InvalidTransition(DomainError):
    code = "invalid_transition"

    def __init__(self, job_id: str, current: str, target: str) -> None:
        super().__init__(f"job {job_id} is {current}; it cannot become {target}")
        self.current = current
        self.target = target


class NotReady(DomainError):
    code = "not_ready"
