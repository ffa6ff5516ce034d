"""DELETE right after cancel, on the embedded stack: a job stays undeletable (409 job_busy) until
its worker has let go of it, so the worker never writes to a job that is gone. Before that rule a
worker finishing a just-deleted job raised a foreign-key IntegrityError (6 tracebacks in 12
cancel-then-DELETE pairs, found by the fuzzer). Each job is held at step 1, so the cancel always
meets a running job."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import TINY
from tests.e2e.conftest import NO_PREDICT, embedded_serve
from tests.support import Hold, wait_until

pytestmark = pytest.mark.integration
PAIRS = 6


def test_cancel_then_delete_at_once_never_breaks_the_worker(tmp_path: Path) -> None:
    hold = Hold(tmp_path / "hold", 1, armed=False)
    env = hold.env() | NO_PREDICT
    with embedded_serve(tmp_path, env=env) as (url, log), httpx.Client(base_url=url) as api:
        answers: list[int] = []
        for _ in range(PAIRS):
            hold.arm()
            job_id = api.post("/v1/jobs", json=TINY).json()["id"]
            hold.held(timeout=120)
            assert api.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
            first = api.delete(f"/v1/jobs/{job_id}")  # at once: its worker is still stopping it
            answers.append(first.status_code)
            if first.status_code != 200:
                assert first.status_code == 409, first.json()
                assert first.json()["error"]["code"] == "job_busy", first.json()
                assert "worker is still stopping" in first.json()["error"]["message"]

                def deleted(job: str = job_id) -> bool:
                    return api.delete(f"/v1/jobs/{job}").status_code == 200

                wait_until(deleted, timeout=60, what=f"DELETE of {job_id}", every=0.2)
            assert api.get(f"/v1/jobs/{job_id}").status_code == 404
        hold.release()
    # A DELETE succeeds only once the worker let go, after its last write: nothing can follow.
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "IntegrityError" not in text, text[-4000:]
    assert 409 in answers, answers  # the rule was exercised, not just raced past
    print(f"first DELETE answers: {answers}")
