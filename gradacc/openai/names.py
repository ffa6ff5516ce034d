"""Our metric names in OpenAI's words, for its metrics events, checkpoints and results file."""

from __future__ import annotations

from typing import Any

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
