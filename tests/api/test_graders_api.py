"""/v1/fine_tuning/alpha/graders/run and /validate through the official SDK, parsed as its own
response types; a bad grader is a 400 naming the field. One in-process app for the module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.fine_tuning.alpha import GraderRunResponse, GraderValidateResponse

from api.main import create_app
from gradacc.settings import Settings
from tests.conftest import migrate

EXACT = {"type": "string_check", "name": "exact", "operation": "eq",
         "input": "{{ sample.output_json.answer }}", "reference": "{{ item.answer }}"}  # fmt: skip
PYTHON = {"type": "python", "name": "py",
          "source": "def grade(sample, item):\n    return len(sample['output_text']) / 100\n"}  # fmt: skip
MULTI = {"type": "multi", "name": "both", "graders": {"exact": EXACT, "py": PYTHON},
         "calculate_output": "0.5 * exact + py"}  # fmt: skip


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(home=tmp_path_factory.mktemp("graders") / "home")
    settings.home.mkdir(parents=True)
    migrate(settings.resolved_database_url())
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def graders(client: TestClient) -> Any:
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client)
    return sdk.fine_tuning.alpha.graders


def test_run_a_multi_grader(graders: Any) -> None:
    sample = '{"answer": "4"}'
    ran = graders.run(grader=MULTI, model_sample=sample, item={"answer": "4"})
    assert isinstance(ran, GraderRunResponse)
    assert ran.reward == pytest.approx(0.5 + len(sample) / 100)
    assert ran.sub_rewards == {"exact": 1.0, "py": pytest.approx(len(sample) / 100)}
    assert ran.metadata.name == "both" and ran.metadata.type == "multi"
    assert not any(v for k, v in ran.metadata.errors.to_dict().items() if k.endswith("_error"))
    wrong = graders.run(grader=MULTI, model_sample='{"answer": "5"}', item={"answer": "4"})
    assert wrong.sub_rewards["exact"] == 0.0


def test_a_failing_grader_scores_zero_and_names_the_kind(graders: Any) -> None:
    failing = {
        **PYTHON,
        "source": "def grade(sample, item):\n    return open('/etc/passwd').read()\n",
    }
    ran = graders.run(grader=failing, model_sample="x")
    assert ran.reward == 0.0 and ran.metadata.errors.python_grader_runtime_error
    assert "FileNotFoundError" in (ran.metadata.errors.python_grader_runtime_error_details or "")
    unparsed = graders.run(grader=EXACT, model_sample="not json", item={"answer": "4"})
    assert unparsed.reward == 0.0 and unparsed.metadata.errors.sample_parse_error


def test_a_model_grader_asks_this_servers_chat_path(graders: Any) -> None:
    """No worker's predict server is up here: the chat path answers 503, and the grader counts a
    model_grader_server_error rather than failing the request."""
    judge = {"type": "score_model", "name": "judge", "model": "builtin:tiny-chat",
             "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}]}  # fmt: skip
    ran = graders.run(grader=judge, model_sample="4")
    assert ran.reward == 0.0 and ran.metadata.errors.api_model_grader_server_error
    assert "predict server" in (ran.metadata.errors.api_model_grader_server_error_details or "")


def test_validate_returns_the_grader(graders: Any) -> None:
    valid = graders.validate(grader=MULTI)
    assert isinstance(valid, GraderValidateResponse)
    assert valid.grader is not None and valid.grader.type == "multi"
    assert valid.grader.calculate_output == MULTI["calculate_output"]


@pytest.mark.parametrize(
    ("grader", "param", "says"),
    [
        ({**MULTI, "graders": {"exact": {**EXACT, "operation": "equals"}}}, "grader.graders.exact.operation", "eq"),
        ({**MULTI, "calculate_output": "exact + nope"}, "grader", "'nope'"),
        ({**EXACT, "reference": "{{ secrets.key }}"}, "grader.reference", "item.<path>"),
        ({**PYTHON, "source": "x = 1"}, "grader.source", "grade(sample, item)"),
        ({"type": "text_similarity", "name": "t", "input": "a", "reference": "b",
          "evaluation_metric": "meteor"}, "grader.evaluation_metric", "WordNet"),
        ({**EXACT, "type": "regex"}, "grader", "type"),
    ],
    ids=["sub-grader-field", "formula-name", "template", "python-grade", "meteor", "type"],
)  # fmt: skip
def test_a_bad_grader_is_a_400_naming_the_field(
    graders: Any, grader: dict[str, Any], param: str, says: str
) -> None:
    for endpoint, extra in ((graders.validate, {}), (graders.run, {"model_sample": "x"})):
        with pytest.raises(openai.BadRequestError) as refused:
            endpoint(grader=grader, **extra)
        assert refused.value.param == param
        assert says in refused.value.message


def test_the_graders_api_is_not_named_unsupported(client: TestClient) -> None:
    """/v1/fine_tuning/alpha is served now: an unknown path under it is a plain 404."""
    missing = client.post("/v1/fine_tuning/alpha/graders/nope", json={})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
