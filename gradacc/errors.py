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


class NoWorkers(NotReady):
    """The database and broker answer, but no worker is alive to run what is accepted."""

    code = "no_workers"


class InvalidRequest(DomainError):
    """A request that parses but is not allowed: over a configured limit, a path outside the roots."""

    code = "invalid_request"

    def __init__(
        self, message: str, *, param: str | None = None, errors: list[str] | None = None
    ) -> None:
        super().__init__(f"{param}: {message}" if param else message)
        self.param = param
        self.errors = errors  # each problem found, when there are several (a file's lines)


class IdempotencyConflict(DomainError):
    code = "idempotency_conflict"
    param = "Idempotency-Key"

    def __init__(self) -> None:
        super().__init__("this Idempotency-Key was already used with a different request body")


class Unauthorized(DomainError):
    code = "unauthorized"
    param = "Authorization"


class TooManyJobs(DomainError):
    """Over a per-tenant job limit; ``param`` names its setting."""

    code = "too_many_jobs"

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(f"{message} ({setting})")
        self.param = setting


class TooManyStreams(DomainError):
    """Over ``GRADACC_MAX_STREAMS_PER_TENANT`` open job streams."""

    code = "too_many_streams"
    param = "GRADACC_MAX_STREAMS_PER_TENANT"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this tenant already has {limit} job streams open (limit {limit}, {self.param}); "
            "close one first"
        )


class StorageQuotaExceeded(DomainError):
    """An upload that would take the tenant past ``GRADACC_MAX_STORAGE_BYTES_PER_TENANT``."""

    code = "storage_quota_exceeded"
    param = "GRADACC_MAX_STORAGE_BYTES_PER_TENANT"

    def __init__(self, *, used: int, adding: int, limit: int) -> None:
        super().__init__(
            f"this tenant stores {used} bytes; this upload ({adding} bytes) would pass the "
            f"limit of {limit} ({self.param}): delete files or jobs first"
        )


class FileNotFound(DomainError):
    code = "file_not_found"
    param = "file_id"

    def __init__(self, file_id: str) -> None:
        super().__init__(f"no file with id {file_id!r}")


class FileInUse(DomainError):
    code = "file_in_use"
    param = "file_id"

    def __init__(self, file_id: str, job_ids: list[str]) -> None:
        shown = ", ".join(job_ids[:5]) + (" …" if len(job_ids) > 5 else "")
        super().__init__(
            f"{file_id} is used by queued or running jobs ({shown}); cancel them first"
        )


class JobActive(DomainError):
    code = "job_active"
    param = "job_id"

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(f"job {job_id} is {status}; cancel it before deleting it")


class JobBusy(DomainError):
    """A finished job whose worker has not let go of it yet (it is still stopping its process)."""

    code = "job_busy"
    param = "job_id"

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(
            f"job {job_id} is {status}, but its worker is still stopping its training process; "
            "retry in a few seconds"
        )


class ArtifactNotFound(DomainError):
    code = "artifact_not_found"
    param = "path"

    def __init__(self, path: str, *, hint: str | None = None) -> None:
        super().__init__(f"the job has no output {path!r}" + (f": {hint}" if hint else ""))


class ModelNotFound(DomainError):
    code = "model_not_found"
    param = "model"

    def __init__(self, model: str, *, hint: str | None = None) -> None:
        super().__init__(f"the model {model!r} does not exist" + (f": {hint}" if hint else ""))


class ResponseNotFound(DomainError):
    """A stored response that is not the tenant's (or was not stored, or was deleted)."""

    code = "not_found"

    def __init__(self, response_id: str, *, param: str = "response_id") -> None:
        super().__init__(f"no response with id {response_id!r} (was it created with store: false?)")
        self.param = param


class BatchNotFound(DomainError):
    code = "not_found"
    param = "batch_id"

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"no batch with id {batch_id!r}")


class ObjectNotFound(DomainError):
    """An eval, an eval run, an output item or a distillation that is not the tenant's."""

    code = "not_found"

    def __init__(self, kind: str, object_id: str, *, param: str) -> None:
        super().__init__(f"no {kind} with id {object_id!r}")
        self.param = param


class NotAllowed(DomainError):
    """Something that exists but this request may not change (a base model's deletion)."""

    code = "permission_denied"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class NotTrained(DomainError):
    """A job whose model cannot answer yet: it has not succeeded (a checkpoint can, if named)."""

    code = "job_not_succeeded"
    param = "job_id"


class PredictionFailed(DomainError):
    """The worker's predict server could not answer (the model would not load or run)."""

    code = "prediction_failed"


class PredictionTimeout(DomainError):
    """No worker answered within ``GRADACC_SERVE_TIMEOUT_S``."""

    code = "prediction_timeout"


class TooManyPredictions(DomainError):
    """Over ``GRADACC_MAX_PREDICTS_PER_TENANT`` predict requests waiting at once."""

    code = "too_many_predictions"
    param = "GRADACC_MAX_PREDICTS_PER_TENANT"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this tenant already has {limit} predict requests waiting (limit {limit}, "
            f"{self.param}); retry when one is answered"
        )


class OverShare(DomainError):
    """Over a tenant's share (or the API process's) of something that runs now: grader runs,
    chat requests and their tokens, previews. ``param`` names the setting; ``code`` says what."""

    def __init__(self, message: str, *, code: str, setting: str) -> None:
        super().__init__(f"{message} ({setting}); retry when one ends")
        self.code = code
        self.param = setting
