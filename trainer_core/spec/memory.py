"""The memory a job's states need per device, from its model's config alone, torch-free: what the
API can tell at POST, before anything is loaded. Weights, gradients and optimizer state are exact
counts of the architecture's parameters (the decoder families Qwen, Llama and Mistral are made
of, and GPT-2); activations and logits depend on the implementation and are measured by the core
on the job's own model (``trainer_core.model.memory_plan``), so a POST refuses only a job whose
states alone cannot fit: it never refuses one that would.

Training keeps fp32 weights (mixed precision computes in 16 bits from them), so a parameter is
4 bytes, its gradient 4, AdamW's two moments 8: 16 bytes for each trainable one. A 4-bit base
(``load_in_4bit``) holds its linear layers' weights in nf4 (half a byte, plus a 4-byte scale per
64) and trains adapters only. Sharding over N devices divides weights, gradients and optimizer
state by N, and adds what is gathered whole during a step: the vocabulary's unit (tied
embeddings and head are one unit, the root, which FSDP2 keeps whole from the forward's start to
the backward's end; untied, the embeddings and the head are units of their own,
``trainer_core.model.sharding``) and two blocks (one computing, one prefetched); and, while a
unit's gradients are reduced, its whole gradients and the reduction's copy of them.

Example:
    >>> from trainer_core.spec.shapes import SHAPES
    >>> states = state_bytes(SHAPES["builtin:qwen3-8b-shape"], optimizer="adamw_torch")
    >>> round(states.total / 1e9)
    131
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3")
# peft's default target modules (its TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
LORA_DEFAULTS = {"gpt2": ("c_attn",), **dict.fromkeys(LLAMA_FAMILY, ("q_proj", "v_proj"))}
OPTIMIZER_BYTES = {"adamw_torch": 8, "adamw_torch_fused": 8, "sgd": 0, "adafactor": 0}
NF4_BYTES = 0.5 + 4 / 64  # a 4-bit weight and its block's fp32 scale


@dataclass(frozen=True)
class Inventory:
    """An architecture's parameters: all of them, those in linear layers of its blocks (what a
    4-bit base quantizes and LoRA adapts, by name: in, out features), and one block's."""

    total: int
    block: int
    linears: dict[str, tuple[int, int]]  # one block's, by module name
    layers: int


@dataclass(frozen=True)
class States:
    weights: int
    gradients: int
    optimizer: int
    # Sharded: the vocabulary unit's whole gradients, made by the head's backward (the first)
    # while the activations and logits are still held; tied, they live to the backward's end
    # (the embeddings add theirs last); untied, with the reduction's copy.
    backward_start: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer


