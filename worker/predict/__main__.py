"""``python -m worker.predict``: started by a worker when it is ready (``GRADACC_PREDICT_WORKER``
names it), stopped with it."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading

from gradacc.settings import get_settings
from worker.predict.server import serve


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # torch logs at INFO at exit (its fake-tensor cache statistics): not this server's story
    logging.getLogger("torch").setLevel(logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    worker = os.environ.get("GRADACC_PREDICT_WORKER") or f"{socket.gethostname()}:{os.getppid()}"
    serve(get_settings(), worker, stop)


if __name__ == "__main__":
    main()
