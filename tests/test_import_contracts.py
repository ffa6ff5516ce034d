"""The layer contracts can fail: a copy of the packages with one wrong import planted breaks the
contract it should (``make lint`` runs the same ``lint-imports`` on the real tree)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("trainer_core", "gradacc", "api", "worker", "commands")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_with(tmp_path: Path, plant: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for path, line in plant.items():
        target = tmp_path / path
        if target.exists():
            target.write_text(target.read_text() + f"\n{line}  # planted\n")
        else:
            target.write_text(f'"""planted"""\n{line}\n')
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, text=True,
                          capture_output=True, env={"PYTHONPATH": str(tmp_path)})  # fmt: skip


@pytest.mark.parametrize(
    ("plant", "broken"),
    [
        (
            {"api/schemas/jobs.py": "import trainer_core.data.plan"},
            "api is not allowed to import trainer_core.data",
        ),
        # a module of the core that no contract names yet is out of reach all the same
        (
            {
                "trainer_core/planted.py": "",
                "gradacc/jobs/states.py": "import trainer_core.planted",
            },
            "gradacc is not allowed to import trainer_core.planted",
        ),
        (
            {"trainer_core/spec/job.py": "import torch"},
            "trainer_core.spec is not allowed to import torch",
        ),
        (
            {"trainer_core/data/plan.py": "import trainer_core.loop.run"},
            "trainer_core.data is not allowed to import trainer_core.loop",
        ),
        (
            {"worker/child/training.py": "import celery"},
            "worker.child is not allowed to import celery",
        ),
        # the API by layer: what wraps every request knows no use case, a use case no route
        (
            {"api/http/openapi.py": "import api.services.jobs"},
            "api.http is not allowed to import api.services",
        ),
        (
            {"api/services/files.py": "import api.routes.files"},
            "api.services is not allowed to import api.routes",
        ),
        # the graders are the core's and torch-free, and nothing below GRPO's driver reaches up
        (
            {"trainer_core/graders/run.py": "import torch"},
            "trainer_core.graders is not allowed to import torch",
        ),
        (
            {"trainer_core/graders/sandbox.py": "import trainer_core.loop.run"},
            "trainer_core.graders is not allowed to import trainer_core.loop",
        ),
        (
            {"trainer_core/loop/objectives/grpo.py": "import trainer_core.grpo.windows"},
            "trainer_core.loop is not allowed to import trainer_core.grpo",
        ),
        # torchrun's processes are their own room: the child's outcome does not reach into them
        (
            {"worker/child/outcome.py": "import worker.child.ranks.launcher"},
            "No cycles are allowed in worker.child.",
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(
    tmp_path: Path, plant: dict[str, str], broken: str
) -> None:
    result = lint_with(tmp_path, plant)
    assert result.returncode != 0 and broken in result.stdout, result.stdout[-3000:]


def test_the_copy_itself_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_with(tmp_path, {})
    assert result.returncode == 0 and "0 broken" in result.stdout, result.stdout[-3000:]
