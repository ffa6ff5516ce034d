"""Property-based: whatever arrives at POST /v1/jobs, the answer is never a 5xx, and every 4xx
has the one error shape. Bodies start from a valid spec and are mutated (fields replaced with
hostile values, dropped, unknown ones added), or are arbitrary bytes."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.api.test_jobs import TINY
from trainer_core.spec.job import JobSpec

FIELDS = sorted(JobSpec.model_fields)
NASTY_TEXT = [
    "../../etc/passwd",
    "/etc/passwd",
    "~/.ssh/id_rsa",
    "/proc/self/environ",
    "builtin:tiny-bert",
    "builtin:tiny-stories",
    "a.csv",
    "\ud800",
    "x\udfffy",
    "\u0000",
    "\u202e",
    "owner/name:config",
    "",
    " " * 3,
    "x" * 2000,
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(NASTY_TEXT)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
keys = (
    st.sampled_from(FIELDS)
    | st.text(max_size=12)
    | st.sampled_from(["\ud800", "trust_remote_code"])
)

# Every error body; a validation error adds "errors" (each field at fault).
SHAPE = {"code", "message", "param", "type"}


@st.composite
def mutated_specs(draw: st.DrawFn) -> Any:
    spec: dict[str, Any] = dict(TINY)
    for key in draw(st.lists(st.sampled_from(sorted(spec)), max_size=3)):
        spec.pop(key, None)
    spec.update(draw(st.dictionaries(keys, values, max_size=4)))
    return spec


bodies = (
    mutated_specs().map(lambda spec: json.dumps(spec).encode())
    | values.map(lambda value: json.dumps(value).encode())
    | st.binary(max_size=300)
)
headers = st.fixed_dictionaries(
    {
        "content-type": st.sampled_from(
            ["application/json", "text/plain", "application/x-www-form-urlencoded"]
        )
    },
    optional={
        "idempotency-key": st.text(
            st.characters(max_codepoint=255, exclude_categories=["Cc"]), max_size=300
        )
    },
)


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=bodies, extra_headers=headers)
def test_no_input_makes_the_api_fail(
    client: TestClient, raw: bytes, extra_headers: dict[str, str]
) -> None:
    latin1 = {name: value.encode("latin-1") for name, value in extra_headers.items()}
    response = client.post("/v1/jobs", content=raw, headers=latin1)
    event(f"status {response.status_code}")  # pytest --hypothesis-show-statistics
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert SHAPE <= set(response.json()["error"]) <= SHAPE | {"errors"}
    else:
        assert response.json()["status"] == "queued"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    job_id=st.text(max_size=40),
    params=st.dictionaries(
        st.sampled_from(["status", "limit", "after", "x"]), st.text(max_size=40), max_size=3
    ),
    suffix=st.sampled_from(["", "/metrics", "/events", "/cancel"]),
)
def test_no_path_or_query_makes_the_api_fail(
    client: TestClient, job_id: str, params: dict[str, str], suffix: str
) -> None:
    path = "/v1/jobs/" + quote(job_id, safe="") + suffix
    response = client.post(path) if suffix == "/cancel" else client.get(path)
    listed = client.get("/v1/jobs", params=params)
    for answer in (response, listed):
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            assert SHAPE <= set(answer.json()["error"]) <= SHAPE | {"errors"}
