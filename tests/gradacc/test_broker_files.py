"""The embedded broker never hands a consumer half a message. kombu's own filesystem transport
creates a message file under its final name before writing it, so a worker polling at that moment
reads an empty file and Celery dies with JSONDecodeError (found by a test that cancelled and
deleted jobs in a loop). Ours writes the file whole under another name and renames it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection
from kombu.exceptions import DecodeError
from kombu.transport import filesystem
from kombu.transport.virtual import Channel

from gradacc.scheduling import broker_files
from gradacc.scheduling.queue import broker_transport_options, create_celery_app, enqueue_job
from gradacc.settings import Settings

QUEUE = "gradacc.devices-2"  # a dotted name, as the device queues are


def channel(settings: Settings, transport: Any) -> Channel:
    options = broker_transport_options(settings)
    connection = Connection("filesystem://", transport=transport, transport_options=options)
    return connection.channel()


def test_the_stock_transport_reads_a_message_that_is_still_being_written(tmp_path: Path) -> None:
    """The window kombu leaves open: the file exists under its final name, not yet written."""
    settings = Settings(home=tmp_path)
    consumer = channel(settings, filesystem.Transport)
    (settings.broker_dir / "queue" / f"1_x.{QUEUE}.msg").write_bytes(b"")  # open, not written
    with pytest.raises((json.JSONDecodeError, DecodeError)):
        consumer._get(QUEUE)


def test_a_message_in_writing_is_invisible_then_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=tmp_path)
    producer = channel(settings, broker_files.Transport)
    consumer = channel(settings, broker_files.Transport)
    seen_mid_write: list[str] = []
    publish = broker_files.publish

    def poll_then_publish(partial: str, final: str) -> None:
        # A consumer polls with the message written but not yet in place: it finds none.
        with pytest.raises(Empty):
            consumer._get(QUEUE)
        seen_mid_write.extend(os.listdir(settings.broker_dir / "queue"))
        publish(partial, final)

    monkeypatch.setattr(broker_files, "publish", poll_then_publish)
    payload = {"body": "x" * 100_000, "headers": {"id": "1"}}
    producer._put(QUEUE, payload)
    assert len(seen_mid_write) == 1 and seen_mid_write[0].endswith(".part")
    assert consumer._get(QUEUE) == payload


def test_celery_sends_through_it_on_the_embedded_default(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    app = create_celery_app(settings)
    assert app.conf.broker_transport == broker_files.TRANSPORT
    enqueue_job(app, settings, "job_00000000000000000001", num_processes=2)
    (message,) = os.listdir(settings.broker_dir / "queue")
    assert message.endswith(f".{QUEUE}.msg") and not message.startswith(".")
    received = channel(settings, broker_files.Transport)._get(QUEUE)
    assert received["headers"]["task"] == "gradacc.run_job"
