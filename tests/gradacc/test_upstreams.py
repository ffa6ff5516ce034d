"""GRADACC_SERVE_UPSTREAMS: which route a name takes (the most specific, whatever the order), the
name sent upstream, the key from a variable, and start-up errors that name the setting and the
entry. (Forwarding through a real second server: tests/e2e/test_upstream_serving.py.)"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gradacc.settings import Settings
from gradacc.upstreams import parse_upstreams

B = "http://b.internal:8000/v1"


def test_the_most_specific_pattern_wins_whatever_the_order() -> None:
    routes = parse_upstreams(json.dumps({
        "*": {"base_url": "http://any/v1"},
        "hub/*": {"base_url": "http://hub/v1", "model": "*"},
        "hub/qwen/*": {"base_url": "http://qwen/v1"},
        "hub/exact": {"base_url": "http://exact/v1", "model": "served-name"},
    }), environ={})  # fmt: skip
    chosen = {n: routes.match(n) for n in ("hub/exact", "hub/qwen/8b", "hub/llama", "other", "")}
    servers = {n: r.server.base_url if r else None for n, r in chosen.items()}
    assert servers == {"hub/exact": "http://exact/v1", "hub/qwen/8b": "http://qwen/v1",
                       "hub/llama": "http://hub/v1", "other": "http://any/v1",
                       "": "http://any/v1"}  # fmt: skip
    sent = {n: r.upstream_model(n) for n, r in chosen.items() if r}
    assert sent["hub/exact"] == "served-name"  # an exact rewrite
    assert sent["hub/llama"] == "llama"  # a glob's "*" rewrite strips the prefix
    assert sent["hub/qwen/8b"] == "hub/qwen/8b" and sent["other"] == "other"
    assert routes.listed_names() == ["hub/exact"]  # no globs
    assert parse_upstreams(None, environ={}).match("anything") is None


def test_the_key_comes_from_its_variable_and_stays_out_of_reprs() -> None:
    given = {"m": {"base_url": B, "api_key_env": "B_KEY"}, "ft:x": {"base_url": B}}
    routes = parse_upstreams(json.dumps(given), environ={"B_KEY": "sk-upstream"})
    route = routes.match("m")
    assert route is not None and route.headers() == {"Authorization": "Bearer sk-upstream"}
    assert "sk-upstream" not in repr(routes)
    nokey = routes.match("ft:x")
    assert nokey is not None and nokey.headers() == {}
    assert routes.listed_names() == ["m"]  # an ft: name is nobody's to list


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ('{"m": ', "is not JSON"),
        (["m"], "must be a JSON object"),
        ({"a*b": {"base_url": B}}, "['a*b']: a pattern is"),
        ({"m": {"url": B}}, "['m']: base_url: Field required; url: Extra inputs"),
        ({"m": {"base_url": "vllm:8000"}}, "['m']: base_url: String should match"),
        ({"m": {"base_url": B, "api_key_env": "NOT_SET_HERE"}}, "NOT_SET_HERE, which"),
        ({"m": {"base_url": B, "api_key": "k", "api_key_env": "K"}}, "not both"),
        ({"m": {"base_url": B, "model": "x*"}}, "only on a 'prefix*' pattern"),
    ],
)
def test_a_bad_setting_stops_the_start_naming_it(
    given: object, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = given if isinstance(given, str) else json.dumps(given)
    monkeypatch.setenv("GRADACC_SERVE_UPSTREAMS", raw)
    monkeypatch.setenv("K", "k")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "GRADACC_SERVE_UPSTREAMS" in str(refused.value) and says in str(refused.value)


def test_the_setting_reads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADACC_SERVE_UPSTREAMS", json.dumps({"*": {"base_url": B}}))
    route = Settings().serve_upstreams.match("hub/anything")
    assert route is not None and route.server.base_url == B
    monkeypatch.delenv("GRADACC_SERVE_UPSTREAMS")
    assert Settings().serve_upstreams.match("hub/anything") is None
