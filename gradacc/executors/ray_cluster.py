"""What a Ray cluster holds, asked of its GCS (the head's control store) without joining it.

The API asks this at POST (``gradacc.scheduling.capacity``): a job over more machines than the
cluster has live nodes for is refused (422, ``num_machines``) instead of waiting for a placement
group that can never be created. The Ray executor (``worker.consumer.executors.ray_executor``)
uses the same rule for what a bundle asks: a node's devices are its GPUs, or its CPUs on a
cluster with no GPU at all (gloo processes, as ``GRADACC_DEVICES`` counts them on a worker).

No ``ray.init`` here: a GCS client is a plain gRPC channel (no driver, no worker process, no
job in the cluster's list). ``GcsClient`` and the address lookup are Ray's private modules, pinned
with the ``ray`` extra (2.60.0); the dashboard's state API would be public, but a cluster started
without the dashboard does not serve it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gradacc.errors import NotReady
from gradacc.executors.protocol import Capacity
from gradacc.settings import Settings

GCS_TIMEOUT_S = 5
ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE


@dataclass(frozen=True)
class RayNode:
    """A live node: its id (hex), its address and its resources' totals."""

    node_id: str
    address: str
    resources: dict[str, float]


def device_resource(nodes: list[RayNode]) -> str:
    """What a bundle asks per process: "GPU" on a cluster with GPUs, else "CPU"."""
    return "GPU" if any(node.resources.get("GPU", 0) > 0 for node in nodes) else "CPU"


def devices_of(node: RayNode, resource: str) -> int:
    return int(node.resources.get(resource, 0))


def bootstrap_address(settings: Settings) -> str:
    """``GRADACC_RAY_ADDRESS``, or Ray's own choice (``RAY_ADDRESS``, or the cluster that
    ``ray start`` left running on this machine)."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        address = canonicalize_bootstrap_address(settings.ray_address)  # type: ignore[arg-type]
    except ConnectionError as exc:  # RAY_ADDRESS=auto with no cluster found
        raise NotReady(f"no Ray cluster found ({exc})") from exc
    if not address:
        raise NotReady("no Ray cluster to ask: set GRADACC_RAY_ADDRESS (GRADACC_EXECUTOR=ray)")
    return str(address)


@lru_cache(maxsize=4)
def _client(address: str) -> Any:
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def live_nodes(settings: Settings) -> list[RayNode]:
    """The cluster's live nodes now; ``NotReady`` (503) when its GCS does not answer."""
    address = bootstrap_address(settings)
    try:
        infos = _client(address).get_all_node_info(timeout=GCS_TIMEOUT_S)
    except Exception as exc:  # Ray raises its own RpcError/TimeoutError kinds
        raise NotReady(f"the Ray cluster at {address} does not answer ({exc})") from exc
    return [
        RayNode(node_id.hex(), info.node_manager_address, dict(info.resources_total))
        for node_id, info in infos.items()
        if info.state == ALIVE
    ]


def capacity(settings: Settings) -> Capacity:
    """The live nodes' devices (``device_resource``); a node with none (a head started with
    ``--num-cpus 0``, which only schedules) holds no job and is not counted."""
    nodes = live_nodes(settings)
    resource = device_resource(nodes)
    devices = (devices_of(node, resource) for node in nodes)
    return Capacity(tuple(count for count in devices if count > 0))
