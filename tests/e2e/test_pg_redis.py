"""End to end on PostgreSQL and Redis with a real Celery worker process and real tiny models. The
tests that only run jobs share one worker (its start-up is most of their cost); those that kill
or stop a worker start their own."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gradacc.scheduling.queue import create_celery_app, enqueue_job
from gradacc.settings import Settings
from tests.conftest import TINY
from tests.e2e.conftest import StartWorker, WorkerProcess, process_gone
from tests.support import Hold, event_kinds, wait_final, wait_for, wait_until

# Starts real worker processes and trains real (tiny) models.
pytestmark = pytest.mark.integration


@pytest.fixture(scope="class")
def shared(pg_redis_settings: Settings) -> Iterator[tuple[WorkerProcess, Hold]]:
    """One worker for the tests of a class that only run jobs, with a hold at step 1 that a test
    arms when it needs a job running: the worker and the hold. Stopped at the class's end: the
    tests after it start (and kill) their own workers, which must be alone on the queue."""
    hold = Hold(pg_redis_settings.home / "shared-hold", 1, armed=False)
    worker = WorkerProcess(pg_redis_settings, "shared", hold.env())
    yield worker, hold
    worker.stop()


class TestOnOneSharedWorker:
    """Jobs that only need a worker to run them: one worker for the class (``shared``)."""

    def test_every_backend_trains_and_reports_metrics(
        self, api: TestClient, shared: tuple[WorkerProcess, Hold]
    ) -> None:
        specs = [{**TINY, "backend": backend} for backend in ("pytorch", "accelerate", "trainer")]
        specs.append(
            {
                **TINY,
                "model": "builtin:tiny-gpt2",
                "dataset": "builtin:tiny-stories",
                "task": "causal-lm",
                "max_train_samples": 32,
                "max_eval_samples": 16,
            }
        )
        ids = [api.post("/v1/jobs", json=spec).json()["id"] for spec in specs]
        worker, _ = shared
        for job_id, spec in zip(ids, specs, strict=True):
            job = wait_final(api, job_id, timeout=120)
            assert job["status"] == "succeeded", (job, worker.log())
            assert job["progress"]["step"] == job["progress"]["total_steps"] > 0
            metrics = api.get(f"/v1/jobs/{job_id}/metrics").json()["data"]
            assert [m["epoch"] for m in metrics] == [1]
            quality = "eval_perplexity" if spec["task"] == "causal-lm" else "eval_accuracy"
            for field in (
                "train_loss",
                "eval_loss",
                quality,
                "learning_rate",
                "samples_per_second",
            ):
                assert isinstance(metrics[0][field], float), (field, metrics[0])
            assert job["metrics"] == metrics[-1]
            kinds = event_kinds(api, job_id)
            assert kinds[:3] == ["queued", "started", "training"]
            assert "epoch" in kinds and kinds[-1] in ("succeeded", "stopped")

    def test_a_failing_job_says_why_and_a_redelivery_does_not_rerun_it(
        self, api: TestClient, shared: tuple[WorkerProcess, Hold], pg_redis_settings: Settings
    ) -> None:
        # Inside the data root and present (a missing file is refused at POST), but without the
        # text column: only the training process, reading it, can tell.
        broken = pg_redis_settings.resolved_data_roots()[0] / "reviews.csv"
        broken.parent.mkdir(parents=True, exist_ok=True)
        broken.write_text("review,label\nnice film,1\nbad film,0\n" * 4)
        missing = str(broken)
        worker, _ = shared
        seen = len(worker.log_path.read_bytes())  # the shared worker's lines before this test's
        job_id = api.post("/v1/jobs", json={**TINY, "dataset": missing}).json()["id"]
        job = wait_final(api, job_id)
        assert job["status"] == "failed", worker.log()
        assert job["error"]["code"] == "invalid_dataset"
        assert "text_column" in job["error"]["message"] and "'text'" in job["error"]["message"]
        assert "GRADACC_" not in job["error"]["message"]
        # Deliver the same job again; a later job on the same one-job worker proves it was handled.
        enqueue_job(create_celery_app(pg_redis_settings), pg_redis_settings, job_id)
        later = api.post("/v1/jobs", json={**TINY, "dataset": missing}).json()["id"]
        wait_final(api, later)
        assert event_kinds(api, job_id).count("started") == 1
        assert api.get(f"/v1/jobs/{job_id}").json()["attempts"] == 1
        # Two messages, two jobs, one run each: whichever message comes second claims nothing. It
        # may be read after ``later`` ended (messages are interchangeable: the first one may have
        # claimed ``later``), so wait for its line rather than read the log at once. (A ``later``
        # committed between the first message's claim and its settling is claimed on a second look,
        # not marked throttled: tests/worker/test_claiming.py.)
        wait_until(lambda: b"not claimable" in worker.log_path.read_bytes()[seen:], timeout=120,
                   what="the spare message")  # fmt: skip
        assert "throttled" not in event_kinds(api, later)

    def test_cancel_stops_a_running_job_and_frees_its_process(
        self, api: TestClient, shared: tuple[WorkerProcess, Hold]
    ) -> None:
        _, hold = shared
        hold.arm()  # running, and held there: no race
        job_id = api.post("/v1/jobs", json=TINY).json()["id"]
        pid = hold.held(timeout=180)
        cancelled = api.post(f"/v1/jobs/{job_id}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        # Stopped by the worker (seconds: its status poll, then SIGTERM and the kill grace), not
        # by the job running out; a bound for a loaded machine, not a timing.
        assert process_gone(pid, timeout=30), "the training process outlived its cancel"
        wait_for(api, job_id, lambda _: "stopped" in event_kinds(api, job_id), timeout=10)
        assert api.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
        hold.release()


def test_a_worker_killed_mid_queue_still_runs_every_job_once(
    api: TestClient, start_worker: StartWorker, pg_redis_settings: Settings
) -> None:
    # The first job is held at step 1, so the crash lands mid-training on any machine.
    first = {**TINY, "num_train_epochs": 2}
    specs = [first, {**TINY, "seed": 2}, {**TINY, "seed": 3}]
    ids = [api.post("/v1/jobs", json=spec).json()["id"] for spec in specs]
    hold = Hold(pg_redis_settings.home / "crash", 1)
    crashed = start_worker("crashing", hold.env())
    orphan = hold.held(timeout=180)
    crashed.kill()
    # The orphaned training process notices its worker is gone, keeps a checkpoint and exits.
    assert process_gone(orphan, timeout=20), "the training process outlived its worker"
    hold.release()
    replacement = start_worker("replacement")
    jobs = [wait_final(api, job_id, timeout=120) for job_id in ids]
    assert [job["status"] for job in jobs] == ["succeeded"] * 3, replacement.log()
    first_events = api.get(f"/v1/jobs/{ids[0]}/events").json()["data"]
    assert [job["attempts"] for job in jobs] == [2, 1, 1], [
        (e["kind"], e["message"]) for e in first_events
    ]
    for job_id in ids[1:]:
        assert event_kinds(api, job_id).count("started") == 1
    assert "requeued" in event_kinds(api, ids[0])
    messages = [e["message"] for e in api.get(f"/v1/jobs/{ids[0]}/events").json()["data"]]
    assert any("resumed at step" in m for m in messages), messages
    metrics = api.get(f"/v1/jobs/{ids[0]}/metrics").json()["data"]
    assert [m["epoch"] for m in metrics] == list(range(1, first["num_train_epochs"] + 1))


def test_a_stopping_worker_preempts_its_job_and_another_resumes_it(
    api: TestClient, start_worker: StartWorker, pg_redis_settings: Settings
) -> None:
    spec = {**TINY, "num_train_epochs": 3}  # 12 steps
    job_id = api.post("/v1/jobs", json=spec).json()["id"]
    hold = Hold(pg_redis_settings.home / "stopping", 5)
    stopping = start_worker("stopping", hold.env())
    hold.held(timeout=180)
    stopping.process.send_signal(signal.SIGTERM)  # docker stop: warm shutdown
    assert stopping.process.wait(timeout=30) == 0, "the worker held its shutdown for the job"
    assert "preempted" in event_kinds(api, job_id)
    assert api.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
    hold.release()
    start_worker("resuming")
    job = wait_final(api, job_id, timeout=90)
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    messages = [e["message"] for e in api.get(f"/v1/jobs/{job_id}/events").json()["data"]]
    assert any("resumed at step 5" in m for m in messages), messages
