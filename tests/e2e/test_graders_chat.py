"""A model grader asks a real model: ``graders.run`` through the official SDK against a live
``gradacc serve`` (a worker and its predict server), its ``score_model`` and ``label_model``
answered by ``builtin:tiny-chat`` over the chat completions path. What the tiny model says is
not a judgement, so the test asserts the path: the call is answered (no server error), its
tokens are counted for the model, and the reward is the formula over what was read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import embedded_serve
from tests.support import serves, wait_until

pytestmark = pytest.mark.integration
MODEL = "builtin:tiny-chat"
ASK = [{"role": "user", "content": "Is {{ sample.output_text }} equal to {{ item.answer }}?"}]


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with embedded_serve(tmp_path_factory.mktemp("graders")) as (url, _):
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        # The predict server listens once torch is imported: a 503 until then.
        wait_until(lambda: serves(sdk, MODEL), what="the predict server", timeout=60, every=0.5)
        yield sdk


def test_model_graders_are_answered_by_this_servers_model(sdk: openai.OpenAI) -> None:
    score = {"type": "score_model", "name": "score", "model": MODEL, "input": ASK,
             "sampling_params": {"max_completions_tokens": 4, "temperature": 0}}  # fmt: skip
    label = {"type": "label_model", "name": "label", "model": MODEL, "input": ASK,
             "labels": ["yes", "no"], "passing_labels": ["yes"]}  # fmt: skip
    multi: Any = {"type": "multi", "name": "judges", "graders": {"score": score, "label": label},
             "calculate_output": "score + label"}  # fmt: skip
    ran = sdk.fine_tuning.alpha.graders.run(grader=multi, model_sample="5", item={"answer": "5"})
    errors = ran.metadata.errors
    assert not errors.api_model_grader_server_error, errors.api_model_grader_server_error_details
    usage = ran.api_model_grader_token_usage_per_model[MODEL]
    assert isinstance(usage, dict) and usage["completion_tokens"] >= 2  # both asked, both answered
    assert ran.metadata.token_usage == usage["total_tokens"] > usage["completion_tokens"]
    sub = {name: float(str(value)) for name, value in ran.sub_rewards.items()}
    assert set(sub) == {"score", "label"} and ran.reward == pytest.approx(
        sub["score"] + sub["label"]
    )
