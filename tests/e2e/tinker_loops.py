"""tinker-cookbook 0.6.1's four training loops, unmodified, on tiny settings against a Tinker
server: the supervised loop on a conversation file, the RL loop on the cookbook's arithmetic
environment, the DPO recipe on a comparisons file (``forward_backward_custom``), on-policy
distillation from the base model as teacher. Each with ``renderer_name="role_colon"`` and the
tokenizer read from ``gradacc/tiny-chat`` under the working directory (``gradacc
tinker-tokenizers --dir``). Each returns its final checkpoints (``checkpoints.jsonl``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tinker_cookbook.distillation import train_on_policy
from tinker_cookbook.distillation.datasets import DistillationDatasetConfig, TeacherConfig
from tinker_cookbook.preference import train_dpo
from tinker_cookbook.preference.dpo_datasets import DPODatasetBuilderFromComparisons
from tinker_cookbook.preference.preference_datasets import ComparisonBuilderFromJsonl
from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
from tinker_cookbook.rl import train as rl_train
from tinker_cookbook.supervised import train as sl_train
from tinker_cookbook.supervised.data import FromConversationFileBuilder
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

MODEL = "gradacc/tiny-chat"
RENDERER = "role_colon"
SMALL: dict[str, Any] = {"model_name": MODEL, "renderer_name": RENDERER, "recipe_name": "test",
                         "lora_rank": 4, "learning_rate": 1e-3}  # fmt: skip


def _lines(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _final(log: Path) -> dict[str, Any]:
    records = [json.loads(line) for line in (log / "checkpoints.jsonl").read_text().splitlines()]
    return next(r for r in records if r.get("name") == "final")


def _common(batch: int) -> ChatDatasetBuilderCommonConfig:
    return ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=MODEL, renderer_name=RENDERER, max_length=64, batch_size=batch
    )


def supervised(url: str, folder: Path) -> dict[str, Any]:
    rows = [{"messages": [{"role": "user", "content": f"what is {i} plus {i}"},
                          {"role": "assistant", "content": str(2 * i)}]} for i in range(8)]  # fmt: skip
    data = FromConversationFileBuilder(
        common_config=_common(4), file_path=_lines(folder / "c.jsonl", rows)
    )
    log = folder / "sl"
    config = sl_train.Config(
        log_path=str(log), dataset_builder=data, base_url=url, save_every=1, **SMALL
    )
    asyncio.run(sl_train.main(config))
    return _final(log)


def _arithmetic() -> ArithmeticDatasetBuilder:
    return ArithmeticDatasetBuilder(
        batch_size=2,
        model_name_for_tokenizer=MODEL,
        renderer_name=RENDERER,
        n_batches=2,
        group_size=2,
    )


def reinforcement(url: str, folder: Path) -> dict[str, Any]:
    log = folder / "rl"
    config = rl_train.Config(log_path=str(log), dataset_builder=_arithmetic(), base_url=url,
                             max_tokens=6, save_every=1, eval_every=0, **SMALL)  # fmt: skip
    asyncio.run(rl_train.main(config))
    return _final(log)


def preference(url: str, folder: Path) -> dict[str, Any]:
    rows = []
    for i in range(4):
        pair = {"prompt_conversation": [{"role": "user", "content": f"what is {i} plus 1"}],
                "completion_A": [{"role": "assistant", "content": str(i + 1)}],
                "completion_B": [{"role": "assistant", "content": str(i + 2)}]}  # fmt: skip
        rows.append({"comparison": pair, "label": "A"})
    comparisons = ComparisonBuilderFromJsonl(train_path=_lines(folder / "p.jsonl", rows))
    data = DPODatasetBuilderFromComparisons(
        common_config=_common(2), comparison_builder=comparisons
    )
    log = folder / "dpo"
    train_dpo.main(train_dpo.Config(log_path=str(log), dataset_builder=data, base_url=url, **SMALL))
    return _final(log)


def distillation(url: str, folder: Path) -> dict[str, Any]:
    teacher = TeacherConfig(base_model=MODEL)
    data = DistillationDatasetConfig(
        dataset_builder=_arithmetic(), teacher_config=teacher, groups_per_batch=2
    )
    log = folder / "distill"
    config = train_on_policy.Config(log_path=str(log), dataset_configs=[data], base_url=url,
                                    max_tokens=6, eval_every=0, save_every=0, **SMALL)  # fmt: skip
    asyncio.run(train_on_policy.main(config))
    return _final(log)


LOOPS = {
    "supervised": supervised,
    "rl": reinforcement,
    "dpo": preference,
    "distillation": distillation,
}
