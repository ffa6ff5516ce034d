"""Sharded data parallelism (``sharding: "fsdp"``, FSDP2) over 2 CPU processes (torchrun, gloo), in
every backend, full and LoRA: W = 2 with (b, K) trains as one process without sharding at (b, 2K).
One window's gradient (a step of SGD at lr 1) within 1e-5 of the reference's largest entry;
trajectories under SGD within 1e-3 of the update, through a preemption and a resume from the
sharded checkpoint; gradients reduced once per window; an evaluation whose rows do not split
evenly (each rank runs as many forwards: a sharded forward is a collective). A rank killed
mid-window resumes from the sharded checkpoint to the uninterrupted run's weights, and the same
checkpoint resumed by one process without sharding does too. The consolidated model loads with
``from_pretrained``."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from tests.support import Hold
from tests.trainer_core.dpo_pairs import pairs_file, reference_gradient, relative_gap
from tests.trainer_core.helpers import CHAT, initial_weights, make_spec, run
from tests.trainer_core.test_distributed import _env, torchrun, train_on_two_ranks
from tests.trainer_core.test_dpo_exactness import dpo_spec, pair_loss
from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.spec.job import JobSpec

BACKENDS = ("pytorch", "accelerate", "trainer")
KINDS: dict[str, dict[str, Any]] = {"full": {}, "lora": {"lora": {"r": 4}}}
# One SGD step at lr 1, unclipped: the weights move by the window's gradient.
GRAD = {
    "optim": "sgd",
    "learning_rate": 1.0,
    "max_grad_norm": 0.0,
    "max_steps": 1,
    "lr_scheduler_type": "constant",
    "validation_split_percentage": 0,
}
# Two epochs of SGD, clipped; 17 eval rows in batches of 4: ranks hold 9 and 8 (3 and 2 batches).
# 21 rows (was 53, 2026-12-05): a full window and a ragged one an epoch, the same shapes of window
# in half the steps (the claims hold at any length).
TRAJECTORY = {
    "optim": "sgd",
    "learning_rate": 0.05,
    "max_train_samples": 21,
    "max_eval_samples": 17,
    "per_device_eval_batch_size": 4,
}
SHARDED = {"num_processes": 2, "sharding": "fsdp", "device": "cpu", "logging_steps": 1}
DPO_LR = 10.0
GRPO = {
    "group_size": 4,
    "grader": {
        "type": "string_check",
        "name": "eq",
        "operation": "eq",
        "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}",
    },
}
WINDOWS_PER_EPOCH = 2  # trajectories: 21 rows in windows of 2 x 4 x 2 (the last of 5 rows)
PREEMPTED_AT = WINDOWS_PER_EPOCH + 1  # the trajectories' 3rd window: inside epoch 2


def sft(kind: str, b: int, k: int, settings: dict[str, Any], **changes: Any) -> JobSpec:
    return make_spec(
        CHAT,
        per_device_train_batch_size=b,
        gradient_accumulation_steps=k,
        **KINDS[kind],
        **settings,
        **changes,
    )


def untied_model(folder: Path) -> Path:
    """A two-layer Qwen3 whose embeddings and head are not tied (each its own sharded unit), on
    tiny-chat's tokenizer."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "qwen3",
        vocab_size=384,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=False,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    builtin_tokenizer("builtin:tiny-chat").save_pretrained(folder)
    return folder


# name: (spec of 2 sharded ranks, spec of the one-process reference), trained in one launch
def _jobs(data: Path, untied: Path) -> dict[str, tuple[JobSpec, JobSpec]]:
    jobs = {}
    qwen3 = {"model": str(untied)}
    jobs["grad-pytorch-untied"] = (
        sft("full", 2, 4, GRAD, **SHARDED, **qwen3),
        sft("full", 2, 8, GRAD, **qwen3),
    )
    for backend in BACKENDS:
        for kind in KINDS:
            jobs[f"traj-{backend}-{kind}"] = (
                sft(kind, 2, 4, TRAJECTORY, backend=backend, **SHARDED),
                sft(kind, 2, 8, TRAJECTORY),
            )
        jobs[f"grad-{backend}-full"] = (
            sft("full", 2, 4, GRAD, backend=backend, **SHARDED),
            sft("full", 2, 8, GRAD),
        )
    jobs["grad-pytorch-lora"] = (sft("lora", 2, 4, GRAD, **SHARDED), sft("lora", 2, 8, GRAD))
    jobs["traj-pytorch-full-8x1"] = (
        sft("full", 8, 1, TRAJECTORY, **SHARDED),
        sft("full", 8, 2, TRAJECTORY),
    )
    dpo = dpo_spec(data, "sigmoid")
    jobs["dpo-grad-pytorch"] = (
        dpo_spec(
            data, "sigmoid", per_device_train_batch_size=2, gradient_accumulation_steps=3, **SHARDED
        ),
        dpo,
    )
    evaluated = {
        "max_steps": None,
        "num_train_epochs": 1,
        "validation_split_percentage": 20,
        "per_device_eval_batch_size": 1,
        "learning_rate": 0.1,
    }
    jobs["dpo-eval-accelerate"] = (
        dpo_spec(
            data,
            "sigmoid",
            backend="accelerate",
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            **evaluated,
            **SHARDED,
        ),
        dpo_spec(
            data,
            "sigmoid",
            per_device_train_batch_size=2,
            gradient_accumulation_steps=4,
            **evaluated,
        ),
    )
    return jobs


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pairs_file(tmp_path_factory.mktemp("pairs"))


