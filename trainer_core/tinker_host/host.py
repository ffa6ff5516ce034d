"""One Tinker training model between its calls. Every ``forward_backward`` before an
``optim_step`` adds to one accumulation window: the gradient buffers hold the raw sum of the
window's losses (``trainer_core.tinker_losses``), so the chunks a client cut a call into, the order
they arrive in and the micro-batches this host cuts them into for memory cannot change it. At
``optim_step`` the sum is divided by the window's divisor (its normalisation mode), clipped when
asked, and applied by AdamW or plain SGD with the parameters the step carries.

With several data-parallel ranks (``torch.distributed``), each rank holds a replica and adds the
share of each call it was given; ``optim_step`` sums the ranks' gradients and counts first, so
the update does not depend on the rank count either."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from trainer_core.distributed import SINGLE, World, gather_lists
from trainer_core.tinker_host.model import ModelChoice, export, load, trainable
from trainer_core.tinker_losses import Window, check_inputs, datum_loss, loss_tokens

Config = Mapping[str, float | str]
FAMILIES = ("adamw", "sgd")


@dataclass
class Datum:
    """``tokens``: the model input; ``inputs``: the loss inputs, each of the input's length."""

    tokens: list[int]
    inputs: dict[str, Tensor]


def check_data(data: Sequence[Datum], loss: str, config: Config) -> None:
    """A ValueError naming the first bad datum or setting, before anything is computed."""
    for index, datum in enumerate(data):
        try:
            check_inputs(loss, datum.inputs, len(datum.tokens))
        except ValueError as exc:
            raise ValueError(f"data[{index}].{exc}") from None
    Window().add(config, [])  # its normalisation mode, checked


@dataclass(frozen=True)
class StepParams:
    """An ``optim_step``'s parameters; ``family`` ``adamw`` (AdamParams as sent) or ``sgd``."""

    family: str = "adamw"
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


@dataclass
class Output:
    logprobs: list[Tensor]  # per datum, the target tokens' log-probabilities
    metrics: dict[str, float] = field(default_factory=dict)


