"""Data parallelism over 2 CPU processes (torchrun, gloo), for every backend: world size 2 with K
gives the weights of world size 1 with 2K and of (2b, K) on one process, with one gradient
all-reduce per optimizer window, metrics over the whole data set, and a kill -9 resume. Packed chat
(``packing: true``) at world size 2 trains the padded single process's weights at 2K."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import Hold
from tests.trainer_core.helpers import (
    CAUSAL,
    CHAT,
    CLASSIFICATION,
    Weights,
    final_weights,
    initial_weights,
    make_spec,
    max_abs_diff,
    run,
    tolerance,
)
from trainer_core.distributed import World, shard
from trainer_core.spec.errors import JobError
from trainer_core.spec.job import JobSpec
from trainer_core.testing.recorder import Recorder
from trainer_core.train import train

TASKS: dict[str, dict[str, Any]] = {"classification": CLASSIFICATION, "causal-lm": CAUSAL,
                                    "chat": CHAT, "chat-packed": {**CHAT, "packing": True}}  # fmt: skip
# What a pair's two-rank run is compared with on one process: packing is a layout, so the packed
# ranks must train the padded process's weights, losses and metrics.
REFERENCE = {"chat-packed": "chat"}
# (task, backend) pairs trained at world size 2 in one torchrun launch (imports paid once). Chat:
# every rank divides by the window's trained tokens over both ranks (masked turns and all).
PAIRS = [("classification", b) for b in ("pytorch", "accelerate", "trainer")] + [
    ("causal-lm", "pytorch"),
    ("chat", "pytorch"),
    ("chat-packed", "pytorch"),  # each rank packs its share of every global micro-batch
]
B, K = 4, 2
ROOT = Path(__file__).resolve().parents[2]


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    """torchrun whose ranks are forked from its warm agent (``forked_torchrun``): a two-rank
    launch pays the imports once, not three times."""
    launcher = [sys.executable, "-m", "tests.trainer_core.forked_torchrun", "--standalone"]
    return [*launcher, f"--nproc_per_node={nproc}", *args]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # tests.*
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path,
            **(extra or {})}  # fmt: skip


def _two_rank_spec(task: str, backend: str) -> dict[str, Any]:
    spec = make_spec(TASKS[task], backend=backend, per_device_train_batch_size=B,
                     gradient_accumulation_steps=K, num_processes=2, device="cpu",
                     logging_steps=1)  # fmt: skip
    return spec.model_dump()


def train_on_two_ranks(root: Path, jobs: list[dict[str, Any]]) -> None:
    """Every job ({spec, out}) trained in turn by one torchrun of 2 ranks (``dist_runner``):
    one start-up for the lot."""
    (root / "jobs.json").write_text(json.dumps(jobs))
    runner = str(Path(__file__).with_name("dist_runner.py"))
    done = subprocess.run(
        torchrun(runner, str(root / "jobs.json")), env=_env(), capture_output=True, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each pair trained with (b, K) = (4, 2) on 2 processes; its output directory."""
    root = tmp_path_factory.mktemp("ddp")
    outs = {pair: root / "-".join(pair) for pair in PAIRS}
    jobs = [{"spec": _two_rank_spec(task, backend), "out": str(outs[(task, backend)])}
            for task, backend in PAIRS]  # fmt: skip
    train_on_two_ranks(root, jobs)
    return outs


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Any:
    Run = tuple[Weights, list[dict[str, Any]], list[dict[str, Any]]]
    cache: dict[tuple[str, int, int], Run] = {}

    def get(task: str, b: int, k: int) -> Run:
        """(final weights, epoch metrics, step records) of one process with (b, k)."""
        if (task, b, k) not in cache:
            spec = make_spec(TASKS[task], per_device_train_batch_size=b,
                             gradient_accumulation_steps=k, logging_steps=1)  # fmt: skip
            out = tmp_path_factory.mktemp(f"single-{task}-{b}x{k}")
            steps = Recorder()
            metrics = run(spec, out, callback=steps).metrics
            cache[(task, b, k)] = (final_weights(out), metrics, steps.steps)
        return cache[(task, b, k)]

    return get


def _report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / "comm.json").read_text())
    return report