@pytest.fixture(scope="module")
def jobs(
    data: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[JobSpec, JobSpec]]:
    return _jobs(data, untied_model(tmp_path_factory.mktemp("untied")))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory, jobs: dict[str, Any]) -> dict[str, Path]:
    """Every job on 2 sharded ranks in one launch; the trajectories preempted at their 6th
    window (inside epoch 2) and resumed from the sharded checkpoint by the same ranks."""
    root = tmp_path_factory.mktemp("fsdp")
    outs = {name: root / name for name in jobs}
    launch = [
        {"spec": two.model_dump(), "out": str(outs[name])}
        | ({"preempt_at_poll": PREEMPTED_AT} if name.startswith("traj") else {})
        for name, (two, _) in jobs.items()
    ]
    train_on_two_ranks(root, launch)
    return outs


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, jobs: dict[str, Any]) -> Any:
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        """The output of the job's one-process reference (trained once)."""
        spec = jobs[name][1]
        key = spec.model_dump_json()
        if key not in cache:
            cache[key] = tmp_path_factory.mktemp("reference")
            assert run(spec, cache[key]).status == "completed"
        return cache[key]

    return get


def trained(out: Path, spec: JobSpec) -> dict[str, torch.Tensor]:
    """The final trained weights: a LoRA run's adapters, or the whole model."""
    file = "adapter/adapter_model.safetensors" if spec.lora else "model/model.safetensors"
    return load_file(str(out / file))


def gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def change(out: Path, spec: JobSpec) -> float:
    """The largest move of a weight the run made (a LoRA run's B starts at zero)."""
    final = trained(out, spec)
    if spec.lora:
        return max(float(v.abs().max()) for k, v in final.items() if "lora_B" in k)
    start = initial_weights(spec)
    return max(float((final[k] - start[k]).abs().max()) for k in final)


def report(out: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / "comm.json").read_text())
    return loaded


GRADS = [f"grad-{b}-full" for b in BACKENDS] + ["grad-pytorch-lora", "grad-pytorch-untied"]


@pytest.mark.parametrize("name", GRADS)
def test_one_windows_gradient_is_the_large_batchs(
    name: str, sharded: dict[str, Path], reference: Any, jobs: dict[str, Any]
) -> None:
    spec = jobs[name][0]
    theirs = gap(trained(sharded[name], spec), trained(reference(name), spec))
    largest = change(reference(name), jobs[name][1])  # lr 1: the reference's gradient
    print(f"{name}: {theirs:.2e} of {largest:.2e}")
    assert report(sharded[name])["status"] == "completed"
    assert theirs <= 1e-5 * largest


TRAJECTORIES = [f"traj-{b}-{k}" for b in BACKENDS for k in KINDS] + ["traj-pytorch-full-8x1"]


@pytest.mark.parametrize("name", TRAJECTORIES)
def test_trajectories_match_through_a_resume(
    name: str, sharded: dict[str, Path], reference: Any, jobs: dict[str, Any]
) -> None:
    spec, single = jobs[name]
    ours, theirs = sharded[name], reference(name)
    bound = 1e-3 * change(theirs, single)
    found = gap(trained(ours, spec), trained(theirs, spec))
    print(f"{name}: {found:.2e} (bound {bound:.2e})")
    assert found <= bound
    seen = report(ours)
    assert seen["preempted"] and seen["status"] == "completed"
    assert [s["step"] for s in seen["steps"]] == list(range(1, 2 * WINDOWS_PER_EPOCH + 1))
    mine = [json.loads(line) for line in (ours / "metrics.jsonl").read_text().splitlines()]
    clean = [json.loads(line) for line in (theirs / "metrics.jsonl").read_text().splitlines()]
    for a, b in zip(mine, clean, strict=True):  # the eval rows split 9 / 8: every one counted
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)


