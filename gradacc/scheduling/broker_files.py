"""The embedded default's broker: kombu's filesystem transport, with whole messages only.

kombu's own ``_put`` creates the message file under its final name, then locks and writes it; a
consumer polling the folder in between (its ``_get`` does not take the lock) moves and reads an
empty or partial file, and Celery stops with "Unrecoverable error: JSONDecodeError" (seen here:
a worker died on its next job after a cancel, with a POST arriving as it polled). Here a message
is written under a name ``_get`` never picks up (``.<name>.part``) and renamed into place: a
rename within one folder is atomic, so a consumer sees a whole message or none.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

TRANSPORT = f"{__name__}:Transport"  # Celery's ``broker_transport`` for filesystem:// URLs


def publish(partial: str, final: str) -> None:
    """Put a whole message in place: the one step a consumer can observe."""
    os.rename(partial, final)


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # kombu's two bases disagree
        # The name kombu gives a message (its order is the time in ms), written whole first.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "w", encoding="utf-8") as out:
                out.write(dumps(payload))  # type: ignore[no-untyped-call]  # kombu's own JSON
            publish(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
