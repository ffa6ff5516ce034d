"""Without PostgreSQL the service tests skip and say why; under CI=true they fail instead."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"
ONE_PG_TEST = "tests/api/test_jobs.py::test_errors_have_one_shape[postgresql]"


def run_pytest(ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GRADACC_TEST_POSTGRES_URL": UNREACHABLE}
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", ONE_PG_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_database_skips_with_the_reason() -> None:
    result = run_pytest(ci=None)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
    assert "PostgreSQL is not reachable" in result.stdout


def test_a_missing_database_fails_under_ci() -> None:
    result = run_pytest(ci="true")
    assert result.returncode != 0, result.stdout
    assert "under CI=true a missing service is a failure" in result.stdout
