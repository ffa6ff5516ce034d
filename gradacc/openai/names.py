"""Our metric names in OpenAI's words, for its metrics events, checkpoints and results file.

A dpo job's records also carry the pair metrics (``rewards/chosen``, ...: window means over its
pairs, ``eval_``-prefixed for an evaluation). OpenAI names no public fields for them; here they
follow its own pattern, ``train_``/``valid_`` and the name with "/" as "_" (``train_rewards_
accuracies``, ``valid_logps_chosen``), and appear only where a record has them.

A reinforcement job's step records carry its reward metrics (``reward_mean``, ``rewards/<grader>/
mean``, ``grader_errors/<kind>``, ``completion_length``, ``clip_ratio``, ``kl``, ...; an
evaluation's with ``eval_``). They are named by the same pattern (``train_reward_mean``,
``train_rewards_exact_mean``, ``valid_reward_mean``, ``train_grader_errors_python_grader_
runtime_error``), also only where a record has them."""

from __future__ import annotations

from typing import Any

from trainer_core.spec.dpo import PAIR_METRICS

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


# A reinforcement job's step metrics (``trainer_core.grpo.metrics``, and the loss's own)
REINFORCEMENT_METRICS = (
    "reward_mean",
    "reward_std",
    "completion_length",
    "truncated_fraction",
    "clip_ratio",
    "kl",
    "grader_errors",
)


def _reinforcement_key(key: str) -> bool:
    """A reinforcement metric: the fixed ones, a sub-grader's ``rewards/<name>/mean`` (or
    ``/std``: never a dpo pair metric, which has no third part) and ``grader_errors/<kind>``."""
    if key in REINFORCEMENT_METRICS or key.startswith("grader_errors/"):
        return True
    return key.startswith("rewards/") and key.endswith(("/mean", "/std")) and key.count("/") >= 2


def reinforcement_names(record: dict[str, Any]) -> dict[str, str]:
    """The record's reinforcement keys -> their OpenAI-style names, in the record's order."""
    names = {}
    for key in record:
        training = key.removeprefix("eval_")
        if _reinforcement_key(training):
            prefix = "train_" if training == key else "valid_"
            names[key] = prefix + training.replace("/", "_")
    return names


def openai_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """A step or epoch record's figures under OpenAI's names (None where the record has none);
    pair and reinforcement metrics only where the record has them (a dpo or grpo job's)."""
    found = {name: record.get(key) for key, name in EVENT_METRICS.items()}
    found |= {name: record[key] for key, name in PAIR_NAMES.items() if key in record}
    return found | {name: record[key] for key, name in reinforcement_names(record).items()}


def evaluation_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch's evaluation figures under every name OpenAI gives them (pairs: where present)."""
    return {
        name: record.get(key)
        for key, names in EVALUATION_NAMES.items()
        if key in record or key in EVENT_METRICS
        for name in names
    }


def result_columns(records: list[dict[str, Any]]) -> dict[str, str]:
    """The results file's columns: OpenAI's, then the pair metrics when any record has them,
    then each reinforcement metric some record has (in the order first met)."""
    pairs = any(key in record for record in records for key in PAIR_NAMES)
    rewards = {key: name for record in records for key, name in reinforcement_names(record).items()}
    return RESULT_COLUMNS | (PAIR_NAMES if pairs else {}) | rewards


# A reinforcement job's spec ``grpo`` fields that its body sets (the others are gradacc.grpo's)
REINFORCEMENT_FIELDS = {
    "grader": "method.reinforcement.grader",
    "group_size": "method.reinforcement.hyperparameters.compute_multiplier",
    "eval_interval": "method.reinforcement.hyperparameters.eval_interval",
    "eval_samples": "method.reinforcement.hyperparameters.eval_samples",
}


def openai_param(param: str, method: str = "supervised") -> str:
    """A spec field (``dataset``, ``lora.r``) as a fine-tuning body names it (``training_file``,
    ``gradacc.lora.r``); a dpo job's hyperparameters are under ``method.dpo``, a reinforcement
    job's and its grader under ``method.reinforcement`` (``grpo.grader.model`` is
    ``method.reinforcement.grader.model``)."""
    field, _, rest = param.partition(".")
    name, _, deeper = rest.partition(".")
    if field == "grpo" and name in REINFORCEMENT_FIELDS:
        return REINFORCEMENT_FIELDS[name] + (f".{deeper}" if deeper else "")
    named = OPENAI_FIELDS.get(field, f"gradacc.{field}") + (f".{rest}" if rest else "")
    if method != "supervised" and named.startswith("hyperparameters."):
        return f"method.{method}.{named}"
    return named
