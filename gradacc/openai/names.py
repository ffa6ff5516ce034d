"""Our metric names in OpenAI's words, for its metrics events, checkpoints and results file.

A dpo job's records also carry the pair metrics (``rewards/chosen``, ...: window means over its
pairs, ``eval_``-prefixed for an evaluation). OpenAI names no public fields for them; here they
follow its own pattern, ``train_``/``valid_`` and the name with "/" as "_" (``train_rewards_
accuracies``, ``valid_logps_chosen``), and appear only where a record has them."""

from __future__ import annotations

from typing import Any

# spec field -> the OpenAI field that sets it (a fine-tuning job's errors name that field)
OPENAI_FIELDS = {
    "model": "model",
    "dataset": "training_file",
    "eval_dataset": "validation_file",
    "num_train_epochs": "hyperparameters.n_epochs",
    "effective_batch_size": "hyperparameters.batch_size",
    "seed": "seed",
    "method": "method.type",
    "dpo_beta": "hyperparameters.beta",
    "tools": "tools",  # no spec field: a training file's function calling, named as OpenAI does
}
# step record key -> the name in a fine-tuning job's metrics events and checkpoint metrics
EVENT_METRICS = {
    "step": "step",
    "train_loss": "train_loss",
    "eval_loss": "valid_loss",
    "train_mean_token_accuracy": "train_mean_token_accuracy",
    "eval_mean_token_accuracy": "valid_mean_token_accuracy",
}
# step record key -> the column of the results file (``step_metrics.csv``), in its order
RESULT_COLUMNS = {
    "step": "step",
    "train_loss": "train_loss",
    "train_mean_token_accuracy": "train_accuracy",
    "eval_loss": "valid_loss",
    "eval_mean_token_accuracy": "valid_mean_token_accuracy",
}


# The core's pair metrics (``trainer_core.accumulation.PAIR_METRICS``, not imported: it loads
# torch, which the API never does; a test holds the two equal).
PAIR_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
                "logps/chosen", "logps/rejected")  # fmt: skip
# record key -> OpenAI-style name, training's then evaluation's
PAIR_NAMES = {
    **{key: "train_" + key.replace("/", "_") for key in PAIR_METRICS},
    **{f"eval_{key}": "valid_" + key.replace("/", "_") for key in PAIR_METRICS},
}
# An evaluation's figures (record key -> its names): OpenAI's ``full_valid_*`` too, since an
# evaluation here always covers the whole validation set.
EVALUATION_NAMES = {
    "eval_loss": ("valid_loss", "full_valid_loss"),
    "eval_mean_token_accuracy": ("valid_mean_token_accuracy", "full_valid_mean_token_accuracy"),
    **{f"eval_{key}": (PAIR_NAMES[f"eval_{key}"],) for key in PAIR_METRICS},
}


def openai_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """A step or epoch record's figures under OpenAI's names (None where the record has none);
    pair metrics only where the record has them (a dpo job's)."""
    found = {name: record.get(key) for key, name in EVENT_METRICS.items()}
    return found | {name: record[key] for key, name in PAIR_NAMES.items() if key in record}


def evaluation_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch's evaluation figures under every name OpenAI gives them (pairs: where present)."""
    return {
        name: record.get(key)
        for key, names in EVALUATION_NAMES.items()
        if key in record or key in EVENT_METRICS
        for name in names
    }


def result_columns(records: list[dict[str, Any]]) -> dict[str, str]:
    """The results file's columns: OpenAI's, then the pair metrics when any record has them."""
    pairs = any(key in record for record in records for key in PAIR_NAMES)
    return RESULT_COLUMNS | (PAIR_NAMES if pairs else {})


def openai_param(param: str, method: str = "supervised") -> str:
    """A spec field (``dataset``, ``lora.r``) as a fine-tuning body names it (``training_file``,
    ``gradacc.lora.r``); a dpo job's hyperparameters are under ``method.dpo``."""
    field, _, rest = param.partition(".")
    named = OPENAI_FIELDS.get(field, f"gradacc.{field}") + (f".{rest}" if rest else "")
    if method != "supervised" and named.startswith("hyperparameters."):
        return f"method.{method}.{named}"
    return named
