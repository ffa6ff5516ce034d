"""One door for a job's status: no module but the state machine (``gradacc/jobs/states.py``)
writes ``jobs.status``. The check reads every product module's syntax tree, like the import
contracts, and is shown to fail on planted writers of each shape it knows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PRODUCT = ("api", "gradacc", "worker", "commands", "trainer_core")
THE_DOOR = "gradacc/jobs/states.py"


def _is_job_statement(node: ast.expr, names: set[str]) -> bool:
    """``update(Job)`` / ``insert(Job)`` (or a dialect's ``insert``) at the root of a chain, or a
    name that such a chain was assigned to (``names``)."""
    while True:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in {"update", "insert"} and node.args:
                first = node.args[0]
                return isinstance(first, ast.Name) and first.id == "Job"
            node = func
        elif isinstance(node, ast.Attribute):
            node = node.value
        else:
            return False


def _writes_status(call: ast.Call) -> bool:
    named = any(kw.arg == "status" for kw in call.keywords)
    spread = [kw.value for kw in call.keywords if kw.arg is None]
    spread_status = any(
        isinstance(value, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "status" for k in value.keys)
        for value in spread
    )
    return named or spread_status


def status_writes(source: str) -> list[int]:
    """Lines of ``source`` that write a job's status."""
    found, tree, names = [], ast.parse(source), set()
    for _ in range(2):  # a statement built in steps: stmt = update(Job)...; stmt = stmt.where(...)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _is_job_statement(node.value, names):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "Job" and _writes_status(node):
                found.append(node.lineno)  # a row built with its status
            if isinstance(func, ast.Attribute) and func.attr in {"values", "ordered_values"}:
                positional = any(_dict_has_status(arg) for arg in node.args)
                if _is_job_statement(func.value, names) and (_writes_status(node) or positional):
                    found.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "status":
                    found.append(node.lineno)  # job.status = ... on an ORM object
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = " ".join(node.value.lower().split())
            if "update jobs" in text and "status" in text:
                found.append(node.lineno)  # raw SQL
    return found


def _dict_has_status(node: ast.expr) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "status" for k in node.keys
    )


def writers_in(root: Path) -> dict[str, list[int]]:
    writers = {}
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            lines = status_writes(path.read_text())
            if lines and relative != THE_DOOR:
                writers[relative] = lines
    return writers


def test_only_the_state_machine_writes_a_jobs_status() -> None:
    assert writers_in(ROOT) == {}


def test_the_state_machine_itself_is_seen_writing() -> None:
    """The check finds the writes it allows: it reads the shapes the door really uses."""
    assert len(status_writes((ROOT / THE_DOOR).read_text())) >= 3


PLANTED = {
    "an UPDATE by hand": "stmt = update(Job).where(Job.id == x).values(status='queued')",
    "a statement built in steps": "s = update(Job); s = s.where(c); s.values(status='queued')",
    "a chained UPDATE": "session.execute(update(Job).where(a).where(b).values(status=S, pid=None))",
    "values from a dict": "update(Job).values(**{'status': 'failed'})",
    "a positional dict": "update(Job).values({'status': 'failed'})",
    "a dialect insert": "postgresql.insert(Job).values(id=i, status='queued')",
    "a row built with it": "job = Job(id=new_id, tenant=t, status='running')",
    "an ORM attribute": "job.status = JobStatus.CANCELLED",
    "raw SQL": "session.execute(text('UPDATE jobs SET status = :s WHERE id = :i'))",
}


@pytest.mark.parametrize("line", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_writer_is_found(tmp_path: Path, line: str) -> None:
    for package in PRODUCT:
        (tmp_path / package).mkdir()
    (tmp_path / "worker" / "planted.py").write_text(f"def f():\n    {line}\n")
    assert writers_in(tmp_path) == {"worker/planted.py": [2]}


def test_other_tables_status_is_not_a_jobs_status() -> None:
    source = "update(Prediction).values(status='answered')\nWebhookDelivery(status='pending')"
    assert status_writes(source) == []