class TrainingHost:
    def __init__(
        self,
        choice: ModelChoice,
        *,
        family: str = "adamw",
        micro_batch: int = 0,
        device: torch.device | None = None,
    ) -> None:
        """``device``: this process's GPU when it has one (``torch.cuda.current_device()``)."""
        if family not in FAMILIES:
            raise ValueError(
                f"optimizer_config.type: one of {', '.join(FAMILIES)} (got {family!r})"
            )
        self.choice, self.family, self.micro_batch = choice, family, micro_batch
        self.model, self.tokenizer = load(choice)
        self.device = device or _default_device()
        self.model.to(self.device)
        self.params = trainable(self.model)
        self.window = Window()
        self.optimizer: torch.optim.Optimizer = self._new_optimizer()
        self.steps = 0
        # Data-parallel ranks (torch.distributed initialised by the caller): each rank holds a
        # replica and adds its share of the window; optim_step sums them (``_ranks_window``).
        together = dist.is_available() and dist.is_initialized()
        self.world = World(dist.get_rank(), dist.get_world_size()) if together else SINGLE

    def _new_optimizer(self) -> torch.optim.Optimizer:
        params = list(self.params.values())
        if self.family == "sgd":
            return torch.optim.SGD(params, lr=0.0)
        return torch.optim.AdamW(params, lr=0.0, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)

    # -- forward and backward -------------------------------------------------------------

    def forward_backward(
        self, data: Sequence[Datum], loss: str, config: Config, *, forward_only: bool = False
    ) -> Output:
        """Each datum's target logprobs and ``loss:sum``; unless ``forward_only``, the gradient of
        the summed loss is added to the window (nothing is added when a datum is refused)."""
        check_data(data, loss, config)
        window = Window()
        if not forward_only:
            window.add(config, [loss_tokens(d.inputs, len(d.tokens)) for d in data])
        size = self.micro_batch if self.micro_batch > 0 else max(len(data), 1)
        logprobs: list[Tensor] = []
        total = 0.0
        for start in range(0, len(data), size):
            part = data[start : start + size]
            with torch.set_grad_enabled(not forward_only):
                found = self._logprobs(part)
                losses = [
                    datum_loss(loss, p, _on(d.inputs, self.device), config)
                    for p, d in zip(found, part, strict=True)
                ]
                summed = torch.stack(losses).sum()
                if not forward_only:
                    summed.backward()  # type: ignore[no-untyped-call]
            total += float(summed.detach())
            logprobs.extend(p.detach().float().cpu() for p in found)
        if not forward_only:
            self.window.merge(window)
        return Output(logprobs, {"loss:sum": total})

    def _logprobs(self, data: Sequence[Datum]) -> list[Tensor]:
        """The target tokens' log-probabilities, one micro-batch padded on the right."""
        longest = max(len(d.tokens) for d in data)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(data), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(data), longest), dtype=torch.long)
        for row, datum in enumerate(data):
            ids[row, : len(datum.tokens)] = torch.tensor(datum.tokens, dtype=torch.long)
            mask[row, : len(datum.tokens)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        found = []
        for row, datum in enumerate(data):
            n = len(datum.tokens)
            targets = datum.inputs["target_tokens"].long().to(self.device)
            found.append(logp[row, :n].gather(-1, targets[:, None])[:, 0])
        return found

    # -- the step ---------------------------------------------------------------------------

    def optim_step(self, step: StepParams) -> dict[str, float]:
        """The window's update; its divisor is checked before anything changes."""
        if step.family != self.family:
            raise ValueError(
                f"optimizer: this model was created with {self.family!r}, the step sends "
                f"{step.family!r} parameters"
            )
        window = self._ranks_window()
        divisor = window.divisor()  # every rank refuses alike, before anything changes
        self._sum_ranks_grads()
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        for grad in grads:
            grad.div_(divisor)
        norm = _norm(grads)
        if step.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(list(self.params.values()), step.grad_clip_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = step.learning_rate
            if self.family == "adamw":
                group.update(
                    betas=(step.beta1, step.beta2), eps=step.eps, weight_decay=step.weight_decay
                )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        tokens, sequences = window.tokens, window.sequences
        self.window = Window()
        self.steps += 1
        return {
            "grad_norm:mean": norm,
            "window_divisor:mean": divisor,
            "window_tokens:sum": float(tokens),
            "window_sequences:sum": float(sequences),
        }

    # -- ranks ------------------------------------------------------------------------------

    def _ranks_window(self) -> Window:
        """The window's counts over every rank (this rank's alone when there is one)."""
        if not self.world.distributed:
            return self.window
        mine = (self.window.tokens, self.window.sequences, sorted(self.window.modes))
        merged = Window()
        for tokens, sequences, modes in gather_lists([mine], self.world):
            merged.merge(Window(tokens, sequences, set(modes)))
        return merged

    def _sum_ranks_grads(self) -> None:
        """Every rank's gradient buffers become the sum over the ranks (one collective)."""
        if not self.world.distributed:
            return
        params = list(self.params.values())
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        parts = torch.split(flat, [g.numel() for g in grads])
        for p, part in zip(params, parts, strict=True):
            p.grad = part.view_as(p).clone()

    def collect(self) -> None:
        """The open window onto rank 0 (its gradient sum and counts; the other ranks' emptied):
        before rank 0 swaps the model out whole. Every rank calls it."""
        if not self.world.distributed:
            return
        window = self._ranks_window()
        self._sum_ranks_grads()
        if self.world.is_main:
            self.window = window
        else:
            self.optimizer.zero_grad(set_to_none=True)
            self.window = Window()

    # -- state ------------------------------------------------------------------------------

    def weights(self) -> dict[str, Tensor]:
        """The trainable weights (a LoRA's adapters, or every weight), copied."""
        return {name: p.detach().clone() for name, p in self.params.items()}

    def set_weights(self, weights: Mapping[str, Tensor]) -> None:
        missing = set(self.params) - set(weights)
        if missing:
            raise ValueError(f"path: the checkpoint lacks {len(missing)} weights of this model")
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(weights[name])

    def save(self, path: Path, *, optimizer: bool) -> int:
        """``save_state`` (with the optimizer) or sampler weights (without); the bytes written."""
        state: dict[str, Any] = {"weights": self.weights(), "choice": vars(self.choice)}
        if optimizer:
            state.update(
                optimizer=self.optimizer.state_dict(), family=self.family, steps=self.steps
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, path)
        return path.stat().st_size

    def export(self, folder: Path) -> int:
        """The weights as a model folder (``trainer_core.tinker_host.model.export``)."""
        return export(self.model, self.tokenizer, self.choice, folder)

    def restore(self, path: Path, *, optimizer: bool) -> None:
        """``load_state``: the weights, and the optimizer state when asked (else a fresh one).
        The window starts empty."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.set_weights(state["weights"])
        self.optimizer = self._new_optimizer()
        if optimizer:
            if "optimizer" not in state:
                raise ValueError("path: sampler weights hold no optimizer state; save_state does")
            if state.get("family") != self.family:
                raise ValueError(f"optimizer: the checkpoint's is {state.get('family')!r}")
            self.optimizer.load_state_dict(state["optimizer"])
            self.steps = int(state.get("steps", 0))
        self.optimizer.zero_grad(set_to_none=True)
        self.window = Window()

    def swap_out(self, path: Path) -> None:
        """Everything this model is between two calls, written to ``path``: the weights, the
        optimizer state, and the open window (its gradient buffers and counts), so that
        ``swap_in`` on a fresh host of the same model goes on as if nothing happened."""
        grads = {name: p.grad for name, p in self.params.items() if p.grad is not None}
        window = {
            "tokens": self.window.tokens,
            "sequences": self.window.sequences,
            "modes": sorted(self.window.modes),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "weights": self.weights(),
            "optimizer": self.optimizer.state_dict(),
            "grads": grads,
            "window": window,
            "steps": self.steps,
        }
        torch.save(state, path)

    def swap_in(self, path: Path, *, whole: bool = True, unlink: bool = True) -> None:
        """``whole``: the open window too (one rank's, rank 0's, after ``collect``)."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.set_weights(state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])
        if whole:
            for name, grad in state["grads"].items():
                self.params[name].grad = grad.to(self.device)
            found = state["window"]
            self.window = Window(found["tokens"], found["sequences"], set(found["modes"]))
        self.steps = int(state["steps"])
        if unlink:
            path.unlink(missing_ok=True)


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _on(inputs: Mapping[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {name: value.to(device) for name, value in inputs.items()}


def _norm(grads: list[Tensor]) -> float:
    if not grads:
        return 0.0
    value = float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    )
    return value if math.isfinite(value) else 0.0
