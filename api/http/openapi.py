"""The OpenAPI document states what the server enforces, with the settings in force: the spec's
service limits, the source and column rules, the task rules, and the bearer scheme when keys are
required. An independent fuzzer (schemathesis, tests/e2e/test_contract_fuzz.py) holds us to it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from gradacc.settings import Settings
from gradacc.sources.hub import stated_hub_ids
from trainer_core.spec.fields import BUILTIN_MODEL_TASKS
from trainer_core.spec.job import BUILTIN_DATASETS, BUILTIN_MODELS, COLUMN_PATTERN, HUB_ID_PATTERN
from trainer_core.spec.sources import FILE_ID_PREFIX, LOCAL_DATA_SUFFIXES

_NOT_A_FILE = "(?!.*(" + "|".join(s.replace(".", r"\.") for s in LOCAL_DATA_SUFFIXES) + ")$)"
# Hub ids, told from paths by their text alone: what the server reads as a local path (a data
# file suffix, a leading "/", "." or "~") must lie under a data root, which no schema can state;
# the field descriptions say so. "file-..." names an upload, which must exist (not stated
# either), and is never a hub id.
_NOT_AN_UPLOAD = f"(?!{FILE_ID_PREFIX})"
MODEL_HUB_PATTERN = "^" + _NOT_AN_UPLOAD + _NOT_A_FILE + HUB_ID_PATTERN.removeprefix("^")
DATASET_HUB_PATTERN = (
    "^(?!builtin:)"
    + _NOT_AN_UPLOAD
    + _NOT_A_FILE
    + HUB_ID_PATTERN.removeprefix("^").removesuffix("$")
) + r"(:[^\x00-\x1f]{0,900})?$"


def _source(builtins: list[str], pattern: str | None, nullable: bool = False) -> dict[str, Any]:
    options: list[dict[str, Any]] = [{"type": "string", "enum": builtins}]
    if pattern is not None:
        options.append({"type": "string", "pattern": pattern, "maxLength": 1024})
    if nullable:
        options.append({"type": "null"})
    return {"anyOf": options}


def _hub_patterns() -> tuple[str | None, str | None]:
    """Any hub id with the hub enabled; without it, only those in the server's cache (as the
    cache stood when the document was built): a hub id that cannot be had is refused at POST."""
    models, datasets = stated_hub_ids("model"), stated_hub_ids("dataset")
    if models is None or datasets is None:
        return MODEL_HUB_PATTERN, DATASET_HUB_PATTERN

    def one_of(ids: list[str]) -> str:  # hub ids hold letters, digits, "_", "-", "." and "/"
        return "(" + "|".join(repo_id.replace(".", r"\.") for repo_id in ids) + ")"

    model = f"^{one_of(models)}$" if models else None
    dataset = f"^{one_of(datasets)}" + r"(:[^\x00-\x1f]{0,900})?$" if datasets else None
    return model, dataset


def _models_without(task: str) -> list[str]:
    return [model for model, tasks in BUILTIN_MODEL_TASKS.items() if task not in tasks]


def _task_rules() -> list[dict[str, Any]]:
    """Which model and data each task accepts (JSON Schema if/then, OpenAPI 3.1)."""
    causal = {"properties": {"task": {"const": "causal-lm"}}, "required": ["task"]}
    unlabelled = [name for name, labelled in BUILTIN_DATASETS.items() if not labelled]
    return [
        {
            "if": causal,
            "then": {
                "properties": {
                    "model": {"not": {"enum": _models_without("causal-lm")}},
                    "label_column": {"type": "null"},
                }
            },
            "else": {
                "properties": {
                    "model": {"not": {"enum": _models_without("sequence-classification")}},
                    "dataset": {"not": {"enum": unlabelled}},
                    "eval_dataset": {"not": {"enum": unlabelled}},
                }
            },
        }
    ]


def _state_spec_rules(spec: dict[str, Any], settings: Settings) -> None:
    props = spec["properties"]
    props["num_train_epochs"]["maximum"] = min(
        props["num_train_epochs"]["maximum"], settings.max_epochs
    )
    for name in ("max_train_samples", "max_eval_samples"):
        for option in props[name]["anyOf"]:
            if option.get("type") == "integer":
                option["maximum"] = settings.max_samples
    props["priority"]["maximum"] = settings.max_priority
    model_hub, dataset_hub = _hub_patterns()
    props["model"] |= _source(list(BUILTIN_MODELS), model_hub)
    props["dataset"] |= _source(list(BUILTIN_DATASETS), dataset_hub)
    props["eval_dataset"] |= _source(list(BUILTIN_DATASETS), dataset_hub, nullable=True)
    props["eval_dataset"].pop("type", None)
    for name in ("model", "dataset"):
        props[name].pop("type", None)
    for name in ("text_column", "messages_column", "prompt_column", "completion_column"):
        props[name]["pattern"] = COLUMN_PATTERN
    for option in props["label_column"]["anyOf"]:
        if option.get("type") == "string":
            option["pattern"] = COLUMN_PATTERN
    spec["allOf"] = _task_rules()


def _declare_security(schema: dict[str, Any]) -> None:
    schema.setdefault("components", {})["securitySchemes"] = {
        "apiKey": {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `gradacc create-api-key --tenant NAME`",
        }
    }
    for path, operations in schema["paths"].items():
        if path.startswith("/v1"):
            for operation in operations.values():
                operation["security"] = [{"apiKey": []}]


_BODY_ERRORS = {
    "400": "The body cannot be decoded",
    "413": "Body over the configured size",
    "415": "Not sent as application/json",
}


def _declare_body_errors(schema: dict[str, Any]) -> None:
    """Every operation that reads a JSON body can answer 400, 413 and 415 (decoding, the body
    limit and the strict content type happen before any route), so each one says so."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for operations in schema["paths"].values():
        for operation in operations.values():
            if "application/json" not in operation.get("requestBody", {}).get("content", {}):
                continue
            responses = operation.setdefault("responses", {})
            for code, description in _BODY_ERRORS.items():
                responses.setdefault(code, {"description": description, "content": error})


def contract_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        _state_spec_rules(schema["components"]["schemas"]["JobCreate"], settings)
        _declare_body_errors(schema)
        if settings.require_auth:
            _declare_security(schema)
        app.openapi_schema = schema
    return app.openapi_schema


def install_openapi(app: FastAPI, settings: Settings) -> None:
    app.openapi = lambda: contract_openapi(app, settings)  # type: ignore[method-assign]
