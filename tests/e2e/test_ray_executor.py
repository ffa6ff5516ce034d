"""The ``ray`` executor on a real Ray cluster of this machine (``tests/e2e/ray_cluster.py``: a head
that only schedules and two one-CPU nodes, each a raylet of its own), started once for the module,
with one gradacc worker (``GRADACC_EXECUTOR=ray``) as its driver, on PostgreSQL + Redis.

A job of W=2 over M=2 machines gets a ``STRICT_SPREAD`` placement group of two bundles, one per
node, and runs torchrun on each, meeting at bundle 0's node; it ends equal to one process at 2K.
A node whose raylet is killed mid-run is seen through Ray, and the job restarts from its
checkpoint and ends equal to the uninterrupted run. A cancel leaves no task, placement group or
process; a pause (the preemption path) leaves none while it waits, and the resumed job ends equal
to the uninterrupted run; 3 machines on this 2-node cluster is a 422 naming ``num_machines``. A
Tinker session's host job runs on a node too, and ends after its linger. The
same job under ``local`` (a gang of two workers, machines m1 and m2) ends with the Ray run's
weights, on this stack and on the embedded one (SQLite and the filesystem broker: a driver of the
same cluster on that stack; a job's nodes get its driver's settings), where a job that the
cluster has no room for is first queued again, no attempt counted, until a node is free.
``bench/executor_start.py`` times both executors.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.db import session_scope
from gradacc.settings import Settings
from gradacc.tables import Job
from gradacc.tinker.tables import TinkerSession
from tests.e2e.conftest import NO_PREDICT, StartWorker, WorkerProcess
from tests.e2e.ray_cluster import RayCluster, block_node, placement_groups, unblock
from tests.e2e.test_gang import GANG, REFERENCE, machine, messages, registered
from tests.support import Hold, checkpoint_at, event_kinds, wait_final, wait_until
from tests.trainer_core.helpers import (
    Weights,
    final_weights,
    initial_weights,
    max_abs_diff,
    run,
    tolerance,
)
from tests.trainer_core.test_tinker_host import _data
from tests.worker.test_tinker_host import _window_body
from trainer_core.spec.job import JobSpec
from trainer_core.testing.failpoints import TINKER_STAY
from worker.consumer.executors.ray_node import SECRETS_FILE

# A hang guard of 600 s, not the suite's 300: each test runs one or two Ray jobs of two nodes (the
# gang test two and a node's loss, the pause and the embedded tests two each). As two suites at
# once on two cores, the gang test took 253-287 s and the pause test 297-300 s (once past 300 s);
# their waits are conditions with their own bounds.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# Two epochs (three until 2026-12-05: the third added steps, not a case): every hold below is
# in epoch 2, after epoch 1's checkpoint, with steps left for the resumed run to train.
LONG = {**GANG, "num_train_epochs": 2}  # W=2 over M=2, 4 steps an epoch, a checkpoint each
LONG_REFERENCE = {**REFERENCE, "num_train_epochs": 2}  # one process at 2K, trained here
HELD_AT = 6  # in epoch 2, after epoch 1's checkpoint (step 4)


# Secrets the driver holds that no node needs: they must reach no node process.
UNNEEDED = {"GRADACC_SERVE_TOKEN": "serve-token-not-for-nodes",
            "GRADACC_METRICS_TOKEN": "metrics-token-not-for-nodes"}  # fmt: skip


def driver_env(cluster: RayCluster) -> dict[str, str]:
    """A gradacc worker as the cluster's driver."""
    return {"GRADACC_EXECUTOR": "ray", "GRADACC_RAY_ADDRESS": cluster.address,
            "GRADACC_GANG_WAIT_S": "30"}  # fmt: skip


def asking_ray(settings: Settings, cluster: RayCluster) -> Settings:
    """``settings`` of an API that asks the cluster at POST (``driver_env``'s, API side)."""
    ray = {"executor": "ray", "ray_address": cluster.address, "gang_wait_s": 30.0}
    return settings.model_copy(update=ray)


@dataclass
class Stack:
    """The cluster, its driver (a worker), an API that asks the cluster at POST, the hold."""

    cluster: RayCluster
    worker: WorkerProcess
    api: TestClient
    settings: Settings
    hold: Hold


