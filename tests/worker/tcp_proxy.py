"""A TCP proxy to the test PostgreSQL that a test can cut and restore: a database outage for one
client without stopping the server that everything else on the machine uses."""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttableProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.up = True
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.up:
                client.close()  # the server "is down": connections die at once
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until ``restore``."""
        self.up = False
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.cut()
        self.listener.close()
