"""A real Ray cluster on this machine, for the Ray executor's tests and bench/executor_start.py.

``ray start --head`` (it schedules only: no CPU, so no job lands on it) and N nodes, each a raylet
of its own with one CPU and a resource naming it (``node_0``, ``node_1``...): distinct Ray nodes
on one host, so ``STRICT_SPREAD`` puts each bundle of a placement group on another one. The nodes
get the gradacc environment a worker machine has (database, home: the shared jobs directory),
as an operator's ``ray start`` would.

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

import psutil

from tests.conftest import ROOT
from tests.support import free_port

RAY = str(Path(sys.executable).with_name("ray"))
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
# In the environment of every process of one cluster (its daemons, their workers and agents, the
# jobs they run), with the cluster's temp directory: how ``stop`` finds them all, orphans too.
MARK = "GRADACC_TEST_RAY_CLUSTER"


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
                  f"--dashboard-port={free_port()}")  # fmt: skip
        starting = [self._node(name) for name in self.names]  # side by side
        for name, process in zip(self.names, starting, strict=True):
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, f"ray start of {name}: {err.decode()[-2000:]}"
        return self

    def add_node(self, name: str) -> None:
        _, err = self._node(name).communicate(timeout=120)
        assert b"Ray runtime started" in err or b"Ray runtime started" in _, err[-2000:]

    def _node(self, name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [RAY, "start", f"--address={self.address}", "--num-cpus=1",
             f"--resources={json.dumps({name: 1})}", "--disable-usage-stats",
             f"--dashboard-agent-listen-port={free_port()}"],
            cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
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

    def kill_raylet(self, name: str) -> None:
        """A node lost: its raylet killed (SIGKILL), as when a machine goes away. Its agents
        outlive it (they ignore SIGTERM); ``stop`` ends them with the rest."""
        raylet = self.raylet(name)
        self._orphans += raylet.children(recursive=True)
        raylet.kill()

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster: those with its ``MARK`` (Ray's daemons, the jobs'
        processes) and their descendants (workers and agents, whose process title overwrites
        their environment), and what a killed raylet left."""
        marked = []
        for process in psutil.process_iter():
            try:
                if process.environ().get(MARK) == self.temp_dir:
                    marked.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
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