@dataclass(frozen=True)
class MemoryPlan:
    """A job's memory per device, by part (bytes): what ``gradacc preview`` and a job's start
    show. The peak of a step: the weights and optimizer state, then the larger of the
    gradients and what the backward starts from (activations, logits and their gradient)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int  # saved for the backward, without gradient checkpointing
    activations_checkpointed: int  # with it: the blocks' inputs and one block recomputed
    logits: int  # whole logits and their gradient, or a chunk's (loss_chunk_tokens)
    checkpointing: bool  # the job's gradient_checkpointing
    backward_start: int = 0  # gradients beside the activations as the backward starts (sharded)
    device: int | None = None  # the device's memory, when known
    micro_batch: int = 1
    seq_len: int = 0
    shards: int = 1

    @property
    def total(self) -> int:
        acts = self.activations_checkpointed if self.checkpointing else self.activations
        start = acts + self.logits + self.backward_start
        return self.weights + self.optimizer + max(self.gradients, start)

    @property
    def fits(self) -> bool | None:
        return None if self.device is None else self.total <= self.device

    def as_dict(self) -> dict[str, Any]:
        parts = (
            "weights",
            "gradients",
            "optimizer",
            "activations",
            "activations_checkpointed",
            "logits",
            "backward_start",
            "checkpointing",
            "device",
            "micro_batch",
            "seq_len",
            "shards",
        )
        return {name: getattr(self, name) for name in parts} | {
            "total": self.total,
            "fits": self.fits,
        }

    def advice(self) -> str | None:
        """For a plan over its device: what would bring it under, by the spec's fields."""
        if self.device is None or self.total <= self.device:
            return None
        ways = []
        if not self.checkpointing:
            checkpointed = replace(self, checkpointing=True)
            if checkpointed.total <= self.device:
                ways.append(f"gradient_checkpointing: true ({_gib(checkpointed.total)})")
        acts = self.activations_checkpointed if self.checkpointing else self.activations
        per_row = (acts + self.logits) / self.micro_batch
        room = self.device - self.weights - self.optimizer
        rows = int(room // per_row) if per_row else 0
        if 0 < rows < self.micro_batch and self.gradients <= room:
            ways.append(f"per_device_train_batch_size {rows} or less (K grows to match)")
        if self.logits > acts:
            ways.append("loss_chunk_tokens: 1024 (the logits a chunk at a time)")
        found = "; or ".join(ways) or "sharding, LoRA or a 4-bit base (the states)"
        return (
            f"the memory plan ({_gib(self.total)} per device) is over this device's "
            f"{_gib(self.device)}: {found}"
        )

    def line(self) -> str:
        """One line for an event: each part in GiB (MiB under one)."""
        acts = self.activations_checkpointed if self.checkpointing else self.activations
        parts = [
            f"weights {_gib(self.weights)}",
            f"gradients {_gib(self.gradients)}",
            f"optimizer {_gib(self.optimizer)}",
            f"activations {_gib(acts)}" + (" (checkpointed)" if self.checkpointing else ""),
            f"logits {_gib(self.logits)}",
        ]
        where = f" of {_gib(self.device)}" if self.device is not None else ""
        return f"memory plan per device: {', '.join(parts)}; total {_gib(self.total)}{where}"


def _gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"


def inventory(config: Mapping[str, Any]) -> Inventory | None:
    """The parameters of a config of a family known here; None for another."""
    kind = config.get("model_type")
    if kind in LLAMA_FAMILY:
        return _llama(config)
    if kind == "gpt2":
        return _gpt2(config)
    return None


def _llama(c: Mapping[str, Any]) -> Inventory:
    h, ffn, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    heads = c["num_attention_heads"]
    hd = c.get("head_dim") or h // heads
    kv = c.get("num_key_value_heads") or heads
    linears = {
        "q_proj": (h, heads * hd),
        "k_proj": (h, kv * hd),
        "v_proj": (h, kv * hd),
        "o_proj": (heads * hd, h),
        "gate_proj": (h, ffn),
        "up_proj": (h, ffn),
        "down_proj": (ffn, h),
    }
    block = sum(i * o for i, o in linears.values()) + 2 * h  # and its two norms
    if c.get("attention_bias") or c["model_type"] == "qwen2":  # q, k, v biases
        block += heads * hd + 2 * kv * hd
    if c.get("mlp_bias"):
        block += 2 * ffn + h
    if c["model_type"] == "qwen3":  # q_norm, k_norm
        block += 2 * hd
    layers = c["num_hidden_layers"]
    head = 0 if c.get("tie_word_embeddings") else vocab * h
    return Inventory(vocab * h + layers * block + h + head, block, linears, layers)


def _gpt2(c: Mapping[str, Any]) -> Inventory:
    h, vocab, positions = c.get("n_embd", 768), c["vocab_size"], c.get("n_positions", 1024)
    inner = c.get("n_inner") or 4 * h
    linears = {"c_attn": (h, 3 * h), "c_proj": (h, h), "c_fc": (h, inner), "mlp.c_proj": (inner, h)}
    block = sum(i * o + o for i, o in linears.values()) + 4 * h  # biases, two layer norms
    layers = c.get("n_layer", 12)
    return Inventory(vocab * h + positions * h + layers * block + 2 * h, block, linears, layers)


def lora_params(found: Inventory, r: int, targets: tuple[str, ...], model_type: str) -> int:
    """An adapter's parameters: r x (in + out) for each targeted linear layer of each block."""
    names = targets or LORA_DEFAULTS.get(model_type, ())
    per_block = sum(
        r * (i + o)
        for name, (i, o) in found.linears.items()
        if name in names or name.split(".")[-1] in names
    )
    return per_block * found.layers


def state_bytes(
    config: Mapping[str, Any],
    *,
    optimizer: str,
    lora: tuple[int, tuple[str, ...]] | None = None,
    four_bit: bool = False,
    shards: int = 1,
    accumulation: int = 1,
) -> States:
    """Per device: the weights (fp32; a 4-bit base's linear layers in nf4), the trainable
    parameters' gradients (fp32) and the optimizer's state, divided over ``shards`` devices (with
    two blocks gathered whole at a time). ``lora``: (r, target modules; () for peft's default).
    Sharded with ``accumulation`` K > 1, a window's gradients are kept whole until its last
    micro-batch reduces them (``trainer_core.model.sharding``): whole on every device."""
    found = inventory(config)
    if found is None:
        raise ValueError(f"no parameter count for model_type {config.get('model_type')!r}")
    trainable = found.total
    if lora is not None:
        trainable = lora_params(found, lora[0], lora[1], str(config["model_type"]))
    weights = 4.0 * found.total
    if four_bit:
        quantized = found.layers * sum(i * o for i, o in found.linears.values())
        weights += (NF4_BYTES - 4.0) * quantized
    if lora is not None:
        weights += 4 * trainable
    if shards == 1:
        return States(int(weights), 4 * trainable, OPTIMIZER_BYTES.get(optimizer, 8) * trainable)
    big, tied = _vocabulary_unit(config, found)
    gathered = 4 * (big + 2 * found.block)
    big_trained = 0 if lora is not None else big
    unit = max(big_trained, found.block if lora is None else trainable // found.layers)
    gradients = 4 * trainable if accumulation > 1 else 4 * trainable // shards
    return States(
        int(weights / shards) + gathered,
        gradients + 2 * 4 * unit,  # a unit's whole gradients and the reduction's copy
        OPTIMIZER_BYTES.get(optimizer, 8) * trainable // shards,
        backward_start=4 * big_trained * (1 if tied else 2),
    )


def _vocabulary_unit(config: Mapping[str, Any], found: Inventory) -> tuple[int, bool]:
    """The parameters of the largest unit that is not a block, and whether the embeddings and
    head are tied: tied, the root (both at once, with the positions and final norm); untied,
    the embeddings or the head."""
    if config.get("tie_word_embeddings", config.get("model_type") == "gpt2"):
        return found.total - found.layers * found.block, True
    return int(config["vocab_size"]) * int(config.get("hidden_size") or config["n_embd"]), False


def ways_to_fit(
    config: Mapping[str, Any],
    *,
    device: int,
    optimizer: str,
    shards: int,
    lora: bool,
    accumulation: int = 1,
) -> list[tuple[str, str]]:
    """What would make the states fit a device of ``device`` bytes: (the spec's field, the
    change in words with the states it leaves), for a refusal to name."""
    ways: list[tuple[str, str]] = []
    adapters = (16, ())
    if not lora:
        adapted = state_bytes(
            config, optimizer=optimizer, lora=adapters, shards=shards, accumulation=accumulation
        )
        if adapted.total < device:
            ways.append(("lora", f"LoRA (lora: {{r: 16}}: {_gib(adapted.total)} of states)"))
    sharded = _sharded(config, device, optimizer, shards, adapters if lora else None, accumulation)
    if sharded is not None:
        ways.append(("sharding", sharded))
    base = state_bytes(
        config,
        optimizer=optimizer,
        lora=adapters,
        four_bit=True,
        shards=shards,
        accumulation=accumulation,
    )
    if base.total < device:
        ways.append(
            (
                "load_in_4bit",
                f"a 4-bit base with LoRA (load_in_4bit: true, lora: {{r: 16}}: "
                f"{_gib(base.total)} of states)",
            )
        )
    return ways


def _sharded(
    config: Mapping[str, Any],
    device: int,
    optimizer: str,
    shards: int,
    lora: tuple[int, tuple[str, ...]] | None,
    accumulation: int,
) -> str | None:
    """The fewest devices to shard over (more than now) whose share fits: at the job's K, or at
    K = 1 (a window's gradients are then never held whole)."""
    for n in (2, 4, 8, 16, 32, 64):
        for k in dict.fromkeys((accumulation, 1)):
            states = state_bytes(config, optimizer=optimizer, lora=lora, shards=n, accumulation=k)
            if n > shards and states.total < device:
                window = "" if k == accumulation else ", gradient_accumulation_steps: 1"
                return (
                    f"sharding over {n} devices (num_processes: {n}, sharding: 'fsdp'{window}: "
                    f"{_gib(states.total)} of states each)"
                )
    return None
