"""Answer only requests whose ``Host`` names this server (400 otherwise).

Without API keys a web page the user visits could otherwise read and drive the API: it points
its own DNS name at 127.0.0.1 (DNS rebinding), and the browser, seeing one origin, lets its
scripts read the answers. The page cannot change the ``Host`` header its browser sends, which
still names the attacker's domain, so answering only the loopback names (the default without
keys, ``Settings.host_patterns``) closes that door. With keys the page has none to send.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response


def host_matches(host: str, patterns: list[str]) -> bool:
    """``host`` (a Host header, port removed) against names and ``*.domain`` patterns."""
    for pattern in patterns:
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
        if host == pattern:
            return True
    return False


def host_of(header: str) -> str:
    """The name in a Host header, without its port (``[::1]:8000`` → ``[::1]``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostGate:
    def __init__(self, app: ASGIApp, *, patterns: list[str]) -> None:
        self.app = app
        self.patterns = patterns

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if host_matches(host_of(header), self.patterns):
            await self.app(scope, receive, send)
            return
        message = (
            "this server does not answer for that Host header; an operator can add the name "
            "to GRADACC_ALLOWED_HOSTS"
        )
        await error_response(400, "host_not_allowed", message, "host")(scope, receive, send)
