"""A c10d store's port comes from below the ephemeral range, where no outgoing connection of the
machine can take it between the pick and torchrun's bind (``worker.child.ranks.ports``)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from worker.child.ranks import ports


def test_the_port_is_free_and_below_the_ephemeral_range() -> None:
    low, _ = ports.ephemeral_range()
    for _ in range(20):
        port = ports.store_port()
        assert ports.LOWEST <= port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", port))  # free: the pick let it go


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
            other.bind(("", 0))
            free = int(other.getsockname()[1])
        monkeypatch.setattr(ports.random, "sample", lambda *_: [busy, free])
        assert ports.store_port() == free


def test_no_room_below_the_range_falls_back_to_the_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text(f"{ports.LOWEST}\t60999\n")
    monkeypatch.setattr(ports, "RANGE_FILE", range_file)
    assert ports.ephemeral_range() == (ports.LOWEST, 60999)
    assert ports.store_port() >= ports.LOWEST
    monkeypatch.setattr(ports, "RANGE_FILE", tmp_path / "missing")
    assert ports.ephemeral_range() == (32768, 60999)
