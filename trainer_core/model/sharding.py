"""Sharded data parallelism with FSDP2 (``sharding: "fsdp"``): each of the W processes holds a W-th
of every parameter, its gradient and its optimizer state, and gathers a block's whole parameters
only while the block computes.

A model is sharded block by block (the decoder or encoder layers its family names in
``_no_split_modules``), then at its root (embeddings, the head, the final norm: tied weights stay
in one unit). The parameters stay fp32 (mixed precision computes in 16 bits from them, as without
sharding), and gradients are reduced in fp32: FSDP1 in the popular stacks accumulates them in 16
bits, which is where accumulation stops being exact.

Inside a window a rank keeps its gradients unsharded and unreduced
(``set_requires_gradient_sync(False)``, DDP's ``no_sync``); the window's last backward
reduce-scatters the sum once. FSDP2 averages over the W ranks, as DDP does, so each rank's loss is
the same Σ its item losses / (N_W / W) as under DDP (``trainer_core.distributed``).
"""

from __future__ import annotations

from typing import Any

import torch

SHARDED_NAME = "fsdp"


def block_classes(model: Any) -> set[str]:
    """The class names of a model's repeated blocks (a LoRA model's base's): those its family
    names in ``_no_split_modules``, else the members of its longest list of like modules (a
    BERT classifier names none: its encoder's layers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    named = set(getattr(base, "_no_split_modules", None) or ())
    if named:
        return named
    lists = [m for m in base.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 1]
    alike = [m for m in lists if len({type(member) for member in m}) == 1]
    longest = max(alike, key=len, default=None)
    return set() if longest is None else {type(longest[0]).__name__}


def fp32_reduction() -> Any:
    """FSDP2's policy: parameters as they are (fp32), gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(reduce_dtype=torch.float32)


def shard_model(model: torch.nn.Module) -> None:
    """``fully_shard`` each block, then the root, in place; gradients reduced in fp32. Untied
    embeddings and head are units of their own: the root would keep them whole from the
    forward's start to the backward's end (a vocabulary of 151,936 x 4,096 is 2.5 GB each);
    tied, they are one parameter and stay in the root."""
    from torch.distributed.fsdp import fully_shard

    policy = fp32_reduction()
    names = block_classes(model)
    blocks = [module for module in model.modules() if type(module).__name__ in names]
    if not blocks:
        raise ValueError(f"sharding: no repeated block to shard in {type(model).__name__}")
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    for unit in _untied_vocabulary(model):
        fully_shard(unit, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def _untied_vocabulary(model: Any) -> list[torch.nn.Module]:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if embeddings is None or head is None or embeddings.weight is head.weight:
        return []
    return [embeddings, head]


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def set_gradient_sync(model: Any, sync: bool) -> None:
    """Reduce-scatter this backward's gradients (a window's last) or keep them local."""
    model.set_requires_gradient_sync(sync)


def local_norm(norm: Any) -> torch.Tensor:
    """A gradient norm over sharded gradients (a DTensor) as a plain tensor."""
    from torch.distributed.tensor import DTensor

    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state on rank 0, in CPU memory (every rank must call it: a gather);
    the other ranks get an empty dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    whole: dict[str, Any] = get_model_state_dict(model, options=options)
    tied = _tied_names(model)
    return {name: tensor for name, tensor in whole.items() if name not in tied}


def _tied_names(model: torch.nn.Module) -> set[str]:
    """The second name of each tied parameter (GPT-2's lm_head is its embedding): gathered,
    the two are separate copies, and a saved model holds the first only, as save_pretrained
    writes a model that is not sharded."""
    first: dict[int, str] = {}
    tied = set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            tied.add(name)
        first.setdefault(id(parameter), name)
    return tied


def fsdp_plugin(model: torch.nn.Module) -> Any:
    """Accelerate's FSDP2 plugin sharding the model's blocks, then its root, with gradients
    reduced in fp32 (given no policy, Accelerate reduces them in the mixed precision's dtype)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=sorted(block_classes(model)),
        reshard_after_forward=True,
        state_dict_type="SHARDED_STATE_DICT",
        mixed_precision_policy=fp32_reduction(),
        cpu_ram_efficient_loading=False,
    )


def shard_on_cpu(accelerator: Any, plugin: Any) -> None:
    """Accelerate turns FSDP on for GPU worlds only; its FSDP2 path (``fully_shard``) runs on
    CPU processes (gloo) as well, and is turned on for them here, as Accelerate would."""
    from accelerate.utils import DistributedType

    state = accelerator.state
    if state.distributed_type == DistributedType.MULTI_CPU:
        state.distributed_type = DistributedType.FSDP
        state.fsdp_plugin = plugin
