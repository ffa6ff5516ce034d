"""What an item is for the item runner (``worker.consumer.item_runner``): an eval run's item is
sampled from the run's model and graded by the eval's criteria (``gradacc.evals``); a
distillation's is one prompt answered by the teacher (``gradacc.distill``). Both ask models as
the API would for the run's tenant (``gradacc.serving.ask``); a model grader waits while no
server can answer, until the worker stops."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from gradacc import distill, run_items
from gradacc.evals.criteria import TestingCriterion, parse_criteria
from gradacc.evals.grade import grade_item
from gradacc.evals.sources import RunPlan, file_rows, parse_run_source
from gradacc.grading import sandbox_limits
from gradacc.serving.ask import ask, served_chat
from gradacc.settings import Settings
from gradacc.sources.files import local_source, write_jsonl
from gradacc.tables import Distillation, Eval, EvalRun, File, FilePurpose, RunStatus, utcnow
from trainer_core.graders import Grading


class Kind(Protocol):
    name: str
    table: Any

    def rows(self, session: Session, run: Any) -> list[Any]: ...

    def one(self, run: Any, index: int, row: Any) -> tuple[str, dict[str, Any]] | None: ...

    def end(self, session: Session, run: Any, status: RunStatus) -> None: ...


class _Base:
    def __init__(
        self, sessions: sessionmaker[Session], settings: Settings, stop: threading.Event
    ) -> None:
        self.sessions, self.settings, self.stop = sessions, settings, stop

    def _ask(self, tenant: str, body: dict[str, Any]) -> tuple[int, Any]:
        return ask(self.sessions, self.settings, tenant=tenant, path="/chat/completions", body=body)

    def _file_text(self, session: Session, file_id: str, tenant: str) -> str:
        file = session.get(File, file_id)
        if file is None or file.tenant != tenant:
            raise ValueError(f"the file {file_id} is gone")
        path = local_source(self.settings, file)
        return path.read_text(encoding="utf-8", errors="replace")


class EvalKind(_Base):
    """Its run's plan, criteria and grading are read once, when the runner takes the run
    (``rows``), for every item after: the runner does one run at a time."""

    name = "eval run"
    table = EvalRun
    current: tuple[str, RunPlan, list[TestingCriterion], Grading] | None = None

    def rows(self, session: Session, run: EvalRun) -> list[Any]:
        found = session.get(Eval, run.eval_id)
        if found is None:
            raise ValueError(f"the eval {run.eval_id} is gone")
        plan = parse_run_source(run.data_source)
        waiting = partial(lambda stop: not stop.is_set(), self.stop)
        grading = Grading(
            chat=served_chat(self.sessions, self.settings, run.tenant, waiting=waiting),
            limits=sandbox_limits(self.settings),
        )
        self.current = (run.id, plan, parse_criteria(found.testing_criteria), grading)
        if plan.inline is not None:
            return plan.inline
        assert plan.file_id is not None
        return file_rows(self._file_text(session, plan.file_id, run.tenant))

    def one(self, run: EvalRun, index: int, row: Any) -> tuple[str, dict[str, Any]] | None:
        assert self.current is not None and self.current[0] == run.id  # rows() came first
        _, plan, criteria, grading = self.current
        return grade_item(
            plan, criteria, row, index, ask=partial(self._ask, run.tenant), grading=grading
        )

    def end(self, session: Session, run: EvalRun, status: RunStatus) -> None:
        run.status, run.ended_at, run.holder = status, utcnow(), None
        session.commit()


class DistillKind(_Base):
    name = "distillation"
    table = Distillation

    def rows(self, session: Session, run: Distillation) -> list[Any]:
        return distill.parse_prompts(self._file_text(session, run.prompt_file_id, run.tenant))

    def one(self, run: Distillation, index: int, row: Any) -> tuple[str, dict[str, Any]] | None:
        asking = partial(self._ask, run.tenant)
        return distill.answer_row(run.teacher, run.sampling, row, asking)

    def end(self, session: Session, run: Distillation, status: RunStatus) -> None:
        """The training file written from the answers kept (a canceled run's too), then the
        status."""
        kept = [(r.item, r.status, r.record) for r in run_items.kept(session, run.id)]
        rows = distill.training_rows(kept)
        if rows and run.output_file_id is None and status != RunStatus.FAILED:
            # What an upload of these rows records: text conversations, one a line.
            details = {
                "format": "jsonl",
                "rows": len(rows),
                "columns": ["messages"],
                "dataset_format": "messages",
            }
            run.output_file_id = write_jsonl(
                session,
                self.settings,
                tenant=run.tenant,
                name=f"{run.id}.jsonl",
                records=rows,
                purpose=FilePurpose.FINE_TUNE,
                details=details,
            )
        run.status, run.ended_at, run.holder = status, utcnow(), None
        session.commit()


KINDS: tuple[type[EvalKind] | type[DistillKind], ...] = (EvalKind, DistillKind)
