"""The executor by setting (``gradacc.executors``): ``local`` by default, ``ray`` by name, any
other name refused clearly; and the local cluster's capacity is the live workers'."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import ValidationError

from gradacc.db import session_scope
from gradacc.errors import InvalidRequest
from gradacc.executors import Capacity, UnknownExecutor, cluster_capacity, executor_name
from gradacc.scheduling.capacity import check_fits
from gradacc.settings import Settings
from gradacc.workers import register_worker


def test_local_is_the_default_and_ray_is_chosen_by_name() -> None:
    assert executor_name(Settings()) == "local"
    ray = Settings(executor="ray", ray_address="127.0.0.1:6380")
    assert executor_name(ray) == "ray" and ray.ray_address == "127.0.0.1:6380"


def test_an_unknown_executor_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADACC_EXECUTOR", "slurm")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "executor" in str(refused.value) and "'local' or 'ray'" in str(refused.value)
    built = Settings.model_construct(
        executor=cast(Any, "slurm")
    )  # past validation: the selection refuses
    with pytest.raises(UnknownExecutor, match=r"GRADACC_EXECUTOR='slurm'.*local, ray"):
        executor_name(built)


def test_local_capacity_is_each_live_machine_s_largest_worker(embedded_settings: Settings) -> None:
    settings = embedded_settings
    with session_scope(settings) as session:
        for name, machine, devices in (("a", "m1", 2), ("b", "m1", 4), ("c", "m2", 1)):
            register_worker(session, name=name, pid=1, devices=["cpu"], num_devices=devices,
                            machine=machine, queue=settings.queue)  # fmt: skip
        capacity = cluster_capacity(settings, session=session)
    assert sorted(capacity.devices) == [1, 4]
    assert capacity.largest == 4 and capacity.machines_with(1) == 2


def test_check_fits_names_the_field_whatever_the_executor() -> None:
    two_nodes = Capacity((2, 2))
    check_fits(two_nodes, num_machines=2, devices=2)  # fits: no error
    for machines, devices, field in ((3, 2, "num_machines"), (2, 4, "num_machines"),
                                     (1, 4, "num_processes")):  # fmt: skip
        with pytest.raises(InvalidRequest) as refused:
            check_fits(two_nodes, num_machines=machines, devices=devices)
        assert refused.value.param == field
        # The words fit a Ray node as well as a worker's machine.
        assert "machine" in str(refused.value) and "worker" not in str(refused.value)
