"""OpenAI's ``method: reinforcement`` as a ``grpo`` job spec: its grader parsed (a bad field is a
400 at ``method.reinforcement.grader.…``), each "auto" resolved and the hyperparameters mapped
onto the spec's ``grpo`` object. The rules are written out in docs/openai.md, "Reinforcement
fine-tuning"."""

from __future__ import annotations

from typing import Any

from api.schemas.openai import FineTuningJobCreate
from api.schemas.openai_hyperparameters import ReinforcementHyperparameters
from api.services import graders as grader_services
from gradacc.errors import InvalidRequest
from gradacc.openai.names import REINFORCEMENT_FIELDS
from trainer_core.spec.graders import Grader
from trainer_core.spec.grpo import GrpoSettings

HYPERPARAMETERS = "method.reinforcement.hyperparameters"
# The group size that compute_multiplier 1 ("auto") samples: the spec's default (TRL's 8).
BASE_GROUP_SIZE = int(GrpoSettings.model_fields["group_size"].default)
MAX_GROUP_SIZE = 256
MAX_AUTO_EVAL_SAMPLES = 64


def parsed_grader(body: FineTuningJobCreate) -> Grader:
    """The job's grader, or a 400 naming the field at fault under ``method.reinforcement``."""
    assert body.method is not None and body.method.reinforcement is not None
    try:
        return grader_services.parse(body.method.reinforcement.grader)
    except InvalidRequest as exc:
        message = exc.message.removeprefix(f"{exc.param}: ")
        raise InvalidRequest(
            message,
            param=f"method.reinforcement.{exc.param}",
            errors=[f"method.reinforcement.{e}" for e in exc.errors or []],
        ) from None


def group_size_for(compute_multiplier: float) -> int:
    """The completions sampled per prompt: the base group of 8 scaled, from 2 (a group's
    advantages need two answers to compare) to 256."""
    return max(2, min(MAX_GROUP_SIZE, round(BASE_GROUP_SIZE * compute_multiplier)))


def resolve(
    chosen: ReinforcementHyperparameters, common: dict[str, Any], rows: int, valid_rows: int
) -> dict[str, Any]:
    """The numbers each "auto" stands for, on top of the ``common`` three (resolved as for every
    method, ``batch_size`` in prompts), with ``rows`` prompts in the training file and
    ``valid_rows`` in the validation file; 400 for a batch or an evaluation the files cannot
    fill."""
    batch = common["batch_size"]
    if batch > rows:
        raise InvalidRequest(
            f"a step takes {batch} prompts, and the training file holds {rows}",
            param=f"{HYPERPARAMETERS}.batch_size",
        )
    samples = chosen.eval_samples
    if samples == "auto":
        samples = min(valid_rows, MAX_AUTO_EVAL_SAMPLES)
    elif samples > valid_rows:
        raise InvalidRequest(
            f"an evaluation takes {samples} prompts, and the validation file holds {valid_rows}",
            param=f"{HYPERPARAMETERS}.eval_samples",
        )
    multiplier, interval = chosen.compute_multiplier, chosen.eval_interval
    return common | {
        "compute_multiplier": 1.0 if multiplier == "auto" else float(multiplier),
        # "auto": one evaluation an epoch (steps per epoch: the whole batches of prompts)
        "eval_interval": rows // batch if interval == "auto" else interval,
        "eval_samples": samples,
        "reasoning_effort": chosen.reasoning_effort,
    }


def grpo_fields(
    body: FineTuningJobCreate, resolved: dict[str, Any], grader: Grader
) -> tuple[dict[str, Any], int]:
    """The spec's ``method`` and ``grpo`` object (``gradacc.grpo`` adds the loss and sampling
    settings the body has no word for), and the effective batch in the spec's unit: completions,
    ``batch_size`` prompts times the group size."""
    extra = (body.gradacc or {}).get("grpo") or {}
    if not isinstance(extra, dict):
        raise InvalidRequest("an object of the spec's grpo settings", param="gradacc.grpo")
    taken = sorted(set(extra) & set(REINFORCEMENT_FIELDS))
    if taken:
        raise InvalidRequest(
            f"set by {REINFORCEMENT_FIELDS[taken[0]]} in the fine-tuning body",
            param=f"gradacc.grpo.{taken[0]}",
        )
    group = group_size_for(resolved["compute_multiplier"])
    grpo = {
        **extra,
        "grader": grader.model_dump(mode="json", exclude_none=True),
        "group_size": group,
        "eval_interval": resolved["eval_interval"],
        "eval_samples": resolved["eval_samples"],
    }
    return {"method": "grpo", "grpo": grpo}, resolved["batch_size"] * group


def method_echo(body: FineTuningJobCreate, resolved: dict[str, Any]) -> dict[str, Any]:
    """The job object's ``method``, as OpenAI echoes it: the grader as given (the spec holds it
    as parsed) and every hyperparameter resolved."""
    assert body.method is not None and body.method.reinforcement is not None
    given = body.method.reinforcement.grader
    return {
        "type": "reinforcement",
        "reinforcement": {"grader": given, "hyperparameters": resolved},
    }
