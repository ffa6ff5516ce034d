"""What a model grader may name (``check_grader_models``, the one check a job's POST,
``graders/validate`` and ``graders/run`` share) and how its chat asks (``served_chat``, a
training job's graders and ``graders/run`` alike), on a real migrated SQLite database. The
upstream is a stand-in HTTP server on this machine (no OpenAI-compatible server runs here);
no predict server runs, so this server's own models answer 503 ``no predict server is up``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gradacc.alias_setting import parse_aliases
from gradacc.db import get_sessionmaker, session_scope
from gradacc.errors import InvalidRequest
from gradacc.serving.ask import served_chat
from gradacc.serving.grader_models import check_grader_models
from gradacc.settings import Settings
from gradacc.tables import JobStatus
from gradacc.upstreams import parse_upstreams
from tests.support import make_job
from tests.upstream_stub import StubUpstream, stub_upstream
from trainer_core.graders import Grading, run_grader
from trainer_core.spec.graders import parse_grader

ASK = [{"role": "user", "content": "Rate {{ sample.output_text }}"}]


def own_model(settings: Settings, tenant: str) -> str:
    """A finished causal-LM job of ``tenant``'s with a saved model: their ``ft:`` model."""
    spec = {"model": "builtin:tiny-chat", "task": "causal-lm", "dataset": "builtin:chat-arithmetic"}
    job_id = make_job(settings, tenant=tenant, status=JobStatus.SUCCEEDED, spec=spec)
    folder = settings.jobs_dir / job_id / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # what resolving the name looks for
    return f"ft:builtin:tiny-chat:{tenant}::{job_id}"


def score(model: str) -> dict[str, Any]:
    return {"type": "score_model", "name": "judge", "model": model, "input": ASK}


def multi(model: str) -> dict[str, Any]:
    label = {"type": "label_model", "name": "l", "model": model, "input": ASK,
             "labels": ["yes", "no"], "passing_labels": ["yes"]}  # fmt: skip
    return {"type": "multi", "name": "m", "calculate_output": "s + l",
            "graders": {"s": score("builtin:tiny-chat"), "l": label}}  # fmt: skip


@pytest.fixture
def upstream() -> Iterator[StubUpstream]:
    with stub_upstream(StubUpstream(content='{"result": 0.75}')) as stub:
        yield stub


@pytest.fixture
def settings(embedded_settings: Settings, upstream: StubUpstream) -> Settings:
    """Routes: ``judge-*`` to the stand-in as ``*`` (its own key), and ``up/*`` likewise (a route
    that rewrites to whatever follows, this server's own names included); operator aliases:
    alice's ``house-judge`` for bob's model, everyone's ``gpt-4o*`` for the built-in."""
    routes = {p: {"base_url": upstream.url, "api_key": "sk-up", "model": "*"}
              for p in ("judge-*", "up/*")}  # fmt: skip
    update = {"serve_upstreams": parse_upstreams(json.dumps(routes), environ={})}
    return embedded_settings.model_copy(update=update)


def refusal(settings: Settings, grader: dict[str, Any], tenant: str = "alice") -> InvalidRequest:
    with session_scope(settings) as session, pytest.raises(InvalidRequest) as refused:
        check_grader_models(session, settings, parse_grader(grader), tenant=tenant, where="grader")
    return refused.value


def test_what_answers_for_the_tenant_passes(settings: Settings) -> None:
    """A built-in, the tenant's own ``ft:`` model, a routed name, an alias to a built-in: each
    passes, alone and in a multi; nothing is asked to check them."""
    mine = own_model(settings, "alice")
    aliased = settings.model_copy(
        update={"serve_aliases": parse_aliases(json.dumps({"*": {"gpt-4o*": mine}}))}
    )
    for model in ("builtin:tiny-chat", mine, "judge-small", f"up/{mine}", "gpt-4o-mini"):
        for grader in (score(model), multi(model)):
            with session_scope(aliased) as session:
                check_grader_models(
                    session, aliased, parse_grader(grader), tenant="alice", where="grader"
                )


