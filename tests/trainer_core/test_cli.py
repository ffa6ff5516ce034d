"""``python -m trainer_core run``: the files a user gets, and a bad spec's exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import trainer_core.__main__ as cli

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def _cli(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with its data cache under ``home`` (default: a folder beside the spec)."""
    if home is None:
        home = Path(args[1]).parent / "home" if len(args) > 1 else Path("/nonexistent")
    return subprocess.run(
        [sys.executable, "-m", "trainer_core", *args],
        capture_output=True,
        text=True,
        env=ENV | {"GRADACC_HOME": str(home)},
        timeout=300,
        check=False,
    )


@pytest.fixture
def in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """The CLI's ``main`` in this process: (exit status, stdout, stderr). The process itself is
    run once (``_cli``, in the first test); a second interpreter that imports torch again costs
    ~4 s of CPU and proves nothing more about what ``main`` returns and prints."""

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setenv("GRADACC_HOME", str(Path(args[1]).parent / "home"))
        capsys.readouterr()
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_run_writes_metrics_summary_and_model(
    tmp_path: Path, in_process: Callable[..., tuple[int, str, str]]
) -> None:
    spec = {"model": "builtin:tiny-gpt2", "dataset": "builtin:tiny-stories", "task": "causal-lm",
            "backend": "accelerate", "num_train_epochs": 2, "max_train_samples": 50, "max_eval_samples": 10,
            "gradient_accumulation_steps": 3, "per_device_train_batch_size": 4}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = _cli("run", str(tmp_path / "spec.json"), "--output-dir", str(tmp_path / "out"),
                "--threads", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [
        json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["epoch"] for r in records] == [1, 2]
    assert all(r["eval_perplexity"] > 1 for r in records)
    assert records[1]["optimizer_steps"] == 2 * 5  # ceil(ceil(50 / 4) / 3) per epoch
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()
    assert json.loads(done.stdout)["epoch"] == 2
    steps = [
        json.loads(line) for line in (tmp_path / "out" / "steps.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in steps] == sorted({r["step"] for r in steps}) and steps[-1][
        "step"
    ] == 10
    assert all(0 <= r["padding_fraction"] < 1 for r in steps)

    # The same spec into the finished directory: said so, nothing trained or rewritten.
    metrics_before = (tmp_path / "out" / "metrics.jsonl").read_text()
    code, out, err = in_process("run", str(tmp_path / "spec.json"), "--output-dir",
                                str(tmp_path / "out"))  # fmt: skip
    assert code == 0 and "already holds a completed run" in err
    assert "--no-resume" in err and out == ""
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == metrics_before

    # Another output folder, same data: the tokenized entry of the first run is opened, not
    # built again (the same files, untouched), from the cache the service's workers use.
    (entry,) = (tmp_path / "home" / "cache" / "data").iterdir()
    built = {p.name: p.stat().st_ino for p in entry.iterdir()}
    code, _, err = in_process("run", str(tmp_path / "spec.json"), "--output-dir",
                              str(tmp_path / "other"))  # fmt: skip
    assert code == 0, err
    assert [p.name for p in (tmp_path / "home" / "cache" / "data").iterdir()] == [entry.name]
    assert {p.name: p.stat().st_ino for p in entry.iterdir()} == built


def test_progress_lines_without_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "PROGRESS_EVERY_S", 0.0)
    printer = cli.PrintEpochs(progress_lines=True)
    printer.on_step_metrics({"step": 3, "train_loss": 0.5, "eta_seconds": 12.0})
    printer.on_progress({"epoch": 1, "step": 3, "total_steps": 10})
    assert "epoch 1 step 3/10  loss 0.5  ETA 12s" in capsys.readouterr().err
    quiet = cli.PrintEpochs(progress_lines=False)  # a terminal has the bar instead
    quiet.on_progress({"epoch": 1, "step": 4, "total_steps": 10})
    assert capsys.readouterr().err == ""


def test_bad_spec_exits_non_zero_naming_the_field(
    tmp_path: Path, in_process: Callable[..., tuple[int, str, str]]
) -> None:
    bad = {
        "model": "builtin:tiny-bert",
        "dataset": "builtin:sentiment",
        "gradient_accumulation_steps": 0,
    }
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code, _, err = in_process("run", str(tmp_path / "bad.json"), "--output-dir",
                              str(tmp_path / "out"))  # fmt: skip
    assert code == 2
    assert "gradient_accumulation_steps" in err
    assert not (tmp_path / "out").exists()


def test_missing_dataset_file_is_a_job_error(
    tmp_path: Path, in_process: Callable[..., tuple[int, str, str]]
) -> None:
    spec = {"model": "builtin:tiny-bert", "dataset": str(tmp_path / "missing.csv")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code, _, err = in_process("run", str(tmp_path / "spec.json"), "--output-dir",
                              str(tmp_path / "out"))  # fmt: skip
    assert code == 3
    assert "invalid_dataset" in err and "does not exist" in err


def test_a_resumed_run_replaces_its_step_lines(tmp_path: Path) -> None:
    """The steps after the checkpoint come again on resume: replaced, never doubled."""
    path = tmp_path / "steps.jsonl"
    first = cli.StepsFile(path)
    for step in (1, 2, 3, 4):
        first.append({"step": step, "train_loss": float(step)})
    resumed = cli.StepsFile(path)  # the checkpoint was at step 2
    for step in (3, 4, 5):
        resumed.append({"step": step, "train_loss": 10.0 + step})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["step"], r["train_loss"]) for r in lines] == [
        (1, 1.0), (2, 2.0), (3, 13.0), (4, 14.0), (5, 15.0),
    ]  # fmt: skip


PROMPTS = [{"messages": [{"role": "user", "content": f"what is {i} plus {i + 2}?"}],
            "answer": str(2 * i + 2)} for i in range(4)]  # fmt: skip
GRPO = {"model": "builtin:tiny-chat", "task": "causal-lm", "method": "grpo", "max_steps": 2,
        "effective_batch_size": 8, "per_device_train_batch_size": 4, "seed": 3,
        "grpo": {"group_size": 4, "max_completion_length": 8,
                 "grader": {"type": "multi", "name": "both", "calculate_output": "eq + py",
                            "graders": {"eq": {"type": "string_check", "name": "eq",
                                               "operation": "eq",
                                               "input": "{{ sample.output_text }}",
                                               "reference": "{{ item.answer }}"},
                                        "py": {"type": "python", "name": "py",
                                               "source": "def grade(sample, item):\n"
                                                         "    return len(sample['output_text']) / 100\n"}}}}}  # fmt: skip


def test_a_grpo_job_on_a_local_prompt_file_trains(
    tmp_path: Path, in_process: Callable[..., tuple[int, str, str]]
) -> None:
    """Method grpo from the CLI on a JSONL of prompts (messages ending with the user's turn, an
    ``answer`` field): it samples, grades with the spec's grader (a python one in the sandbox)
    and trains, as the same rows do through the service. (It used to read the prompts as chat
    rows to train on and fail: "at least one assistant message to train".)"""
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in PROMPTS))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**GRPO, "dataset": str(data)}))
    code, _, err = in_process("run", str(spec), "--output-dir", str(tmp_path / "out"))
    assert code == 0, err
    steps = [
        json.loads(line) for line in (tmp_path / "out" / "steps.jsonl").read_text().splitlines()
    ]
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:  # each completion got the python grader's length score at least
        assert step["reward_mean"] > 0 and step["grader_errors"] == 0, step
        assert step["reward_mean"] == step["rewards/eq/mean"] + step["rewards/py/mean"]
    assert (tmp_path / "out" / "model" / "config.json").is_file()
