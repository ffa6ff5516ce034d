"""``gradacc preview FILE --model M``: the trained tokens marked, the counts and warnings printed,
``--json`` the core's preview; a bad field is an exit status 2 naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.cli import main
from tests.api.test_chat_data import GOOD, jsonl
from trainer_core.preview import NOTHING


def test_preview_prints_trained_tokens_and_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_bytes(jsonl(GOOD))
    assert main(["preview", str(data), "--model", "builtin:tiny-chat", "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "row 2:" in out and "[[2.<|im_end|>]]\n" in out  # the newline after it: untrained
    assert (
        main(
            [
                "preview",
                str(data),
                "--model",
                "builtin:tiny-chat",
                "--json",
                "--max-seq-length",
                "8",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["total"] for r in rows] == [8, 8] and NOTHING in rows[0]["warnings"]
    assert main(["preview", str(data), "--model", "builtin:tiny-gpt2"]) == 2
    assert "chat_template" in capsys.readouterr().out


def test_preview_prints_the_memory_plan_against_a_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_bytes(jsonl(GOOD))
    args = [
        "preview",
        str(data),
        "--model",
        "builtin:qwen3-1.7b-shape",
        "--rows",
        "1",
        "--batch-size",
        "2",
        "--device-memory-gb",
        "24",
    ]
    assert main(args) == 0
    full = capsys.readouterr().out.splitlines()[-1]
    assert full.startswith("memory plan per device: weights 6.41 GiB") and "does NOT fit" in full
    assert main([*args, "--lora-r", "16", "--gradient-checkpointing"]) == 0
    adapted = capsys.readouterr().out.splitlines()[-1]
    assert "(checkpointed)" in adapted and adapted.endswith("of 24.00 GiB fits")
