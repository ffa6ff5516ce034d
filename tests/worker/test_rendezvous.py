"""A gang job's node runs torchrun with torch's c10d rendezvous at node 0's endpoint, where node
0's agent hosts the store (``worker.child.ranks.launcher.Rendezvous``); without one, standalone."""

from __future__ import annotations

from pathlib import Path

from worker.child.ranks.launcher import Rendezvous, torchrun_command


def test_each_node_joins_node_0s_c10d_rendezvous() -> None:
    node1 = Rendezvous(2, 1, "10.0.0.1:29400", local_addr="10.0.0.2")
    command = torchrun_command("job_x", 4, Path("failures.json"), node1)
    assert "--standalone" not in command
    assert {"--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d", "--rdzv-id=job_x",
            "--rdzv-endpoint=10.0.0.1:29400", "--local-addr=10.0.0.2",
            "--nproc_per_node=4"} <= set(command)  # fmt: skip
    assert "--rdzv-conf=is_host=false,join_timeout=120" in command
    node0 = Rendezvous(2, 0, "10.0.0.1:29400", local_addr="10.0.0.1")
    assert "--rdzv-conf=is_host=true,join_timeout=120" in node0.arguments("job_x")
    assert command[-2:] == ["worker.child.ranks.main", "job_x"]
    assert "--standalone" in torchrun_command("job_x", 2, Path("failures.json"))
