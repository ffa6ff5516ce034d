"""External OpenAI-compatible inference servers (vLLM, SGLang, another gradacc) by model name:
``GRADACC_SERVE_UPSTREAMS`` (docs/serving.md, "Upstream servers").

The setting is a JSON object from a pattern to a server. A pattern is an exact model name, a
``prefix*`` glob, or ``*`` for every name; the most specific wins (exact, then the longest
prefix, then ``*``), so the object's order never matters. A server is its ``base_url`` as the
``openai`` SDK takes it (ending in ``/v1``), its API key (``api_key``, or ``api_key_env``: the
name of a variable holding it) and an optional ``model``, the name sent instead of the client's
(on a glob, ``model`` ending in ``*`` replaces the matched prefix: ``"hub/*": {"model": "*"}``
strips ``hub/``).

Example:
    >>> upstreams = parse_upstreams('{"hub/*": {"base_url": "http://vllm:8000/v1", '
    ...                             '"model": "*"}}', environ={})
    >>> route = upstreams.match("hub/Qwen/Qwen3-8B")
    >>> route is not None and route.upstream_model("hub/Qwen/Qwen3-8B")
    'Qwen/Qwen3-8B'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

SETTING = "GRADACC_SERVE_UPSTREAMS"
ANY = "*"
# The names this server gives its own models: a name in them is checked for the tenant here
# (another tenant's ``ft:`` model is a 404) even when a pattern sends it elsewhere, and so is the
# name a rewrite sends (``"vllm/*": {"model": "*"}`` makes ``vllm/ft:…`` an ``ft:`` name).
OWN_PREFIXES = ("builtin:", "ft:")


def is_own_name(name: str) -> bool:
    """Whether ``name`` reads as one of this server's own, whatever its case or outer spaces
    (an upstream may be lenient where this server is not)."""
    return name.strip().lower().startswith(OWN_PREFIXES)


class UpstreamServer(BaseModel):
    """One server, as the setting writes it (an unknown key is refused, naming it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str = Field(pattern=r"^https?://[^\s/]+", max_length=2048)
    api_key: SecretStr | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    model: str | None = Field(default=None, min_length=1, max_length=512)


@dataclass(frozen=True)
class UpstreamRoute:
    pattern: str
    server: UpstreamServer

    def upstream_model(self, name: str) -> str:
        """The name the server is asked for: the client's, or the rewrite."""
        rewrite = self.server.model
        if rewrite is None:
            return name
        if self.pattern.endswith(ANY) and rewrite.endswith(ANY):
            return rewrite[:-1] + name[len(self.pattern) - 1 :]
        return rewrite

    def own_names(self, name: str) -> list[str]:
        """Of the client's name and the one sent upstream, those that read as this server's
        own: each must be the tenant's before anything is sent."""
        return [n for n in dict.fromkeys((name, self.upstream_model(name))) if is_own_name(n)]

    def headers(self) -> dict[str, str]:
        """The server's own key: the client's never leaves this API."""
        key = self.server.api_key
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}


@dataclass(frozen=True)
class Upstreams:
    routes: tuple[UpstreamRoute, ...] = ()

    def match(self, name: str) -> UpstreamRoute | None:
        """The most specific route for ``name`` (exact, longest prefix, ``*``), or None."""
        best: UpstreamRoute | None = None
        for route in self.routes:
            if route.pattern == name:
                return route
            prefix = route.pattern.removesuffix(ANY)
            glob = route.pattern.endswith(ANY) and name.startswith(prefix)
            if glob and (best is None or len(prefix) > len(best.pattern) - 1):
                best = route
        return best

    def listed_names(self) -> list[str]:
        """Exact names for /v1/models: not the globs (no list of what they reach), and not
        names of this server's own (a tenant's ``ft:`` name is not everyone's to see)."""
        exact = (r.pattern for r in self.routes if not r.pattern.endswith(ANY))
        return sorted(name for name in exact if not is_own_name(name))


def parse_upstreams(raw: str | None, *, environ: Mapping[str, str]) -> Upstreams:
    """The setting's JSON as routes, keys read from ``environ``; ``ValueError`` naming the
    setting and the entry at fault (raised at start-up, not at the first request)."""
    if raw is None or not raw.strip():
        return Upstreams()
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{SETTING} is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise ValueError(f"{SETTING} must be a JSON object from a model pattern to a server")
    return Upstreams(tuple(_route(p, s, environ) for p, s in given.items()))


def _route(pattern: str, given: object, environ: Mapping[str, str]) -> UpstreamRoute:
    where = f"{SETTING}[{pattern!r}]"
    if not pattern or ANY in pattern.removesuffix(ANY):
        raise ValueError(f"{where}: a pattern is a model name, 'prefix*' or '*'")
    try:
        server = UpstreamServer.model_validate(given)
    except ValidationError as exc:
        faults = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'the entry'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"{where}: {faults}") from None
    if server.api_key is not None and server.api_key_env is not None:
        raise ValueError(f"{where}: give api_key or api_key_env, not both")
    if server.model is not None and server.model.endswith(ANY) and not pattern.endswith(ANY):
        raise ValueError(f"{where}: model may end in '*' only on a 'prefix*' pattern")
    if server.api_key_env is not None:
        key = environ.get(server.api_key_env)
        if not key:
            raise ValueError(f"{where}: api_key_env names {server.api_key_env}, which is unset")
        server = server.model_copy(update={"api_key": SecretStr(key), "api_key_env": None})
    return UpstreamRoute(pattern, server)
