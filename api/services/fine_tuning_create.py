"""POST /v1/fine_tuning/jobs: an OpenAI fine-tuning body becomes a gradacc job spec (one job
table, one validation), with the "auto" hyperparameters resolved by the rules in docs/openai.md.
Errors name OpenAI's fields (``training_file``, ``hyperparameters.batch_size``), not the spec's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from celery import Celery
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.schemas.jobs import JobCreate
from api.schemas.openai import FineTuningJobCreate
from api.schemas.openai_hyperparameters import (
    DpoHyperparameters,
    Hyperparameters,
    ReinforcementHyperparameters,
)
from api.services import fine_tuning_reinforcement as reinforcement
from api.services import jobs as job_services
from api.services.files import get_file
from gradacc.errors import FileNotFound, InvalidRequest
from gradacc.openai.names import OPENAI_FIELDS, openai_param
from gradacc.settings import Settings
from gradacc.tables import FilePurpose, Job
from trainer_core.spec.batching import micro_batch_for
from trainer_core.spec.dpo import PreferenceFields
from trainer_core.spec.job import JobSpec

DEFAULTS: dict[str, Any] = {  # a fine-tuning job's defaults where the spec's differ
    "task": "causal-lm",
    "save_strategy": "epoch",
    "save_total_limit": 3,  # as OpenAI: the last three epochs' checkpoints
    # As OpenAI: every row trains whole, or the job fails naming it (the length is the model's
    # context, capped by GRADACC_MAX_SEQ_LENGTH: the core caps it at the tokenizer's own), and
    # nothing is held out of the training file (no validation_file: no evaluation).
    "overlong_rows": "refuse",
    "validation_split_percentage": 0,
}
BASE_LEARNING_RATE = JobSpec.model_fields["learning_rate"].default
DEFAULT_SEED = JobSpec.model_fields["seed"].default
DEFAULT_BETA = PreferenceFields.model_fields["dpo_beta"].default  # 0.1, as TRL's
MAX_SEQ_LENGTH = Settings.model_fields["max_seq_length"].default
TRAINING_FILE_PURPOSES = (FilePurpose.FINE_TUNE, FilePurpose.DATASET)
COMMON = ("n_epochs", "batch_size", "learning_rate_multiplier")  # the job object's hyperparameters
METHOD_WORD = "method reinforcement"


def auto_epochs(rows: int) -> int:
    """OpenAI's rule: 3 epochs, raised so a small file gets about 100 examples' worth of steps
    (at most 25 epochs), lowered so a large one stays near 25 000 examples (at least 1)."""
    if rows * 3 < 100:
        return min(25, math.ceil(100 / max(rows, 1)))
    if rows * 3 > 25_000:
        return max(1, 25_000 // rows)
    return 3


def auto_batch_size(rows: int) -> int:
    """About 0.2 % of the rows, from 1 to 256."""
    return max(1, min(256, round(0.002 * rows)))


def resolve(chosen: Hyperparameters, rows: int) -> dict[str, Any]:
    """The numbers "auto" stands for; a dpo job's rows are pairs, and its ``beta`` is 0.1."""
    epochs = chosen.n_epochs
    batch = chosen.batch_size
    multiplier = chosen.learning_rate_multiplier
    resolved: dict[str, Any] = {
        "n_epochs": auto_epochs(rows) if epochs == "auto" else epochs,
        "batch_size": auto_batch_size(rows) if batch == "auto" else batch,
        "learning_rate_multiplier": 1.0 if multiplier == "auto" else float(multiplier),
    }
    if isinstance(chosen, DpoHyperparameters):
        resolved["beta"] = DEFAULT_BETA if chosen.beta == "auto" else float(chosen.beta)
    return resolved


def method_of(body: FineTuningJobCreate, resolved: dict[str, Any]) -> dict[str, Any]:
    """The job object's ``method``, as OpenAI echoes it: the type and its resolved values."""
    kind = body.method_type
    return {"type": kind, kind: {"hyperparameters": resolved}}


@dataclass(frozen=True)
class Translated:
    """The body's method as the spec takes it: the values "auto" resolved to (echoed in the job
    object's ``method``), the method's spec fields, and the effective batch in the spec's unit
    (rows, pairs, or a reinforcement job's completions)."""

    resolved: dict[str, Any]
    method: dict[str, Any]
    fields: dict[str, Any]
    batch: int


def translate(body: FineTuningJobCreate, rows: int, valid_rows: int) -> Translated:
    chosen = body.chosen_hyperparameters()
    common = resolve(chosen, rows)
    if isinstance(chosen, ReinforcementHyperparameters):
        grader = reinforcement.parsed_grader(body)
        resolved = reinforcement.resolve(chosen, common, rows, valid_rows)
        fields, batch = reinforcement.grpo_fields(body, resolved, grader)
        return Translated(resolved, reinforcement.method_echo(body, resolved), fields, batch)
    return Translated(common, method_of(body, common), _fields(body, common), common["batch_size"])


def _fields(body: FineTuningJobCreate, resolved: dict[str, Any]) -> dict[str, Any]:
    """A supervised or dpo job's method fields in the spec."""
    return {"method": "dpo", "dpo_beta": resolved["beta"]} if body.method_type == "dpo" else {}


