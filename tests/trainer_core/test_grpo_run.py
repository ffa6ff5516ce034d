"""A GRPO run end to end on ``builtin:tiny-chat``: each window's rollouts are sampled once from
the policy as it stands, with a generator seeded by the job's seed and the window index, so b and
K change only how the backward is cut. (2, 4) and (8, 1) over 2 windows of 2 prompts x 4
completions sample the same completions in both windows and end at the same weights, within the
trajectory bound max |ΔW| <= 1e-3 max |W_final - W_initial|, in each of the three backends.
On 2 gloo ranks at (2, 2) every rank samples the whole window (the same seed, so the same
completions) and trains its share of the backward; the run equals the single process's.
The reward is the completion's length (deterministic), so the test does not rest on learning.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from tests.trainer_core.grpo_rollouts import starting_model
from tests.trainer_core.test_distributed import _env, torchrun
from trainer_core.data.prompts import encode_prompt, prompt_rows
from trainer_core.grpo import GrpoRun, train_grpo
from trainer_core.loop.sampling import sample_window
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.job import JobSpec

TRAJECTORY_BOUND = 1e-3
BACKENDS = ("pytorch", "accelerate", "trainer")
ROWS = [{"messages": [{"role": "user", "content": f"what is {i} plus {i + 2}"}],
         "answer": str(2 * i + 2)} for i in range(4)]  # fmt: skip
SETTINGS = GrpoSettings(group_size=4, max_completion_length=12, temperature=1.0,
                        mask_truncated_completions=False)  # fmt: skip


def spec(**changes: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
        "optim": "sgd", "learning_rate": 1.0, "max_grad_norm": 0.0, "max_steps": 2,
        "lr_scheduler_type": "constant", "validation_split_percentage": 0,
        "group_by_length": False, "max_seq_length": 128, "seed": 7, "effective_batch_size": 8,
    }  # fmt: skip
    return JobSpec.model_validate(fields | changes)


def length_reward(item: Any, text: str) -> float:
    return min(len(text), 30) / 30


def run(out: Path, **changes: Any) -> GrpoRun:
    return train_grpo(spec(**changes), SETTINGS, prompt_rows(ROWS), length_reward, out)


Weights = dict[str, torch.Tensor]


def weights(model_dir: Path | None) -> Weights:
    assert model_dir is not None
    return load_file(str(model_dir / "model.safetensors"))


def assert_same_trajectory(end: Weights, reference: Weights, label: str) -> None:
    """max |ΔW| within 1e-3 of how far the reference run moved the weights."""
    start = {k: v.detach() for k, v in starting_model(spec()).state_dict().items()}
    moved = max(float((reference[k] - start[k]).abs().max()) for k in reference)
    gap = max(float((end[k] - reference[k]).abs().max()) for k in reference)
    print(f"{label}: moved {moved:.2e}, gap {gap:.2e}")
    assert moved > 0 and gap <= TRAJECTORY_BOUND * moved


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GrpoRun]:
    """(8, 1) in each backend: the window in one micro-batch."""
    root = tmp_path_factory.mktemp("grpo-whole")
    return {backend: run(root / backend, backend=backend, per_device_train_batch_size=8)
            for backend in BACKENDS}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_b_and_k_cut_the_backward_never_the_samples(
    tmp_path: Path, whole: dict[str, GrpoRun], backend: str
) -> None:
    cut = run(tmp_path, backend=backend, per_device_train_batch_size=2)
    assert len(cut.samples) == len(whole[backend].samples) == 2
    for a, b in zip(cut.samples, whole[backend].samples, strict=True):
        assert a.completion_ids == b.completion_ids and a.truncated == b.truncated
    assert cut.samples[0].completion_ids != cut.samples[1].completion_ids  # the policy moved on
    assert_same_trajectory(weights(cut.model_dir), weights(whole[backend].model_dir), backend)
    rewards = [length_reward(None, text) for text in cut.samples[0].texts]
    record = cut.records[0]
    assert record["reward_mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert {"reward_std", "completion_length", "clip_ratio", "train_loss"} <= record.keys()


def test_sampling_follows_the_seed_and_the_window() -> None:
    job = spec()
    tokenizer = load_tokenizer(job)
    model = starting_model(job)
    prompts = [encode_prompt(tokenizer, row) for row in prompt_rows(ROWS[:2])]
    first = sample_window(model, tokenizer, prompts, SETTINGS, seed=11)
    assert sample_window(model, tokenizer, prompts, SETTINGS, seed=11) == first
    assert sample_window(model, tokenizer, prompts, SETTINGS, seed=12) != first
    assert len(first.completion_ids) == 8 and first.prompt_ids[0] == first.prompt_ids[3]
    for ids, cut in zip(first.completion_ids, first.truncated, strict=True):
        assert 1 <= len(ids) <= 12 and cut == (tokenizer.eos_token_id not in ids)


def test_settings_and_prompts_are_checked_by_name() -> None:
    with pytest.raises(ValidationError, match="num_iterations"):
        GrpoSettings(num_iterations=2)
    with pytest.raises(ValidationError, match="group_size"):
        GrpoSettings(group_size=1)
    with pytest.raises(ValueError, match="effective_batch_size"):
        GrpoSettings(group_size=3).prompts_per_window(8)
    with pytest.raises(ValueError, match="row 1 must end with a user turn"):
        prompt_rows([ROWS[0], {"messages": [{"role": "assistant", "content": "4"}]}])
    assert prompt_rows(ROWS)[0].item == {"answer": "2"}


def test_two_ranks_sample_the_whole_window_and_train_their_shares(
    tmp_path: Path, whole: dict[str, GrpoRun]
) -> None:
    job = spec(per_device_train_batch_size=2, num_processes=2, device="cpu")
    (tmp_path / "spec.json").write_text(job.model_dump_json())
    runner = str(Path(__file__).with_name("grpo_dist_runner.py"))
    done = subprocess.run(torchrun(runner, str(tmp_path / "spec.json"), str(tmp_path / "out")),
                          env=_env(), capture_output=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    single = [sampled.completion_ids for sampled in whole["pytorch"].samples]
    for rank in (0, 1):
        assert json.loads((tmp_path / "out" / f"samples-{rank}.json").read_text()) == single
    end = weights(tmp_path / "out" / "window-1" / "model")
    assert_same_trajectory(end, weights(whole["pytorch"].model_dir), "2 ranks (2,2)")


def test_a_string_check_grader_is_the_reward(tmp_path: Path) -> None:
    """The graders' ``string_check`` (gradacc) as the injected reward, reading ``item.answer``:
    the step's reward is the mean of what the grader gives each sampled completion."""
    from gradacc.graders.run import run_grader
    from trainer_core.spec.graders import parse_grader

    grader = parse_grader({"type": "string_check", "name": "digit", "operation": "like",
                           "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"})  # fmt: skip
    rows = [{"messages": row["messages"], "answer": str(i)} for i, row in enumerate(ROWS)]

    def graded(item: Any, text: str) -> float:
        return run_grader(grader, text, item).reward

    result = train_grpo(spec(max_steps=1, per_device_train_batch_size=4), SETTINGS,
                        prompt_rows(rows), graded, tmp_path)  # fmt: skip
    texts, answers = result.samples[0].texts, [str(i // 4) for i in range(8)]
    expected = [float(answer in text) for answer, text in zip(answers, texts, strict=True)]
    assert result.records[0]["reward_mean"] == pytest.approx(sum(expected) / 8)
    print(f"string_check rewards {expected}")


def test_beta_adds_the_kl_to_the_starting_model(tmp_path: Path) -> None:
    """With β > 0 the reference is the starting model: the first window's policy is that model
    (KL 0), the second's has moved away from it (KL > 0)."""
    settings = SETTINGS.model_copy(update={"beta": 0.04})
    result = train_grpo(spec(per_device_train_batch_size=4), settings, prompt_rows(ROWS),
                        length_reward, tmp_path)  # fmt: skip
    first, second = (record["kl"] for record in result.records)
    print(f"kl per window: {first:.2e}, {second:.2e}")
    assert abs(first) < 1e-6 < second
