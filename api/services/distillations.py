"""/v1/distillations: made on the tenant's prompt file (every row checked first: a bad one is a
400 naming its line, and nothing is made), queued for the workers' item runners, read back with
its progress and the teacher's tokens so far, listed, canceled (its answers so far written)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.distillations import (
    DistillationCreate,
    DistillationObject,
    Progress,
    TokenUsage,
)
from gradacc import distill, leases, run_items
from gradacc.errors import InvalidRequest, ObjectNotFound
from gradacc.ids import time_ordered_id
from gradacc.serving.ask import checked_target
from gradacc.settings import Settings
from gradacc.sources.files import local_source
from gradacc.tables import Distillation, File, FilePurpose, RunStatus

PROMPT_FILES = (FilePurpose.FINE_TUNE, FilePurpose.EVALS)


def view(session: Session, found: Distillation) -> DistillationObject:
    kept = [(r.item, r.status, r.record) for r in run_items.kept(session, found.id)]
    errors = distill.row_errors(kept)
    return DistillationObject(
        id=found.id,
        teacher=found.teacher,
        prompt_file=found.prompt_file_id,
        sampling=found.sampling,
        status=found.status,
        progress=Progress(total=found.total, done=len(kept), failed=len(errors)),
        usage=TokenUsage(**distill.usage_of(r for _, _, r in kept)),
        output_file_id=found.output_file_id,
        row_errors=errors,
        error=found.error,
        created_at=int(found.created_at.timestamp()),
        ended_at=int(found.ended_at.timestamp()) if found.ended_at else None,
        metadata=found.metadata_,
    )


def create(
    session: Session, settings: Settings, body: DistillationCreate, tenant: str
) -> DistillationObject:
    checked_target(session, settings, model=body.teacher, tenant=tenant, param="teacher")
    try:
        sampling = distill.check_sampling(body.sampling)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="sampling") from None
    file = session.get(File, body.prompt_file)
    if file is None or file.tenant != tenant:
        raise ObjectNotFound("file", body.prompt_file, param="prompt_file")
    if file.purpose not in PROMPT_FILES:
        raise InvalidRequest(
            f"{file.id} has purpose {file.purpose!r}; prompts are a 'fine-tune' or 'evals' file",
            param="prompt_file",
        )
    text = local_source(settings, file).read_text(encoding="utf-8", errors="replace")
    try:
        prompts = distill.parse_prompts(text)
    except ValueError as exc:
        raise InvalidRequest(f"{file.id}: {exc}", param="prompt_file") from None
    found = Distillation(
        id=time_ordered_id("distill_"),
        tenant=tenant,
        teacher=body.teacher,
        prompt_file_id=file.id,
        sampling=sampling,
        status=RunStatus.QUEUED,
        total=len(prompts),
        metadata_=body.metadata,
    )
    session.add(found)
    session.commit()
    return view(session, found)


def get(session: Session, distillation_id: str, tenant: str) -> Distillation:
    found = session.get(Distillation, distillation_id)
    if found is None or found.tenant != tenant:
        raise ObjectNotFound("distillation", distillation_id, param="distillation_id")
    return found


def cancel(session: Session, distillation_id: str, tenant: str) -> DistillationObject:
    """A queued one no worker holds ends now (no file); a running one at its next row, its
    answers so far written as its training file."""
    found = get(session, distillation_id, tenant)
    leases.cancel(
        session, Distillation, found.id, running=(RunStatus.QUEUED, RunStatus.IN_PROGRESS)
    )
    session.refresh(found)
    return view(session, found)


def list_all(
    session: Session, tenant: str, *, after: str | None, limit: int
) -> tuple[list[DistillationObject], bool]:
    query = select(Distillation).where(Distillation.tenant == tenant)
    if after is not None:
        query = query.where(Distillation.id < after)
    found = list(session.scalars(query.order_by(Distillation.id.desc()).limit(limit + 1)))
    return [view(session, d) for d in found[:limit]], len(found) > limit
