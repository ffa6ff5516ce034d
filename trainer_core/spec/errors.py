"""Errors the core raises for problems with the job itself (not bugs): the caller reports them."""

from __future__ import annotations


class JobError(Exception):
    """A job that cannot run as specified. ``code`` is machine-readable; ``param`` names the field.

    ``retryable`` is False: running the same spec again fails the same way.
    """

    code = "job_error"
    retryable = False

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class DatasetError(JobError):
    code = "invalid_dataset"


class ModelError(JobError):
    code = "invalid_model"


class OutOfMemory(JobError):
    """The job does not fit the device at this micro-batch size: lower it and raise K."""

    code = "out_of_memory"
