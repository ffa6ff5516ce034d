"""One window of fixed GRPO rollouts for the exactness tests, and its gradient computed the plain
way: one forward per completion, the window's objective written out from its definition."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from trainer_core.data.grpo import Rollouts, group_advantages
from trainer_core.model.load import load_model, load_tokenizer
from trainer_core.spec.grpo import PolicyLoss
from trainer_core.spec.job import JobSpec

Grads = dict[str, torch.Tensor]
L_MAX = 40  # max_completion_length: a completion of 40 tokens without EOS was truncated
QUESTIONS = ["what is 3 plus 4", "seven minus two is", "add twelve and nine then halve it"]
GROUP = 4
# Tokens per completion, EOS included when it ended: 1 to 40; the four 40s were truncated.
LENGTHS = [1, 40, 3, 27, 12, 40, 2, 19, 35, 5, 40, 40]
# Group 2's rewards are all equal: its advantages are zero (no policy gradient from it).
REWARDS = [1.0, 0.0, 1.0, 0.5, 0.3, 0.3, 0.3, 0.3, 0.0, 1.0, 0.2, 0.9]
SECOND_WINDOW_LENGTHS = [30, 22, 40, 17, 9, 33, 26, 14, 38, 21, 6, 29]  # the same generation


def policy_loss(loss_type: str, **changes: Any) -> PolicyLoss:
    """Clip-higher (0.2 / 0.28) and a KL term against a perturbed reference."""
    settings = {"loss_type": loss_type, "epsilon": 0.2, "epsilon_high": 0.28, "beta": 0.04,
                "max_completion_length": L_MAX}  # fmt: skip
    return PolicyLoss.model_validate(settings | changes)


def starting_model(spec: JobSpec) -> torch.nn.Module:
    return load_model(spec, load_tokenizer(spec), None)


def completion_logps(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> Any:
    """log π(token) of each completion token, from one forward of prompt + completion."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]


def make_rollouts(spec: JobSpec, lengths: list[int] = LENGTHS, seed: int = 0) -> Rollouts:
    """3 prompts x 4 completions of random tokens; old log-probs = the starting policy's + N(0,
    0.3) (so the clip fires), the reference's = the policy's + N(0, 0.1)."""
    tokenizer = load_tokenizer(spec)
    rng = np.random.default_rng(seed)
    model = starting_model(spec)
    prompts, completions, old, ref, truncated = [], [], [], [], []
    for i, length in enumerate(lengths):
        encoded: Any = tokenizer.apply_chat_template(
            [{"role": "user", "content": QUESTIONS[i // GROUP]}], add_generation_prompt=True
        )
        prompt = list(encoded if isinstance(encoded, list) else encoded["input_ids"])
        cut = length == L_MAX
        body = rng.integers(3, len(tokenizer), size=length - (0 if cut else 1)).tolist()
        completion = body if cut else [*body, int(tokenizer.eos_token_id)]
        with torch.no_grad():
            logps = completion_logps(model, prompt, completion).numpy()
        prompts.append(prompt)
        completions.append(completion)
        truncated.append(cut)
        old.append((logps + rng.normal(0, 0.3, size=length)).tolist())
        ref.append((logps + rng.normal(0, 0.1, size=length)).tolist())
    advantages = group_advantages(REWARDS, GROUP, scale=True).tolist()
    return Rollouts(prompts, completions, truncated, old, advantages, ref)


def first(rollouts: Rollouts, count: int) -> Rollouts:
    """The window's first ``count`` completions, advantages as computed for all of them."""
    fields: dict[str, Any] = {
        f.name: getattr(rollouts, f.name) for f in dataclasses.fields(rollouts)
    }
    sliced: dict[str, Any] = {name: v if v is None else v[:count] for name, v in fields.items()}
    return Rollouts(**sliced)


def token_terms(
    model: torch.nn.Module, rollouts: Rollouts, loss: PolicyLoss
) -> list[tuple[torch.Tensor, int]]:
    """(Σ_t l_it over the loss-carrying tokens, |T_i|) of each completion, l written out:
    -min(rA, clip(r, 1-ε, 1+ε_high)A) + β (exp(q-p) - (q-p) - 1), with p the token's log-prob,
    r = exp(p - p_old) and q the reference's log-prob."""
    terms = []
    for i, completion in enumerate(rollouts.completion_ids):
        logps = completion_logps(model, list(rollouts.prompt_ids[i]), list(completion))
        ratio = torch.exp(logps - torch.tensor(rollouts.old_logps[i]))
        a = float(rollouts.advantages[i])
        clipped = torch.clamp(ratio, 1 - loss.epsilon, 1 + (loss.epsilon_high or loss.epsilon))
        ell = -torch.minimum(ratio * a, clipped * a)
        assert rollouts.ref_logps is not None
        delta = torch.tensor(rollouts.ref_logps[i]) - logps
        ell = ell + loss.beta * (torch.exp(delta) - delta - 1)
        carries = not (rollouts.truncated[i] and loss.mask_truncated_completions)
        terms.append((ell.sum() if carries else ell.sum() * 0, len(completion) if carries else 0))
    return terms


def window_objective(terms: list[tuple[torch.Tensor, int]], loss_type: str) -> torch.Tensor:
    """The loss type's window objective, from its definition."""
    carrying = [(s, n) for s, n in terms if n > 0]
    if loss_type == "dapo":  # (1/N_tok) Σ_i Σ_t l_it
        return sum((s for s, _ in carrying), torch.zeros(())) / sum(n for _, n in carrying)
    if loss_type == "grpo":  # (1/N_seq) Σ_i (1/|o_i|) Σ_t l_it
        return sum((s / n for s, n in carrying), torch.zeros(())) / len(carrying)
    # dr_grpo: (1/(N_seq L_max)) Σ_i Σ_t l_it
    return sum((s for s, _ in carrying), torch.zeros(())) / (len(carrying) * L_MAX)


def gradient_of(model: torch.nn.Module, objective: torch.Tensor) -> Grads:
    objective.backward()  # type: ignore[no-untyped-call]
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def reference_gradient(spec: JobSpec, rollouts: Rollouts, loss: PolicyLoss) -> Grads:
    """∇ of the window's objective, one forward per completion, no micro-batches."""
    model = starting_model(spec)
    return gradient_of(model, window_objective(token_terms(model, rollouts, loss), loss.loss_type))


def relative_gap(grads: Grads, reference: Grads) -> float:
    """max |g - g_ref| / max |g_ref| over the parameters both name."""
    names = grads.keys() & reference.keys()
    assert names, "no parameter in common"
    gap = max(float((grads[n] - reference[n]).abs().max()) for n in names)
    return gap / max(float(reference[n].abs().max()) for n in names)