@pytest.fixture(scope="module")
def stack(pg_redis_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    hold = Hold(tmp_path_factory.mktemp("ray") / "hold", HELD_AT, armed=False)
    # No gradacc settings on the nodes: a job's node processes get the driver's (the hold too).
    cluster = RayCluster({**os.environ, "HF_HUB_OFFLINE": "1"})
    settings = asking_ray(pg_redis_settings, cluster)
    # A Tinker host job's linger and its test's hold (failpoints), reaching its node.
    linger = {"GRADACC_TINKER_HOST_LINGER_S": "3", TINKER_STAY: str(tinker_stay(hold))}
    worker = WorkerProcess(
        settings, "ray-driver", driver_env(cluster) | hold.env() | UNNEEDED | linger
    )
    try:
        cluster.start()
        with TestClient(create_app(settings)) as api:
            yield Stack(cluster, worker, api, settings, hold)
    finally:
        worker.stop()
        cluster.stop()
        assert not cluster.processes(), "a process of the Ray cluster outlived it"


@dataclass
class Clean:
    """The uninterrupted W=2 over M=2 Ray run, and one process at 2K trained here."""

    job_id: str
    weights: Weights
    reference: Weights
    bound: float  # today's tolerance (``tolerance``) for the reference's run


@pytest.fixture(scope="module")
def clean(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Clean:
    """The reference is trained by the core in this process while the cluster runs the gang
    (rather than as a Ray job of its own)."""
    job_id = stack.api.post("/v1/jobs", json=LONG).json()["id"]
    reference = JobSpec.model_validate(LONG_REFERENCE)
    folder = tmp_path_factory.mktemp("reference")
    run(reference, folder)
    succeeded(stack.api, job_id, stack.worker)
    weights = final_weights(folder)
    bound = tolerance(initial_weights(reference), weights)
    return Clean(job_id, final_weights(stack.settings.jobs_dir / job_id), weights, bound)


def succeeded(api: TestClient, job_id: str, *workers: WorkerProcess) -> dict[str, object]:
    job = wait_final(api, job_id, timeout=240)
    assert job["status"] == "succeeded", (job, [worker.log() for worker in workers])
    return job


def job_processes(stack: Stack, job_id: str) -> list[psutil.Process]:
    """The job's node launchers, torchrun agents and ranks, on any node of the cluster."""
    return [p for p in stack.cluster.processes() if job_id in _cmdline(p)]


def node_tasks(stack: Stack) -> list[psutil.Process]:
    """Ray workers running a node task now (a worker's title names its task: ``ray::run_node``;
    an idle one is ``ray::IDLE``)."""
    return [p for p in stack.cluster.processes() if _cmdline(p).startswith("ray::run_node")]


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return ""


def test_more_machines_than_the_cluster_has_is_refused_at_post(stack: Stack) -> None:
    """Asked of Ray (its live nodes), not of the workers table: 3 machines on 2 nodes."""
    response = stack.api.post("/v1/jobs", json={**GANG, "num_processes": 3, "num_machines": 3})
    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert error["param"] == "num_machines"
    assert "3 machines" in error["message"] and "2 live machines" in error["message"]


def test_a_tinker_sessions_host_job_runs_on_a_ray_node(stack: Stack) -> None:
    """A Tinker session's host job goes through the same executor: a Ray node runs the host
    (with the driver's Tinker settings), which answers the session's call, and the job ends
    once no call has come for the linger."""
    api, key = stack.api, {"X-API-Key": "tml-local"}  # authentication off: any tml- key
    session = api.post("/api/v1/create_session", json={"tags": []}, headers=key).json()
    made = api.post("/api/v1/create_model", headers=key, json={
        "session_id": session["session_id"], "model_seq_id": 0, "base_model": "gradacc/tiny-chat",
        "lora_config": {"rank": 2}}).json()  # fmt: skip
    found = api.post(
        "/api/v1/retrieve_future", json={"request_id": made["request_id"]}, headers=key
    )
    model = found.json()["model_id"]
    proto = {**key, "Content-Type": "application/x-protobuf"}
    body = _window_body(model, _data(3, seed=1), 1)
    stay = tinker_stay(stack.hold)
    stay.write_text(session["session_id"])  # its host job stays (the failpoint) until checked
    try:
        asked = api.post("/api/v1/forward_backward", content=body, headers=proto).json()
        answer = api.post("/api/v1/retrieve_future", json=asked, headers=key)
        while answer.headers["content-type"] != "application/x-protobuf":
            assert answer.json().get("type") == "try_again", answer.text  # bounded: the timeout
            answer = api.post("/api/v1/retrieve_future", json=asked, headers=key)
        with session_scope(stack.settings) as db:
            owner = db.get(TinkerSession, session["session_id"])
            assert owner is not None and owner.job_id is not None
            job_id = owner.job_id
        assert job_processes(stack, job_id), "the host is not a process of the Ray cluster"
    finally:
        stay.unlink(missing_ok=True)
    wait_until(lambda: _status(stack.settings, job_id) == "succeeded", timeout=120,
               what="the host job's end after its linger")  # fmt: skip


def tinker_stay(hold: Hold) -> Path:
    """The file whose session's Tinker host job stays (``TINKER_STAY``), beside the hold's."""
    return hold.gate.parent / "tinker-stay"


def _status(settings: Settings, job_id: str) -> str | None:
    with session_scope(settings) as db:
        job = db.get(Job, job_id)
        return None if job is None else job.status


def test_a_gang_over_two_ray_nodes_equals_one_process_at_2k_and_survives_a_lost_node(
    stack: Stack, clean: Clean
) -> None:
    """The uninterrupted run (``clean``) equals one process at 2K; a second run of it, one of
    whose nodes loses its raylet mid-epoch 2, restarts from epoch 1's checkpoint on a node that
    joins afterwards, and ends equal to the uninterrupted run."""
    api, settings = stack.api, stack.settings
    (started,) = messages(settings, clean.job_id, "started")
    assert started.endswith("a gang of 2 machines")
    job_dir = settings.jobs_dir / clean.job_id
    assert (job_dir / "train.log.ray-node1").stat().st_size > 0  # node 1's output, beside node 0's
    diff = max_abs_diff(clean.weights, clean.reference)
    print(f"Ray W=2 over 2 nodes vs one process at 2K: {diff:.2e} (bound {clean.bound:.2e})")
    assert diff <= clean.bound

    stack.hold.arm()
    lost = api.post("/v1/jobs", json=LONG).json()["id"]
    stack.hold.held(timeout=180)
    checkpoint_at(settings.jobs_dir / lost, 4)
    on_lost_node = [p for p in stack.cluster.kill_raylet("node_1") if lost in _cmdline(p)]
    assert on_lost_node, "no process of the job on the node"
    # On one host the node's processes outlive its raylet by the second or so its Ray workers
    # take to notice: released before, its ranks could finish the run (a machine that goes
    # away takes them at once).
    _, alive = psutil.wait_procs(on_lost_node, timeout=60)
    assert not alive, alive
    stack.hold.release()
    wait_until(lambda: "restarted" in event_kinds(api, lost), timeout=120,
               what="the restart after the lost node")  # fmt: skip
    stack.cluster.add_node("node_2")
    job = succeeded(api, lost, stack.worker)
    (restart,) = messages(settings, lost, "restarted")
    assert restart.endswith("resumes from step 4"), restart
    assert any("resumed at step" in m for m in messages(settings, lost, "training"))
    assert job["attempts"] == 2
    resumed = max_abs_diff(final_weights(settings.jobs_dir / lost), clean.weights)
    print(f"lost node, resumed from step 4, vs the uninterrupted run: {resumed:.2e}")
    assert resumed <= clean.bound


def held_job(stack: Stack, spec: dict[str, Any] = LONG) -> tuple[str, list[psutil.Process]]:
    """A job (LONG) held at ``HELD_AT`` on both nodes: its id and its processes."""
    stack.hold.arm()
    job_id = stack.api.post("/v1/jobs", json=spec).json()["id"]
    stack.hold.held(timeout=180)
    running = job_processes(stack, job_id)
    assert len(node_tasks(stack)) == 2 and running
    return job_id, running


def nothing_left(stack: Stack, job_id: str, running: list[psutil.Process]) -> None:
    """No process, Ray task or placement group of the job is left (its group is ``REMOVED``)."""
    _, alive = psutil.wait_procs(running, timeout=30)
    assert not alive, alive
    wait_until(lambda: not node_tasks(stack) and not job_processes(stack, job_id), timeout=30,
               what="no task or process of the job")  # fmt: skip
    groups = placement_groups(stack.cluster.address)
    mine = {name: state for name, state in groups.items() if job_id in name}
    assert mine and set(mine.values()) == {"REMOVED"}, groups


@pytest.mark.heavy  # make test-heavy: 45-95 s each here
def test_a_cancel_leaves_no_task_placement_group_or_process(stack: Stack) -> None:
    """Also what a node's processes were given (N7): the database from the job's 0600 secrets
    file (the task's arguments hold no secret), none of the driver's serving or metrics tokens;
    the file goes with the job."""
    api = stack.api
    job_id, running = held_job(stack)
    secrets = stack.settings.jobs_dir / job_id / SECRETS_FILE
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    for process in running:
        environ = process.environ()
        assert environ["GRADACC_DATABASE_URL"] == stack.settings.resolved_database_url()
        assert not set(UNNEEDED) & set(environ), process.cmdline()
    assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    stack.hold.release()
    assert wait_final(api, job_id, timeout=60)["status"] == "cancelled"
    nothing_left(stack, job_id, running)
    wait_until(lambda: not secrets.exists() or None, timeout=30, what="the secrets file gone")


@pytest.mark.heavy  # make test-heavy: 45-95 s each here
def test_a_pause_removes_the_group_and_the_resumed_job_ends_as_the_uninterrupted_run(
    stack: Stack, clean: Clean
) -> None:
    """A pause is the preemption path (the preempt file; the ranks checkpoint at the window's end
    and exit): no task, group or process is left while it waits; resumed, it ends with
    ``clean``'s weights. The job is sharded (FSDP2 over the two nodes: each writes its shards of
    the checkpoint into the shared job folder), ``clean`` is not: they train alike."""
    api, settings = stack.api, stack.settings
    job_id, running = held_job(stack, {**LONG, "sharding": "fsdp"})
    assert (settings.jobs_dir / job_id / "checkpoint" / "pytorch_model_fsdp_0").is_dir()
    # Not released: a preemption ends the hold (the run checkpoints at step 6 and exits).
    assert api.post(f"/v1/jobs/{job_id}/pause").status_code == 200
    wait_until(lambda: "paused" in event_kinds(api, job_id), timeout=120, what="the pause")
    stack.hold.release()
    nothing_left(stack, job_id, running)
    assert api.get(f"/v1/jobs/{job_id}").json()["status"] == "paused"

    assert api.post(f"/v1/jobs/{job_id}/resume").status_code == 200
    succeeded(api, job_id, stack.worker)
    resumed = f"resumed at step {HELD_AT}"
    assert any(resumed in m for m in messages(settings, job_id, "training")), resumed
    diff = max_abs_diff(final_weights(settings.jobs_dir / job_id), clean.weights)
    print(f"paused at step {HELD_AT}, resumed, vs the uninterrupted run: {diff:.2e}")
    assert diff <= clean.bound


def local_gang_run(api: TestClient, settings: Settings, start: StartWorker) -> Weights:
    """The same job under the ``local`` executor, sharded (FSDP2 over the two machines: the same
    weights as the replicated run): a gang of two workers (machines m1 and m2, one device each)
    on ``settings``' stack; its final weights."""
    m1, m2 = machine(start, "m1"), machine(start, "m2")
    registered(settings, m1, m2)
    job_id = api.post("/v1/jobs", json={**LONG, "sharding": "fsdp"}).json()["id"]
    succeeded(api, job_id, m1, m2)
    (started,) = messages(settings, job_id, "started")
    assert started.endswith("a gang of 2 machines"), started
    assert (settings.jobs_dir / job_id / "checkpoint" / "pytorch_model_fsdp_0").is_dir()
    return final_weights(settings.jobs_dir / job_id)


# Last in the module: it stops the Ray driver, so that the local workers take the job.
def test_the_same_job_under_local_ends_with_the_ray_runs_weights(
    stack: Stack, clean: Clean, start_worker: StartWorker
) -> None:
    stack.worker.stop()
    local = local_gang_run(stack.api, stack.settings, start_worker)
    diff = max_abs_diff(local, clean.weights)
    print(f"local vs Ray, PostgreSQL + Redis: {diff:.2e} (bound {clean.bound:.2e})")
    assert diff <= clean.bound


@pytest.mark.heavy  # make test-heavy: 45-95 s each here
def test_on_the_embedded_stack_ray_and_local_end_alike(
    stack: Stack, clean: Clean, embedded_settings: Settings
) -> None:
    """SQLite and the filesystem broker: a driver of the same cluster on that stack (its nodes
    take the driver's settings). One node is taken by another user's placement group: the job's
    group is not placed within the gang wait, and the job is queued again, no attempt counted,
    until the node is free. Then the Ray run equals one process at 2K, and the same job under
    ``local`` equals it."""
    settings = embedded_settings
    workers: list[WorkerProcess] = []

    def start(name: str, env: dict[str, str] | None = None) -> WorkerProcess:
        workers.append(WorkerProcess(settings, name, NO_PREDICT | (env or {})))
        return workers[-1]

    try:
        with TestClient(create_app(asking_ray(settings, stack.cluster))) as api:
            address = stack.cluster.address
            block_node(address, "node_0", "another-user")  # one node free: the job needs two
            driver = start("ray-driver", driver_env(stack.cluster) | {"GRADACC_GANG_WAIT_S": "3"})
            job_id = api.post("/v1/jobs", json=LONG).json()["id"]
            wait_until(lambda: "placement_waiting" in event_kinds(api, job_id), timeout=120,
                       what="the job queued again, not placed")  # fmt: skip
            unblock(address, "another-user")
            job = succeeded(api, job_id, driver)
            assert job["attempts"] == 1, job  # a wait for placement is not an attempt
            (started,) = messages(settings, job_id, "started")
            assert started.endswith("a gang of 2 machines"), started
            on_ray = final_weights(settings.jobs_dir / job_id)
            diff = max_abs_diff(on_ray, clean.reference)
            print(f"Ray, embedded: vs one process at 2K {diff:.2e} (bound {clean.bound:.2e})")
            assert diff <= clean.bound
            driver.stop()
            local = max_abs_diff(local_gang_run(api, settings, start), on_ray)
            print(f"local vs Ray, embedded: {local:.2e}")
            assert local <= clean.bound
    finally:
        for worker in workers:
            worker.stop()