def test_gradients_are_reduced_once_per_window(sharded: dict[str, Path]) -> None:
    seen = report(sharded["traj-pytorch-full"])
    units = 2 + 1  # tiny-chat's 2 blocks and the root, each reduced in one call
    assert seen["reductions"] == 2 * WINDOWS_PER_EPOCH * units
    untied = report(sharded["grad-pytorch-untied"])  # one window: its embeddings and head apart
    assert untied["reductions"] == 2 + 2 + 1


def test_dpo_sharded_gives_the_window_gradient(
    sharded: dict[str, Path], jobs: dict[str, Any]
) -> None:
    spec = jobs["dpo-grad-pytorch"][1]
    before = initial_weights(spec)
    after = load_file(str(sharded["dpo-grad-pytorch"] / "model" / "model.safetensors"))
    grads = {name: (before[name] - after[name]) / DPO_LR for name in after}
    assert relative_gap(grads, reference_gradient(spec, pair_loss(spec))) <= 1e-5


def test_dpo_sharded_evaluates_every_pair(
    sharded: dict[str, Path], reference: Any, jobs: dict[str, Any]
) -> None:
    name = "dpo-eval-accelerate"
    mine = report(sharded[name])["metrics"]
    clean = [
        json.loads(line) for line in (reference(name) / "metrics.jsonl").read_text().splitlines()
    ]
    assert mine[0]["eval_loss"] == pytest.approx(clean[0]["eval_loss"], rel=1e-4)


def test_the_consolidated_model_loads_whole(sharded: dict[str, Path], reference: Any) -> None:
    name = "traj-pytorch-full"
    model = AutoModelForCausalLM.from_pretrained(sharded[name] / "model")
    theirs = load_file(str(reference(name) / "model" / "model.safetensors"))
    ours = {k: v for k, v in model.state_dict().items() if k in theirs}
    assert ours.keys() == theirs.keys()
    assert max(float((ours[k] - theirs[k]).abs().max()) for k in theirs) <= 1e-4


def test_a_killed_rank_resumes_on_two_sharded_ranks_and_on_one(
    tmp_path: Path, reference: Any, jobs: dict[str, Any]
) -> None:
    spec, single = jobs["traj-pytorch-full"]
    spec_file, out = tmp_path / "spec.json", tmp_path / "out"
    spec_file.write_text(spec.model_dump_json())
    command = torchrun("-m", "trainer_core", "run", str(spec_file), "--output-dir", str(out))
    hold = Hold(tmp_path, WINDOWS_PER_EPOCH + 1)  # inside epoch 2, after epoch 1's checkpoint
    agent = subprocess.Popen(
        command, env=_env(hold.env()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    hold.held(timeout=300, process=agent)
    ranks = psutil.Process(agent.pid).children(recursive=True)
    with contextlib.suppress(psutil.NoSuchProcess):
        max(ranks, key=lambda p: p.pid).send_signal(signal.SIGKILL)  # one rank, mid-window
    assert agent.wait(timeout=60) != 0
    hold.release()
    assert (out / "checkpoint" / "pytorch_model_fsdp_0").is_dir()
    alone = tmp_path / "alone"
    shutil.copytree(out, alone)

    again = subprocess.run(command, env=_env(), capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    clean = reference("traj-pytorch-full")
    bound = 1e-3 * change(clean, single)
    assert gap(trained(out, spec), trained(clean, spec)) <= bound

    one = JobSpec(
        **{
            **spec.model_dump(),
            "num_processes": 1,
            "sharding": "none",
            "gradient_accumulation_steps": 8,
        }
    )
    assert run(one, alone).status == "completed"  # resumed: the same windows at K = 8
    assert gap(trained(alone, spec), trained(clean, spec)) <= bound
    metrics = [json.loads(line) for line in (alone / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_processes": 1}, "sharding"),
        ({"method": "grpo", "dataset": "builtin:arithmetic-prompts", "grpo": GRPO}, "sharding"),
        ({"lora": {"r": 4}, "load_in_4bit": True}, "sharding"),
        ({"lora": {"r": 4}, "merge_lora": True}, "merge_lora"),
        ({"per_device_train_batch_size": "auto", "effective_batch_size": 16}, "per_device"),
    ],
)
def test_what_sharding_cannot_do_is_refused_by_name(changes: dict[str, Any], field: str) -> None:
    fields = {**CHAT, "num_processes": 2, "sharding": "fsdp", **changes}
    with pytest.raises(ValidationError, match=field):
        JobSpec(**fields)
