"""A real Ray cluster on this machine, for the Ray executor's tests and bench/executor_start.py.

``ray start --head`` (it schedules only: no CPU, so no job lands on it) and N nodes, each a raylet
of its own with one CPU and a resource naming it (``node_0``, ``node_1``...): distinct Ray nodes
on one host, so ``STRICT_SPREAD`` puts each bundle of a placement group on another one. The nodes
need no gradacc settings: a job's node processes get their driver's (``node_environment`` in
``worker/consumer/executors/ray_executor.py``), so drivers of two stacks can share one cluster.

``ray stop`` would end every Ray process of the machine, a concurrent test run's too: ``stop``
ends this cluster's alone, found by its temp directory (in its daemons' command lines) and its
GCS port, with their children (raylets' workers and agents).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import ROOT
from tests.support import free_port

RAY = str(Path(sys.executable).with_name("ray"))
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
# In the environment of every process of one cluster (its daemons, their workers and agents, the
# jobs they run), with the cluster's temp directory: how ``stop`` finds them all, orphans too.
MARK = "GRADACC_TEST_RAY_CLUSTER"
NODE_MARK = "GRADACC_TEST_RAY_NODE"  # and a node's processes, its name


class RayCluster:
    """``start()``, then ``address``; ``kill_raylet(name)`` and ``add_node(name)`` for a lost
    node; ``stop()`` leaves none of its processes."""

    def __init__(self, env: dict[str, str], nodes: int = 2) -> None:
        # Short: Ray's unix sockets live under it (a socket path has ~107 characters at most).
        self.temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**env, **QUIET, "PYTHONPATH": str(ROOT), MARK: self.temp_dir}
        self.names = [f"node_{index}" for index in range(nodes)]
        self._orphans: list[psutil.Process] = []

    def start(self) -> RayCluster:
        self._ray("--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false",
                  f"--temp-dir={self.temp_dir}", f"--ray-client-server-port={free_port()}",
                  f"--dashboard-port={free_port()}", "--include-log-monitor=false")  # fmt: skip
        # One after another: started side by side, one of two nodes missed Ray's 30 s
        # registration on a quiet machine (38.8 s in all, against 8.3 s one at a time).
        for name in self.names:
            self._started(name, self._node(name))
        return self

    def add_node(self, name: str) -> None:
        self._started(name, self._node(name))

    def _started(self, name: str, process: subprocess.Popen[bytes], tries: int = 2) -> None:
        """Wait for ``ray start`` of a node. Ray gives a raylet 30 s to register with the GCS; on
        two busy cores (a niced test run beside other work) it can miss that once: the half
        started node is killed (its processes carry its name) and started again."""
        _, err = process.communicate(timeout=120)
        if process.returncode == 0:
            return
        for leftover in self.processes(node=name):
            leftover.kill()
        assert tries > 1, f"ray start of {name}: {err.decode()[-2000:]}"
        self._started(name, self._node(name), tries - 1)

    def _node(self, name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [RAY, "start", f"--address={self.address}", "--num-cpus=1",
             f"--resources={json.dumps({name: 1})}", "--disable-usage-stats",
             f"--dashboard-agent-listen-port={free_port()}", "--include-log-monitor=false"],
            cwd=ROOT, env={**self.env, NODE_MARK: name}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip

    def _ray(self, *args: str) -> None:
        command = [RAY, "start", "--disable-usage-stats", *args]
        done = subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]

    def raylet(self, name: str) -> psutil.Process:
        """The raylet of node ``name`` (its resource is in its command line)."""
        for process in self.processes():
            listed = [a for a in process.cmdline() if a.startswith("--static_resource_list=")]
            names = listed[0].partition("=")[2].split(",")[::2] if listed else []
            if name in names:  # "name,amount,name,amount..."
                return process
        raise LookupError(f"no raylet of {name} in {self.temp_dir}")

    def kill_raylet(self, name: str) -> list[psutil.Process]:
        """A node lost: its raylet killed (SIGKILL). Its Ray workers see it and exit, and the
        processes of their tasks die with them; its agents outlive it (they ignore SIGTERM):
        ``stop`` ends them with the rest. The raylet's descendants when it was killed."""
        raylet = self.raylet(name)
        descendants: list[psutil.Process] = raylet.children(recursive=True)
        self._orphans += descendants
        raylet.kill()
        return descendants

    def processes(self, node: str | None = None) -> list[psutil.Process]:
        """Every process of this cluster (or of its node ``node``): those with its ``MARK``
        (Ray's daemons, the jobs' processes) and their descendants (workers and agents, whose
        process title overwrites their environment), and what a killed raylet left."""
        marked = []
        for process in psutil.process_iter():
            try:
                env = process.environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if env.get(MARK) == self.temp_dir and node in (None, env.get(NODE_MARK)):
                marked.append(process)
        found = {process.pid: process for process in [*marked, *self._orphans]}
        for process in marked:
            try:
                found.update({child.pid: child for child in process.children(recursive=True)})
            except psutil.NoSuchProcess:
                continue
        found.pop(os.getpid(), None)
        return [process for process in found.values() if process.is_running()]

    def stop(self) -> float:
        """SIGKILL every process of the cluster (as ``ray stop --force``); seconds it took."""
        began = time.monotonic()
        processes = self.processes()
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(processes, timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return time.monotonic() - began


def placement_groups(address: str) -> dict[str, str]:
    """Every placement group the cluster knows, by name: its state ("CREATED", "REMOVED"...)."""
    table = "table = ray.util.placement_group_table().values()\n"
    groups: dict[str, str] = _driver(
        address, table + "print(json.dumps({group['name']: group['state'] for group in table}))"
    )
    return groups


def block_node(address: str, node: str, name: str) -> None:
    """A detached placement group ``name`` that takes node ``node``'s CPU until ``unblock``: a
    cluster without room for a job's bundles, as other users of a shared cluster leave it."""
    _driver(address, "from ray.util.placement_group import placement_group\n"
            f"group = placement_group([{{'CPU': 1, {node!r}: 1}}], name={name!r}, "
            "lifetime='detached')\nray.get(group.ready(), timeout=60)\nprint('{}')")  # fmt: skip


def unblock(address: str, name: str) -> None:
    _driver(address, "from ray.util import get_placement_group, remove_placement_group\n"
            f"remove_placement_group(get_placement_group({name!r}))\nprint('{{}}')")  # fmt: skip


def _driver(address: str, body: str) -> Any:
    """Run ``body`` in a short-lived driver of the cluster's (the test process never joins it):
    the JSON its last line prints."""
    script = (
        "import json, ray\n"
        f"ray.init(address={address!r}, namespace='gradacc-tests', logging_level='ERROR', "
        "log_to_driver=False)\n" + body + "\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=90,
                          env={**os.environ, **QUIET})  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])
