"""A GRPO run end to end on ``builtin:tiny-chat``: one training run over windows of 2 prompts x
4 completions, each window sampled from the live policy, group by group, each group under a
generator seeded by (seed, window, group), so b, K and the ranks change only how the backward is
cut (and which rank samples which group).

- (2, 4) and (8, 1) (SGD, 2 windows) sample the same completions in every window and end at the
  same weights, within the trajectory bound max |ΔW| <= 1e-3 max |W_final - W_initial|, in each
  backend; so do 2 gloo ranks at (2, 2), where each rank samples its share (one group of 4 a
  window, not 8) and both see the whole window.
- AdamW with a linear decay over 3 windows: the run, in each backend, equals a hand-written loop
  that keeps one AdamW and one schedule and applies each window's gradient; the old way (an
  optimizer and a schedule new each window) misses by far (> 1e-2 of the distance moved).
- That run preempted after window 2 and resumed ends at the uninterrupted run's weights.
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
from transformers import get_linear_schedule_with_warmup

from tests.trainer_core.grpo_rollouts import starting_model
from tests.trainer_core.test_distributed import _env, torchrun
from trainer_core.accumulation import rollout_micro_step
from trainer_core.data.grpo import Rollouts, collate_rollouts, group_advantages, rollout_split
from trainer_core.data.plan import epoch_permutation
from trainer_core.grpo import GrpoRun, train_grpo
from trainer_core.grpo.prompts import encode_prompt, prompt_rows
from trainer_core.grpo.sampling import Sampled, group_seed, sample_chunks, sample_window
from trainer_core.model.load import load_tokenizer
from trainer_core.spec.callbacks import StopRequest, TrainingCallback
from trainer_core.spec.errors import JobError
from trainer_core.spec.grpo import GrpoSettings
from trainer_core.spec.job import JobSpec

TRAJECTORY_BOUND = 1e-3
BACKENDS = ("pytorch", "accelerate", "trainer")
WINDOWS, LR = 3, 1e-2  # the AdamW runs'
ADAMW: dict[str, Any] = {"optim": "adamw_torch", "learning_rate": LR, "lr_scheduler_type": "linear",
         "max_steps": WINDOWS, "per_device_train_batch_size": 8}  # fmt: skip
ROWS = [{"messages": [{"role": "user", "content": f"what is {i} plus {i + 2}"}],
         "answer": str(2 * i + 2)} for i in range(4)]  # fmt: skip
# generation_batch 4: one group per generate call (a chunk of one group), so that each of the
# two ranks samples one of a window's two groups; the default chunks both into one call.
SETTINGS = GrpoSettings(group_size=4, max_completion_length=12, temperature=1.0,
                        mask_truncated_completions=False, generation_batch=4)  # fmt: skip
# The single process's and the two ranks' pytorch runs evaluate after each window (grpo_eval).
EVALUATING = SETTINGS.model_copy(update={"eval_interval": 1, "eval_samples": 2})
VALIDATION = [{"messages": [{"role": "user", "content": f"{i} minus one"}]} for i in (5, 9)]


def sample_groups(
    model: torch.nn.Module, tokenizer: Any, prompts: list[list[int]], settings: GrpoSettings,
    seeds: list[int],
) -> Sampled:  # fmt: skip
    """One generate per group (chunks of one group each): a group's completions follow its seed
    alone, the reference the chunked sampling is compared with."""
    return sample_chunks(model, tokenizer, [[p] for p in prompts], settings, seeds)


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


def run(out: Path, evaluating: bool = False, /, **changes: Any) -> GrpoRun:
    if evaluating:
        return train_grpo(spec(**changes), EVALUATING, prompt_rows(ROWS), length_reward, out,
                          validation=prompt_rows(VALIDATION))  # fmt: skip
    return train_grpo(spec(**changes), SETTINGS, prompt_rows(ROWS), length_reward, out)


Weights = dict[str, torch.Tensor]


def weights(model_dir: Path | None) -> Weights:
    assert model_dir is not None
    return load_file(str(model_dir / "model.safetensors"))


def trajectory_gap(end: Weights, reference: Weights) -> tuple[float, float]:
    """(max |ΔW| between the two, how far the reference moved from the start)."""
    start = {k: v.detach() for k, v in starting_model(spec()).state_dict().items()}
    names = end.keys() & reference.keys()  # lm_head is tied to wte: one of the two is saved
    moved = max(float((reference[k] - start[k]).abs().max()) for k in names)
    return max(float((end[k] - reference[k]).abs().max()) for k in names), moved


def assert_same_trajectory(end: Weights, reference: Weights, label: str) -> None:
    gap, moved = trajectory_gap(end, reference)
    print(f"{label}: moved {moved:.2e}, gap {gap:.2e}")
    assert moved > 0 and gap <= TRAJECTORY_BOUND * moved


def window_loss(model: torch.nn.Module, sampled: Sampled, window: int, pad_id: int) -> Any:
    """The window's dapo objective over its 8 completions in one forward (in the order the run's
    plan takes them: the same sums, so the same float noise, which Adam's first step amplifies
    where a gradient entry is near its ε)."""
    advantages = group_advantages([length_reward(None, t) for t in sampled.texts], 4, True)
    split = rollout_split(Rollouts(sampled.prompt_ids, sampled.completion_ids, sampled.truncated,
                                   sampled.old_logps, advantages.tolist()), SETTINGS)  # fmt: skip
    batch = collate_rollouts(split, epoch_permutation(8, 7, window).tolist(), pad_id)
    batch |= {"n_window_items": sum(split.items), "n_window_tokens": sum(split.trained),
              "n_window_completions": 8}  # fmt: skip
    return rollout_micro_step(model, batch, SETTINGS).loss


def hand_loop(restart: str = "") -> tuple[Weights, list[list[list[int]]]]:
    """The AdamW run written out: window w samples groups g under group_seed(7, w, g) from the
    model as it stands, back-propagates its objective, and steps one AdamW (the run's two
    parameter groups) and one linear schedule over the windows. ``restart``: "both" builds a new
    optimizer and a one-step schedule each window (the old train_grpo), "moments" a new
    optimizer on the right schedule. The final weights and each window's completions."""
    tokenizer = load_tokenizer(spec())
    model, completions = starting_model(spec()), []
    params: list[torch.Tensor] = list(model.parameters())

    def fresh(steps: int) -> tuple[torch.optim.Optimizer, Any]:
        groups: list[dict[str, Any]] = [
            {"params": [p for p in params if p.dim() >= 2]},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=LR, weight_decay=0.0)
        return optimizer, get_linear_schedule_with_warmup(optimizer, 0, steps)  # type: ignore[no-untyped-call]

    optimizer, schedule = fresh(WINDOWS)
    for window in range(WINDOWS):
        if restart:
            lr = schedule.get_last_lr()[0]
            optimizer, schedule = fresh(1 if restart == "both" else WINDOWS)
            for group in optimizer.param_groups:
                group["lr"] = lr if restart == "moments" else LR
        rows = prompt_rows(ROWS)[2 * window % 4 : 2 * window % 4 + 2]
        prompts = [encode_prompt(tokenizer, row) for row in rows]
        sampled = sample_groups(model, tokenizer, prompts, SETTINGS,
                                [group_seed(7, window, g) for g in range(2)])  # fmt: skip
        model.train()
        window_loss(model, sampled, window, int(tokenizer.pad_token_id)).backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        completions.append(sampled.completion_ids)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, completions


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GrpoRun]:
    """(8, 1) in each backend: the window in one micro-batch."""
    root = tmp_path_factory.mktemp("grpo-whole")
    return {backend: run(root / backend, backend == "pytorch", backend=backend,
                         per_device_train_batch_size=8) for backend in BACKENDS}  # fmt: skip


