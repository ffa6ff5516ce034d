"""The accumulation math, written once and used by all three backends.

An epoch is a seeded permutation of the training rows, cut into micro-batches of ``b`` rows, grouped
into optimizer windows of ``K`` micro-batches (the last window of an epoch may hold fewer). The
order depends on (seed, epoch) only, never on b or K, so (b, K) and (b·K, 1) see the same windows
(the plan: ``trainer_core.data.plan``).

Every micro-batch carries ``n_window_items``: the supervised items (tokens with a label after the
causal shift for a causal LM, i.e. trained tokens that are not a row's first; rows for
classification) of its *whole* window. Each micro-step back-propagates
``Σ item losses / n_window_items``, so after the window's last backward the gradient is exactly
∇[Σ_{items in W} loss / N_W] — for a partial window too, where dividing by K would be wrong.

Preference pairs (``method: dpo``) follow the same rule with the pair as the item: see "Pairs"
below, where their window math is written; GRPO-family rollouts with the loss type's item: see
"Rollouts".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from trainer_core.chunked_head import chunked_nll_sum, chunked_token_nll
from trainer_core.spec.grpo import PolicyLoss
from trainer_core.testing.failpoints import check_out_of_memory

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MicroBatch:
    rows: list[int]
    window: int  # index of its optimizer window within the epoch
    n_window_items: int
    last_in_window: bool


def collate(
    input_ids: Sequence[Any],  # rows of token ids: lists, or numpy views of Arrow
    labels: Sequence[int] | None,
    batch: MicroBatch,
    pad_id: int,
    loss_mask: Sequence[Any] | None = None,  # per row, 1 where a token is trained (chat data)
) -> dict[str, Any]:
    """Right-pad one micro-batch. Causal-LM labels are the ids, -100 on padding and on tokens
    the row does not train (a prompt, a user turn)."""
    rows = [input_ids[i] for i in batch.rows]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    if labels is None:
        trained = mask
        if loss_mask is not None:
            trained = torch.zeros_like(mask)
            for i, row in enumerate(batch.rows):
                trained[i, : len(loss_mask[row])] = torch.tensor(loss_mask[row], dtype=torch.long)
        target = ids.masked_fill(trained == 0, IGNORE_INDEX)
        n_items = int(trained[:, 1:].sum())  # each row's first token predicts nothing
    else:
        target = torch.tensor([labels[i] for i in batch.rows], dtype=torch.long)
        n_items = len(rows)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": target,
        "n_items": n_items,
        "n_tokens": int(mask.sum()),  # real tokens; input_ids.numel() - n_tokens is padding
        "n_window_items": batch.n_window_items,
        "last_in_window": batch.last_in_window,
    }


def summed_loss(logits: torch.Tensor, labels: torch.Tensor, causal: bool) -> torch.Tensor:
    """Σ of per-item cross-entropy in float32 (a causal LM predicts token t+1 from ≤ t)."""
    if causal:
        logits, labels = logits[:, :-1, :], labels[:, 1:]
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def token_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How many trained tokens the causal LM predicts exactly (argmax), after the shift."""
    predicted, target = logits[:, :-1, :].argmax(-1), labels[:, 1:]
    return ((predicted == target) & (target != IGNORE_INDEX)).sum()


def forward_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """What the model is called with. A packed batch (``data.packing``) has no attention mask:
    its rows are told apart by their position ids restarting at 0, which transformers turns into
    a block-diagonal mask only when there is no 2-D mask and no KV cache, so the cache is off
    (left on, each row would attend to the rows before it)."""
    if "position_ids" in batch:
        return {
            "input_ids": batch["input_ids"],
            "position_ids": batch["position_ids"],
            "use_cache": False,
        }
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