@pytest.mark.parametrize(("task", "backend"), PAIRS)
def test_two_ranks_equal_one_process(
    two_ranks: dict[tuple[str, str], Path], single: Any, task: str, backend: str
) -> None:
    out = two_ranks[(task, backend)]
    ranks = final_weights(out)
    bound = tolerance(initial_weights(make_spec(TASKS[task])), ranks)
    assert bound > 1e-6, "training must move the weights for the comparison to mean anything"
    # World size 1 with 2K; and (2b, K) on one process (classification only, to save CI time).
    for b, k in ((B, 2 * K), (2 * B, K))[: 2 if task == "classification" else 1]:
        weights, metrics, steps = single(REFERENCE.get(task, task), b, k)
        gap = max_abs_diff(ranks, weights)
        print(f"{task} {backend} W=2 vs ({b},{k}) on one process: {gap:.2e} (bound {bound:.2e})")
        assert gap <= bound, (b, k)
    # Rank 0's metrics cover both ranks' rows and the whole eval set, as one process's do.
    for mine, theirs in zip(_report(out)["metrics"], metrics, strict=True):
        assert mine["train_samples"] == theirs["train_samples"] == 101  # none duplicated
        assert mine["train_items"] == theirs["train_items"]  # N_W over both ranks, packed or not
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-4)
        assert mine["eval_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-4)
        assert mine.get("eval_accuracy") == theirs.get("eval_accuracy")
        if task.startswith("chat"):
            assert mine["eval_mean_token_accuracy"] == pytest.approx(
                theirs["eval_mean_token_accuracy"], rel=1e-6
            )
        assert mine["optimizer_steps"] == theirs["optimizer_steps"]
    # Step records too: each window's loss over both ranks' rows, as one process's window.
    mine_steps = _report(out)["steps"]
    assert [r["step"] for r in mine_steps] == [r["step"] for r in steps] == list(range(1, 15))
    for mine, theirs in zip(mine_steps, steps, strict=True):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-4), mine["step"]


def test_half_the_window_is_told_apart(two_ranks: dict[tuple[str, str], Path], single: Any) -> None:
    """Negative control: one process with K (half the effective batch) is far outside the bound."""
    ranks = final_weights(two_ranks[("classification", "pytorch")])
    bound = tolerance(initial_weights(make_spec(CLASSIFICATION)), ranks)
    assert max_abs_diff(ranks, single("classification", B, K)[0]) > 10 * bound


@pytest.mark.parametrize(("task", "backend"), PAIRS)
def test_one_all_reduce_per_window(
    two_ranks: dict[tuple[str, str], Path], task: str, backend: str
) -> None:
    report = _report(two_ranks[(task, backend)])
    steps = report["metrics"][-1]["optimizer_steps"]
    assert report["models"] == 1
    assert steps == 2 * 7  # 2 epochs of ceil(101 / (4·2·2)) windows, the last one partial
    assert report["syncs"] == steps  # not K per window: no_sync held the others back


def test_shard_splits_without_duplicates() -> None:
    rows = list(range(11))
    shares = [shard(rows, World(rank=r, size=3)) for r in range(3)]
    assert sorted(row for share in shares for row in share) == rows
    assert [len(s) for s in shares] == [3, 4, 4]
    assert [shard([5], World(rank=r, size=2)) for r in range(2)] == [[], [5]]


def test_world_size_must_match_the_spec(tmp_path: Path) -> None:
    spec = make_spec(CLASSIFICATION, num_processes=2)
    with pytest.raises(JobError) as caught:
        train(spec, tmp_path)
    assert caught.value.param == "num_processes"
    assert spec.effective_batch_size == 8 * 1 * 2


def _ranks(agent: subprocess.Popen[bytes]) -> list[psutil.Process]:
    return [p for p in psutil.Process(agent.pid).children(recursive=True)]


def test_kill_9_at_world_size_2_then_resume(tmp_path: Path, single: Any) -> None:
    spec = {**make_spec(CLASSIFICATION, per_device_train_batch_size=B,
                        gradient_accumulation_steps=K, num_processes=2,
                        max_train_samples=240).model_dump()}  # fmt: skip
    spec_file, out = tmp_path / "spec.json", tmp_path / "out"
    spec_file.write_text(json.dumps(spec))
    command = torchrun("-m", "trainer_core", "run", str(spec_file), "--output-dir", str(out))
    # 240 rows / (4 x 2 x 2 ranks) = 15 steps an epoch: held 3 steps into epoch 2, after epoch
    # 1's checkpoint, the job cannot finish before the kill.
    hold = Hold(tmp_path, 18)
    agent = subprocess.Popen(command, env=_env(hold.env()), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    hold.held(timeout=300, process=agent)
    ranks = _ranks(agent)
    assert len(ranks) >= 2, ranks
    for rank in ranks:
        # A descendant may end between the listing and its kill (under two suites at once, one
        # did: a rank's helper gone as the first rank died). Gone is what the kill is for; that
        # none is left running is asserted below.
        with contextlib.suppress(psutil.NoSuchProcess):
            rank.send_signal(signal.SIGKILL)
    assert agent.wait(timeout=60) != 0
    assert not (out / "summary.json").exists()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)
    hold.release()

    again = subprocess.run(command, env=_env(), capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in resumed] == [1, 2]
    clean_spec = JobSpec(**{**spec, "num_processes": 1, "gradient_accumulation_steps": 2 * K})
    clean_out = tmp_path / "clean"
    clean = run(clean_spec, clean_out)
    for a, b in zip(resumed, clean.metrics, strict=True):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4)
        assert a["optimizer_steps"] == b["optimizer_steps"]
    bound = tolerance(initial_weights(clean_spec), final_weights(clean_out))
    assert max_abs_diff(final_weights(out), final_weights(clean_out)) <= bound