@pytest.fixture(scope="module")
def adamw(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GrpoRun]:
    """AdamW, a linear decay over 3 windows, (8, 1), in each backend."""
    root = tmp_path_factory.mktemp("grpo-adamw")
    return {backend: run(root / backend, backend=backend, **ADAMW) for backend in BACKENDS}


@pytest.fixture(scope="module")
def hand() -> tuple[Weights, list[list[list[int]]]]:
    return hand_loop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_b_and_k_cut_the_backward_never_the_samples(
    tmp_path: Path, whole: dict[str, GrpoRun], backend: str
) -> None:
    cut = run(tmp_path, backend=backend, per_device_train_batch_size=2)
    assert len(cut.samples) == len(whole[backend].samples) == 2
    for a, b in zip(cut.samples, whole[backend].samples, strict=True):
        assert a.completion_ids == b.completion_ids and a.truncated == b.truncated
    assert cut.samples[0].completion_ids != cut.samples[1].completion_ids  # other prompts
    assert_same_trajectory(weights(cut.model_dir), weights(whole[backend].model_dir), backend)
    rewards = [length_reward(None, text) for text in cut.samples[0].texts]
    record = cut.records[0]
    assert record["reward_mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert {"reward_std", "completion_length", "clip_ratio", "train_loss"} <= record.keys()


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_run_carries_adam_and_the_schedule(
    adamw: dict[str, GrpoRun], hand: tuple[Weights, list[list[list[int]]]], backend: str
) -> None:
    """The run's windows sample what the hand loop samples and it ends at the hand loop's
    weights; its learning rate decays over the windows (lr·2/3, lr·1/3, 0 after each step)."""
    assert [s.completion_ids for s in adamw[backend].samples] == hand[1]
    assert_same_trajectory(weights(adamw[backend].model_dir), hand[0], f"{backend} vs hand loop")
    rates = [record["learning_rate"] for record in adamw[backend].records]
    assert rates == pytest.approx([LR * 2 / 3, LR / 3, 0.0])


@pytest.mark.parametrize("restart", ["both", "moments"])
def test_restarting_the_optimizer_each_window_misses(
    hand: tuple[Weights, list[list[list[int]]]], restart: str
) -> None:
    """Negative controls: the old way (a new AdamW and schedule per window), and a new AdamW on
    the right schedule, end far from the one-optimizer loop."""
    gap, moved = trajectory_gap(hand_loop(restart)[0], hand[0])
    print(f"restart {restart}: gap {gap:.2e} of {moved:.2e} moved")
    assert gap > 1e-2 * moved


def test_groups_sample_alike_alone_or_together() -> None:
    """A group's completions follow its seed alone: sampled with another group or by itself,
    the same; another seed, others."""
    job = spec()
    tokenizer = load_tokenizer(job)
    model = starting_model(job)
    prompts = [encode_prompt(tokenizer, row) for row in prompt_rows(ROWS[:2])]
    both = sample_groups(model, tokenizer, prompts, SETTINGS, [11, 12])
    second = sample_groups(model, tokenizer, prompts[1:], SETTINGS, [12])
    assert both.completion_ids[4:] == second.completion_ids
    assert sample_groups(model, tokenizer, prompts[1:], SETTINGS, [13]) != second
    assert sample_window(model, tokenizer, prompts[1:], SETTINGS, 12) == second
    assert len(both.completion_ids) == 8 and both.prompt_ids[0] == both.prompt_ids[3]
    for ids, cut in zip(both.completion_ids, both.truncated, strict=True):
        assert 1 <= len(ids) <= 12 and cut == (tokenizer.eos_token_id not in ids)


def test_a_chunk_of_groups_is_one_call_whatever_the_cut(tmp_path: Path) -> None:
    """The default generation_batch puts the window's two groups in one generate call (chunk 0,
    seed group_seed(7, w, 0)): (2, 4) and (8, 1) sample those completions and end alike; the
    one-group chunks sample others."""
    chunked = SETTINGS.model_copy(update={"generation_batch": 64})
    assert chunked.groups_per_call() == 16 and SETTINGS.groups_per_call() == 1
    runs = {shape: train_grpo(spec(per_device_train_batch_size=shape[0]), chunked,
                              prompt_rows(ROWS), length_reward, tmp_path / f"{shape[0]}")
            for shape in ((2, 4), (8, 1))}  # fmt: skip
    first, second = runs[(2, 4)], runs[(8, 1)]
    assert [s.completion_ids for s in first.samples] == [s.completion_ids for s in second.samples]
    assert first.generated == [8, 8]
    assert_same_trajectory(weights(first.model_dir), weights(second.model_dir), "chunked (2,4)")
    tokenizer = load_tokenizer(spec())
    prompts = [encode_prompt(tokenizer, row) for row in prompt_rows(ROWS)[:2]]
    window0 = sample_window(
        starting_model(spec()), tokenizer, prompts, chunked, group_seed(7, 0, 0)
    )
    assert first.samples[0].completion_ids == window0.completion_ids
    alone = sample_groups(starting_model(spec()), tokenizer, prompts, chunked,
                          [group_seed(7, 0, 0), group_seed(7, 0, 1)])  # fmt: skip
    assert alone.completion_ids != window0.completion_ids


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


def test_two_ranks_each_sample_their_share(tmp_path: Path, whole: dict[str, GrpoRun]) -> None:
    job = spec(per_device_train_batch_size=2, num_processes=2, device="cpu")
    (tmp_path / "spec.json").write_text(job.model_dump_json())
    runner = str(Path(__file__).with_name("grpo_dist_runner.py"))
    done = subprocess.run(torchrun(runner, str(tmp_path / "spec.json"), str(tmp_path / "out")),
                          env=_env(), capture_output=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    single = [sampled.completion_ids for sampled in whole["pytorch"].samples]
    assert whole["pytorch"].generated == [8, 8]  # one process samples every group
    for rank in (0, 1):
        ran = json.loads((tmp_path / "out" / f"samples-{rank}.json").read_text())
        assert ran["samples"] == single and ran["generated"] == [4, 4]  # one group of 4
        # Both ranks evaluate together (each its share, gathered): the single process's samples.
        assert ran["evaluated"] == [e.samples for e in whole["pytorch"].evaluations]
        # Step 0 (the starting model), then after each of the 2 windows.
        assert len(ran["evaluated"]) == 3 and ran["records"] == len(whole["pytorch"].records)
    end = weights(tmp_path / "out" / "model")
    assert_same_trajectory(end, weights(whole["pytorch"].model_dir), "2 ranks (2,2)")


class PreemptAfterFirst(TrainingCallback):
    """Asks for a preemption once window 1 has stepped: honoured at window 2's end."""

    asked: StopRequest | None = None

    def on_progress(self, progress: dict[str, Any]) -> None:
        if progress["step"] == 1:
            self.asked = "preempt"


def test_a_preempted_run_resumes_where_it_stopped(
    tmp_path: Path, adamw: dict[str, GrpoRun]
) -> None:
    """Preempted after window 2 (its checkpoint: weights, AdamW, schedule, RNG), resumed: the
    third window samples what the whole run sampled and the run ends at its weights. Resuming
    with other settings is refused by name."""
    steps = PreemptAfterFirst()
    first = train_grpo(spec(**ADAMW), SETTINGS, prompt_rows(ROWS), length_reward, tmp_path,
                       should_stop=lambda: steps.asked, callback=steps)  # fmt: skip
    assert first.status == "preempted" and len(first.samples) == 2
    other = SETTINGS.model_copy(update={"temperature": 0.5})
    with pytest.raises(JobError, match="other settings or prompts"):
        train_grpo(spec(**ADAMW), other, prompt_rows(ROWS), length_reward, tmp_path, resume=True)
    rest = train_grpo(spec(**ADAMW), SETTINGS, prompt_rows(ROWS), length_reward, tmp_path,
                      resume=True)  # fmt: skip
    assert rest.status == "completed" and rest.generated == [8]  # window 3 only
    assert rest.samples[-1].completion_ids == adamw["pytorch"].samples[2].completion_ids
    gap, moved = trajectory_gap(weights(rest.model_dir), weights(adamw["pytorch"].model_dir))
    print(f"resumed: gap {gap:.2e} of {moved:.2e} moved")
    assert gap <= 1e-6 * moved


def test_a_string_check_grader_is_the_reward(tmp_path: Path) -> None:
    """The graders' ``string_check`` (gradacc) as the injected reward, reading ``item.answer``:
    the step's reward is the mean of what the grader gives each sampled completion."""
    from trainer_core.graders.run import run_grader
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