def create(
    session: Session,
    *,
    body: FineTuningJobCreate,
    tenant: str,
    idempotency_key: str | None,
    celery: Celery,
    settings: Settings,
) -> Job:
    rows, valid_rows = _file_rows(session, body, tenant=tenant)
    translated = translate(body, rows, valid_rows)
    resolved = translated.resolved
    spec = _job_create(
        body, resolved, translated=translated, max_seq_length=settings.max_seq_length
    )
    seed = spec.seed
    fine_tuning = {
        "suffix": body.suffix,
        "metadata": body.metadata,
        "training_file": body.training_file,
        "validation_file": body.validation_file,
        # OpenAI's job object keeps the three common ones here; the method's own (beta,
        # compute_multiplier, ...) are in method.<type>.hyperparameters.
        "hyperparameters": {k: resolved[k] for k in COMMON},
        "method": translated.method,
        "seed": seed,
    }
    try:
        job, _ = job_services.create_job(
            session,
            spec=spec,
            tenant=tenant,
            idempotency_key=idempotency_key,
            celery=celery,
            settings=settings,
            fine_tuning=fine_tuning,
        )
    except InvalidRequest as exc:
        raise _renamed(exc, body.method_type) from None
    return job


def _file_rows(session: Session, body: FineTuningJobCreate, *, tenant: str) -> tuple[int, int]:
    """The training and validation files' rows (for the "auto" rules); 400 naming the field for
    a file that is not there, not the tenant's, or not a dataset, and for a reinforcement job
    without a validation file (OpenAI requires one: its evaluations sample it)."""
    if body.method_type == "reinforcement" and body.validation_file is None:
        raise InvalidRequest(
            "method reinforcement needs a validation file of prompts: its "
            "evaluations sample and grade them",
            param="validation_file",
        )
    rows = {"training_file": 0, "validation_file": 0}
    for field in ("training_file", "validation_file"):
        file_id = getattr(body, field)
        if file_id is None:
            continue
        try:
            file = get_file(session, file_id=file_id, tenant=tenant)
        except FileNotFound:
            raise InvalidRequest(f"no file with id {file_id!r}", param=field) from None
        if file.purpose not in TRAINING_FILE_PURPOSES:
            message = f"{file_id} was uploaded as {file.purpose}; upload it with purpose fine-tune"
            raise InvalidRequest(message, param=field)
        rows[field] = int(file.details.get("rows") or 0)
    return rows["training_file"], rows["validation_file"]


def _job_create(
    body: FineTuningJobCreate,
    resolved: dict[str, Any],
    *,
    translated: Translated | None = None,
    max_seq_length: int = MAX_SEQ_LENGTH,
) -> JobCreate:
    ours = dict(body.gradacc or {})
    _refuse_body_fields(ours, body.method_type)
    batch = resolved["batch_size"] if translated is None else translated.batch
    base_rate = ours.pop("learning_rate", BASE_LEARNING_RATE)
    spec: dict[str, Any] = {
        **DEFAULTS,
        "max_seq_length": max_seq_length,
        **ours,
        "model": body.model,
        "dataset": body.training_file,
        "num_train_epochs": resolved["n_epochs"],
        "effective_batch_size": batch,
        "seed": DEFAULT_SEED if body.seed is None else body.seed,
    }
    spec |= _fields(body, resolved) if translated is None else translated.fields
    if body.validation_file is not None:
        spec["eval_dataset"] = body.validation_file
    if body.metadata is not None:  # /v1/jobs shows and filters on it too
        spec["metadata"] = body.metadata
    if isinstance(base_rate, int | float) and not isinstance(base_rate, bool):
        spec["learning_rate"] = base_rate * resolved["learning_rate_multiplier"]
    else:
        spec["learning_rate"] = base_rate  # the spec's own check names it
    # The micro-batch follows from batch_size, K and the process count, unless given (then K
    # follows). A K or a count that is no integer is left to the spec's own check, which names it.
    accumulation = ours.get("gradient_accumulation_steps") or 1
    world = ours.get("num_processes") or 1
    usable = all(isinstance(n, int) and n >= 1 for n in (accumulation, world))
    if "per_device_train_batch_size" not in ours and usable:
        try:
            spec["per_device_train_batch_size"] = micro_batch_for(batch, accumulation, world)
        except ValueError as exc:
            message = f"batch_size {exc}"
            raise InvalidRequest(message, param="gradacc.gradient_accumulation_steps") from None
    try:
        return JobCreate.model_validate(spec)
    except ValidationError as exc:
        errors = [_renamed_error(e, body.method_type) for e in exc.errors()]
        raise RequestValidationError(errors) from None


def _refuse_body_fields(ours: dict[str, Any], method: str) -> None:
    """A spec field the fine-tuning body sets (``num_train_epochs``, ``dpo_beta``) is not taken
    from ``gradacc`` too: 400 naming it and the body's field that sets it."""
    taken = sorted(set(ours) & (set(OPENAI_FIELDS) | {"learning_rate_multiplier"}))
    if taken:
        field = taken[0]
        where = openai_param(field, "dpo" if field == "dpo_beta" else method)
        raise InvalidRequest(f"set by {where} in the fine-tuning body", param=f"gradacc.{field}")


def _renamed_error(error: Any, method: str = "supervised") -> dict[str, Any]:
    loc = tuple(error.get("loc", ()))
    head = openai_param(str(loc[0]), method).split(".") if loc else ["gradacc"]
    if loc and loc[0] == "learning_rate":
        head = ["gradacc", "learning_rate"]
    if len(loc) > 1 and loc[0] == "grpo":  # a reinforcement job's: the body sets some of them
        return {
            **error,
            "loc": ("body", *openai_param(f"grpo.{loc[1]}", method).split("."), *loc[2:]),
        }
    return {**error, "loc": ("body", *head, *loc[1:])}


def _renamed(exc: InvalidRequest, method: str = "supervised") -> InvalidRequest:
    if exc.param is None:
        return exc
    param = openai_param(exc.param, method)
    # the spec's method grpo is this API's reinforcement
    message = exc.message.removeprefix(f"{exc.param}: ").replace("method grpo", METHOD_WORD)
    found = getattr(exc, "errors", None)
    return InvalidRequest(message, param=param, errors=found)
