"""Our metric names in OpenAI's words, for its metrics events, checkpoints and results file."""

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


def openai_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """A step or epoch record's figures under OpenAI's names (None where the record has none)."""
    return {name: record.get(key) for key, name in EVENT_METRICS.items()}


def openai_param(param: str, method: str = "supervised") -> str:
    """A spec field (``dataset``, ``lora.r``) as a fine-tuning body names it (``training_file``,
    ``gradacc.lora.r``); a dpo job's hyperparameters are under ``method.dpo``."""
    field, _, rest = param.partition(".")
    named = OPENAI_FIELDS.get(field, f"gradacc.{field}") + (f".{rest}" if rest else "")
    if method != "supervised" and named.startswith("hyperparameters."):
        return f"method.{method}.{named}"
    return named