@dataclass(frozen=True)
class MicroStep:
    loss: torch.Tensor  # to back-propagate: Σ item losses / N_W
    summed: torch.Tensor  # detached Σ item losses, for the meters
    hits: torch.Tensor | None = None  # trained tokens predicted exactly, when counted
    sums: dict[str, torch.Tensor] | None = None  # pairs: detached Σ of each metric over the pairs


COUNT_HITS = "count_hits"  # a batch key: the run wants this window's token accuracy


def micro_step_loss(
    model: torch.nn.Module, batch: dict[str, Any], causal: bool, chunk: int | None = None
) -> MicroStep:
    """The micro-step's loss and what the meters keep. The model gets no labels: its own loss
    would be a per-micro-batch mean, which is exactly what accumulation must avoid. Token hits
    are counted (on the device, one argmax) only when the batch asks: the run asks in the
    windows whose step it records. ``chunk``: a causal LM's head applied that many tokens at a
    time (``chunked_head``), the same sum without the whole logits."""
    check_out_of_memory(int(batch["input_ids"].shape[0]))  # a test-only failpoint (failpoints.py)
    counting = causal and bool(batch.get(COUNT_HITS))
    if causal and chunk:
        total, argmax = chunked_nll_sum(
            model, forward_inputs(batch), batch["labels"], chunk, predicted=counting
        )
        target = batch["labels"][:, 1:]
        hits = ((argmax == target) & (target != IGNORE_INDEX)).sum() if argmax is not None else None
        return MicroStep(total / batch["n_window_items"], total.detach(), hits)
    outputs = model(**forward_inputs(batch))
    total = summed_loss(outputs.logits, batch["labels"], causal)
    hits = token_hits(outputs.logits.detach(), batch["labels"]) if counting else None
    return MicroStep(total / batch["n_window_items"], total.detach(), hits)


def sequence_token_nll(
    model: torch.nn.Module, batch: dict[str, Any], chunk: int | None = None
) -> torch.Tensor:
    """(B, T-1) each label's negative log-likelihood after the shift (0 where untrained), from
    whole logits or a chunk of tokens at a time (``chunk``): what DPO and GRPO are made of."""
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if chunk:
        return chunked_token_nll(model, inputs, batch["labels"], chunk)[0]
    return token_nll(model(**inputs).logits, batch["labels"])


# --- Pairs ----------------------------------------------------------------------------------
# The unit of preference training is a pair j = (prompt, chosen, rejected). A micro-batch holds
# whole pairs: its B chosen sequences, then its B rejected ones in the same order (the plan's row
# is the pair, so no planner can put the halves apart; ``check_pairs_whole`` refuses a batch that
# does). With s(y) the summed log-prob of a completion's trained tokens (after the shift), the
# pair's loss loss_j is a function of s_θ and s_ref of its two completions alone, so
#     each micro-step back-propagates  Σ_{pairs} loss_j / N_W  +  alpha Σ_{chosen trained tokens} nll / T_W
# with N_W the window's pairs and T_W its chosen trained tokens, over all micro-batches and ranks
# (each divided by W under DDP, which averages: ``n_window_items``, ``n_window_tokens``). After the
# window's last backward the gradient is exactly ∇[(1/N_W) Σ_j loss_j + alpha (1/T_W) Σ nll]: the RPO
# term is a token mean over the window, with its own count, never a micro-batch's.

PairLossKind = Literal["sigmoid", "ipo", "hinge"]
Reference = Callable[[dict[str, Any]], torch.Tensor]  # a batch -> the reference's s(y), (2B,)


class PairSplit(RuntimeError):
    """A micro-batch holds a completion without its pair's other one: refused, never computed."""


@dataclass(frozen=True)
class PairLoss:
    beta: float
    kind: PairLossKind = "sigmoid"
    rpo_alpha: float | None = None


