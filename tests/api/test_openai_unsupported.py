"""OpenAI routes gradacc does not serve say so, through the official SDK: a bare "Not Found"
reads like a wrong base URL."""

from __future__ import annotations

import openai
import pytest
from fastapi.testclient import TestClient


@pytest.fixture
def sdk(client: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client)


def test_an_unsupported_resource_is_a_404_that_names_it(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as stores:
        sdk.vector_stores.list()
    error = stores.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_openai_route"
    assert "does not offer OpenAI's /v1/vector_stores API" in error["message"]
    assert (
        "serves chat/completions, completions, responses, batches, evals, models"
        in error["message"]
    )
    with pytest.raises(openai.NotFoundError, match="/v1/uploads API"):
        sdk.uploads.create(bytes=10, filename="a.jsonl", mime_type="text/plain", purpose="batch")
    assert sdk.evals.list().data == []  # served now: an empty list, not that 404
    permissions = sdk.fine_tuning.checkpoints.permissions
    with pytest.raises(openai.NotFoundError, match="/v1/fine_tuning/checkpoints API"):
        permissions.create("ft:gpt-4o-mini:acme::abc", project_ids=["proj_1"])


def test_a_missing_id_on_a_served_route_is_still_not_found(client: TestClient) -> None:
    missing = client.get("/v1/fine_tuning/jobs/ftjob-000000000000000000000000")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] != "unsupported_openai_route"
    nowhere = client.get("/v1/no-such-thing")
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "not_found"