def test_what_answers_for_no_one_here_is_refused_naming_the_field(settings: Settings) -> None:
    """A name nothing answers to, another tenant's ``ft:`` model (through a route's rewrite or an
    alias too), a classifier: a 400 naming the grader's ``model`` by its path, whatever the
    path's prefix; the first failing grader of a multi is named."""
    bobs = own_model(settings, "bob")
    aliased = settings.model_copy(
        update={"serve_aliases": parse_aliases(json.dumps({"alice": {"house-judge": bobs}}))}
    )
    cases = [("no-such-model", "does not exist"), (bobs, "does not exist"),
             (f"up/{bobs}", "does not exist"), ("house-judge", "does not exist"),
             ("builtin:tiny-bert", "cannot grade: builtin:tiny-bert is not a language model")]  # fmt: skip
    paths = [(score, "grader.model"), (multi, "grader.graders.l.model")]
    for model, says in cases:
        for grader, param in paths:
            refused = refusal(aliased, grader(model))
            assert refused.param == param, (model, refused.message)
            assert says in refused.message and refused.code == "invalid_request"
    assert "one of your fine-tuned models" in refusal(settings, score("nope")).message
    # Bob's model is his to grade with; the path's prefix is the caller's.
    with session_scope(settings) as session, pytest.raises(InvalidRequest) as elsewhere:
        check_grader_models(
            session, settings, parse_grader(score("nope")), tenant="bob", where="grpo.grader"
        )
    assert elsewhere.value.param == "grpo.grader.model"
    with session_scope(settings) as session:
        check_grader_models(session, settings, parse_grader(score(bobs)), tenant="bob", where="g")


def test_a_longer_answer_than_our_predict_servers_give_is_refused(settings: Settings) -> None:
    """Past ``GRADACC_SERVE_MAX_COMPLETION_TOKENS`` a predict server refuses every request: said
    by the check, naming the field; an upstream's limits are its own."""
    limit = settings.serve_max_completion_tokens
    longer = {"sampling_params": {"max_completions_tokens": limit + 1}}
    refused = refusal(settings, {**score("builtin:tiny-chat"), **longer})
    assert refused.param == "grader.sampling_params.max_completions_tokens"
    assert f"at most {limit}" in refused.message
    upstream = parse_grader({**score("judge-small"), **longer})
    with session_scope(settings) as session:
        check_grader_models(session, settings, upstream, tenant="alice", where="grader")


def test_served_chat_scores_through_an_upstream_route(
    settings: Settings, upstream: StubUpstream
) -> None:
    """The request as OpenAI's chat completions take it (the route's model name, its own key, the
    grader's sampling), the reply read into a score and its tokens counted."""
    chat = served_chat(get_sessionmaker(settings), settings, "alice")
    grader = parse_grader({**score("judge-small"),
                           "sampling_params": {"temperature": 0.5, "seed": 3}})  # fmt: skip
    result = run_grader(grader, "four", {}, Grading(chat=chat))
    assert result.reward == 0.75 and not result.failed_kinds
    assert result.usage_per_model == {"judge-small": {"prompt_tokens": 7, "completion_tokens": 3,
                                                      "total_tokens": 10}}  # fmt: skip
    sent = upstream.seen[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-up"
    assert sent["model"] == "small" and sent["temperature"] == 0.5 and sent["seed"] == 3
    assert sent["messages"] == [{"role": "user", "content": "Rate four"}]


def test_served_chat_waits_for_a_predict_server_only_while_told(settings: Settings) -> None:
    """No predict server is up: with ``waiting`` it asks again while ``waiting()`` says so (a
    job until its stop signal), then the sample scores 0 as ``model_grader_server_error``; a
    model that is not the tenant's is not waited for (a 404 is no one's to fix by waiting)."""
    bobs = own_model(settings, "bob")
    asked: list[str] = []

    def waiting() -> bool:
        asked.append("again")
        return len(asked) < 3

    chat = served_chat(get_sessionmaker(settings), settings, "alice", waiting=waiting, retry_s=0)
    failed = run_grader(parse_grader(score("builtin:tiny-chat")), "4", {}, Grading(chat=chat))
    assert failed.failed_kinds == ["model_grader_server_error"] and len(asked) == 3
    assert "no predict server is up" in failed.details["model_grader_server_error_details"]
    asked.clear()
    other = run_grader(parse_grader(score(bobs)), "4", {}, Grading(chat=chat))
    assert other.failed_kinds == ["model_grader_server_error"] and asked == []
    assert "404" in other.details["model_grader_server_error_details"]