def check_pairs_whole(pair_ids: torch.Tensor) -> None:
    """Rows [0, B) are the chosen sequences of pairs ``pair_ids[:B]``, rows [B, 2B) the rejected
    ones of the same pairs, in the same order."""
    half = pair_ids.shape[0] // 2
    if pair_ids.shape[0] % 2 or not torch.equal(pair_ids[:half], pair_ids[half:]):
        raise PairSplit(
            "a micro-batch must hold whole pairs (each chosen with its rejected, in order): "
            f"it holds chosen of pairs {pair_ids[:half].tolist()} and rejected of "
            f"{pair_ids[half:].tolist()}"
        )


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood in float32 after the causal shift, 0 where untrained."""
    shifted, target = logits[:, :-1, :], labels[:, 1:]
    nll = F.cross_entropy(
        shifted.reshape(-1, shifted.shape[-1]).float(),
        target.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    )
    return nll.view(target.shape)


def pair_losses(
    policy: torch.Tensor, reference: torch.Tensor, tokens: torch.Tensor, loss: PairLoss
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """loss_j for each of B pairs from the (2B,) summed log-probs (chosen first), and the metrics
    of each pair (detached). ``tokens``: trained tokens per sequence (IPO's length norm)."""
    b = policy.shape[0] // 2
    ratio = policy - reference.to(policy.dtype)  # log π/π_ref of each completion
    chosen, rejected = ratio[:b], ratio[b:]
    margin = loss.beta * (chosen - rejected)
    if loss.kind == "sigmoid":
        losses = -F.logsigmoid(margin)
    elif loss.kind == "hinge":
        losses = torch.relu(1 - margin)
    else:  # IPO (Azar et al.), as TRL: log-ratios averaged over each completion's tokens
        mean = ratio / tokens.clamp(min=1).to(ratio.dtype)
        losses = (mean[:b] - mean[b:] - 1 / (2 * loss.beta)) ** 2
    chosen_reward, rejected_reward = loss.beta * chosen.detach(), loss.beta * rejected.detach()
    metrics = {
        "rewards/chosen": chosen_reward,
        "rewards/rejected": rejected_reward,
        "rewards/margins": chosen_reward - rejected_reward,
        "rewards/accuracies": (chosen_reward > rejected_reward).to(ratio.dtype),
        "logps/chosen": policy[:b].detach(),
        "logps/rejected": policy[b:].detach(),
    }
    return losses, metrics


def pair_micro_step(
    model: torch.nn.Module,
    batch: dict[str, Any],
    loss: PairLoss,
    reference: Reference | None,
    chunk: int | None = None,
) -> MicroStep:
    """The micro-step of a batch of pairs (``collate_pairs``): its share of the window's loss,
    to back-propagate, and the detached sums the meters keep (``summed`` / N_W is the window's
    loss, RPO term included). ``reference``: None when the batch carries cached log-probs."""
    check_pairs_whole(batch["pair_ids"])
    check_out_of_memory(int(batch["pair_ids"].shape[0]) // 2)  # failpoint (failpoints.py): pairs
    nll = sequence_token_nll(model, batch, chunk)
    trained = (batch["labels"][:, 1:] != IGNORE_INDEX).sum(-1)
    ref = batch["ref_logps"] if reference is None else reference(batch)
    losses, metrics = pair_losses(-nll.sum(-1), ref, trained, loss)
    weight = batch["pair_weight"].to(losses.dtype)  # 0: a rank's stand-in pair (``n_rows`` 0)
    pair_sum = (losses * weight).sum()
    total, summed = pair_sum / batch["n_window_items"], pair_sum.detach()
    if loss.rpo_alpha:  # the chosen rows' trained tokens, over the window's count
        nll_sum = nll[: weight.shape[0]].sum()  # a stand-in pair's labels are all ignored
        total = total + loss.rpo_alpha * nll_sum / batch["n_window_tokens"]
        per_pair = batch["n_window_items"] / batch["n_window_tokens"]  # N_W / T_W on every rank
        summed = summed + loss.rpo_alpha * nll_sum.detach() * per_pair
    sums = {name: (value * weight).sum() for name, value in metrics.items()}
    return MicroStep(total, summed, None, sums)


# --- Rollouts -------------------------------------------------------------------------------
# GRPO-family training on a window's fixed rollouts (``data.grpo``). With l_it the clipped
# policy loss of token t of completion i (``policy_token_losses``) and T_i its loss-carrying
# tokens (after any truncation masking), every loss type is Σ_i w_i Σ_{t∈T_i} l_it / N_W over the
# window, with the weight and the count fixed by the window, never by a micro-batch:
#     dapo     w_i = 1         N_W = Σ_i |T_i|           (the window's loss-carrying tokens)
#     grpo     w_i = 1/|T_i|   N_W = #{i : |T_i| > 0}    (its completions that carry loss)
#     dr_grpo  w_i = 1         N_W = #{i : |T_i| > 0} · L_max   (L_max: max_completion_length)
# So each micro-step back-propagates Σ_{i in it} w_i Σ_t l_it / N_W (N_W / W under DDP, which
# averages), and after the window's last backward the gradient is that of one forward over the
# window, whatever b, K, the ranks or a re-plan. A completion whose tokens are all masked counts
# in no normaliser: as if it had not been sampled. ``bnpo`` (a micro-batch's own token mean) is
# refused by the spec (``spec.grpo``).


def policy_token_losses(
    logps: torch.Tensor, mask: torch.Tensor, batch: dict[str, Any], loss: PolicyLoss
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """l_it at every shifted position (B, T-1), 0 where ``mask`` is, and per token whether the
    clip fired and the k3 KL (detached). The log-ratios are masked before ``exp``: a masked
    token's old log-prob (a truncated completion's) must not overflow into 0 · inf = NaN."""
    ratio = torch.exp((logps - batch["old_logps"].to(logps.dtype)) * mask)
    advantages = batch["advantages"].to(logps.dtype)[:, None]
    bounded = ratio.clamp(loss.lower_clip, loss.upper_clip)
    losses = -torch.minimum(ratio * advantages, bounded * advantages)
    clipped = ((ratio < loss.lower_clip) & (advantages < 0)) | (
        (ratio > loss.upper_clip) & (advantages > 0)
    )  # the clip took the gradient away: TRL's clip_ratio/region_mean
    metrics = {"clip_ratio": clipped.to(logps.dtype) * mask}
    if "ref_logps" in batch:  # k3 = exp(q - p) - (q - p) - 1 (q: the reference's), as TRL
        delta = (batch["ref_logps"].to(logps.dtype) - logps) * mask
        kl = torch.exp(delta) - delta - 1
        losses = losses + loss.beta * kl
        metrics["kl"] = kl.detach()
    return losses * mask, metrics


def rollout_micro_step(
    model: torch.nn.Module, batch: dict[str, Any], loss: PolicyLoss, chunk: int | None = None
) -> MicroStep:
    """A micro-batch of completions (``collate_rollouts``): its share of the window's loss, and
    the metric sums, each scaled so the meters' division by the window's items gives its own
    mean: clip_ratio and kl over trained tokens, completion_length over completions."""
    check_out_of_memory(int(batch["input_ids"].shape[0]))  # failpoint (failpoints.py): rows
    logps = -sequence_token_nll(model, batch, chunk)
    mask = (batch["labels"][:, 1:] != IGNORE_INDEX).to(logps.dtype)
    losses, metrics = policy_token_losses(logps, mask, batch, loss)
    summed = (losses.sum(-1) * batch["row_weight"].to(logps.dtype)).sum()
    items = batch["n_window_items"]
    per_token = items / max(batch["n_window_tokens"], 1e-9)
    per_completion = items / max(batch["n_window_completions"], 1e-9)
    sums = {name: value.sum() * per_token for name, value in metrics.items()}
    sums["completion_length"] = batch["completion_lengths"].sum() * per_completion
    return MicroStep(summed / (items or 1), summed.detach(), None, sums)
