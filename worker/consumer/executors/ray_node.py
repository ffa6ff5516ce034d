"""What runs inside the Ray cluster for a job: the two remote functions the Ray executor
(``ray_executor``) schedules into the job's placement group, one bundle each.

``node_address`` answers where bundle 0 is (its node's address and a port free there: the c10d
rendezvous of the job's torchrun agents). ``run_node`` is one node of the job: it starts
``python -m worker.child.placed`` (torchrun of that node's ranks) in a session of its own, with
the driver's settings in its environment (the plain ones as arguments, the secrets read from
the job's 0600 file: ``node_env``), its output in the job's log file on the shared jobs
directory, and returns its exit status. A cancel
(``ray.cancel``) reaches it as ``KeyboardInterrupt``: it ends the session as the ``local``
executor ends its child (SIGTERM, then SIGKILL after the grace). Should the Ray worker itself be
killed (its group removed, its node lost), the node's processes die with it: each one, from
this launcher down to the ranks, is killed when its parent exits (``die_with_parent``).

Kept light: a Ray worker imports this module (and nothing of Celery or the database) to run it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import ray

from worker.child.ranks.fork_popen import die_with_parent
from worker.child.ranks.ports import store_port

POLL_S = 0.5  # a cancel's KeyboardInterrupt lands between two waits
SECRETS_FILE = "node-secrets.json"  # in the job's folder, 0600: never a task argument


@ray.remote(max_retries=0)
def node_address() -> tuple[str, int]:
    """This node's address, and a port free on it now, below the ephemeral range (``ports``)."""
    port = store_port()
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return address, port


@ray.remote(max_retries=0)
def run_node(
    job_id: str,
    node_rank: int,
    num_machines: int,
    rendezvous: str,
    log_path: str,
    grace_s: float,
    env: dict[str, str],
    secrets_path: str,
) -> int:
    """Node ``node_rank`` of the job until it exits; its exit status. ``env``: the driver's
    settings (``node_env.node_environment``), with the secrets of ``secrets_path``, over the
    node's own environment."""
    env = {**env, **json.loads(Path(secrets_path).read_text())}
    address = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    command = [
        sys.executable,
        "-m",
        "worker.child.placed",
        job_id,
        str(node_rank),
        str(num_machines),
        rendezvous,
        address,
    ]
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
            env={**os.environ, **env},
        )
    try:
        while True:
            try:
                return process.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:  # ray.cancel: the job is stopped
        return _end_session(process, grace_s)


def _end_session(process: subprocess.Popen[bytes], grace_s: float) -> int:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return process.wait()
