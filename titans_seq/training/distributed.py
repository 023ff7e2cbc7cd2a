"""Multi-process training under `torchrun`: process group, model wrapping, collectives.

One process per device. `torchrun --nproc_per_node N -m titans_seq.cli train RECIPE` sets
RANK/WORLD_SIZE/LOCAL_RANK; without them everything here degrades to a single process and the
collectives are no-ops, so the training loop has a single code path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..devices import resolve_device


@dataclasses.dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    # joined by this context's setup (and so left by its teardown); a group joined by an
    # enclosing `process_group` outlives the runs inside it
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes logs, checkpoints and plots."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup(device_preference: str = "auto") -> DistContext:
    """Join the process group that torchrun describes in the environment (if any)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = resolve_device(device_preference, local_rank())
    owns_group = world_size > 1 and not dist.is_initialized()
    if owns_group:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # NCCL for GPUs; gloo for CPU (tests, debugging)
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    return DistContext(rank, world_size, local_rank(), device, owns_group)


def local_rank() -> int:
    """This process's index on its machine under torchrun (0 in a single process): the
    GPU it uses."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def teardown(ctx: DistContext) -> None:
    """Leave the process group if `setup` joined it."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def process_group(device_preference: str = "auto"):
    """The torchrun process group for the block (a no-op in a single process): the runs
    inside it share one group instead of each joining and leaving it. Yields the context."""
    ctx = setup(device_preference)
    try:
        yield ctx
    finally:
        teardown(ctx)


def broadcast_module(module: nn.Module, ctx: DistContext) -> None:
    """Rank 0's parameters and buffers copied into `module` on every rank (in place)."""
    if not ctx.distributed:
        return
    for value in module.state_dict().values():
        dist.broadcast(value, src=0)


def wrap_model(model: nn.Module, ctx: DistContext, strategy: str) -> nn.Module:
    """DDP (replicated) or FSDP2 (`fully_shard`: parameters, gradients and optimizer state
    sharded; each child of a ModuleList, i.e. each block, becomes one sharding unit)."""
    if not ctx.distributed:
        return model
    if strategy == "ddp":
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for module in list(model.modules()):
            if isinstance(module, nn.ModuleList):
                for block in module:
                    fully_shard(block)
        fully_shard(model)
        return model
    raise ValueError(f"train.distributed must be 'ddp' or 'fsdp', got {strategy!r}")


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def is_sharded(model: nn.Module) -> bool:
    """True for an FSDP2 (`fully_shard`) model."""
    import sys

    # importing torch.distributed.fsdp costs ~1 s; a model can only be sharded if it was
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool):
    """Skip the gradient all-reduce on accumulation micro-steps but the last one."""
    if enabled:
        yield
    elif isinstance(model, nn.parallel.DistributedDataParallel):
        with model.no_sync():
            yield
    elif is_sharded(model):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


# --------------------------------------------------------------- full (unsharded) states
def model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full state dict on every rank (a collective under FSDP: call it on all ranks)."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts)
    return unwrap(model).state_dict()


def _broadcast_options():
    """Full states are read on rank 0 and broadcast: ranks iterating their own copies would
    issue the scatter collectives in mismatched orders."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)


def load_model_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state dict (under FSDP: a collective; only rank 0's `state` is used)."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        state = state if dist.get_rank() == 0 else {}
        set_model_state_dict(model, state, options=_broadcast_options())
        return
    unwrap(model).load_state_dict(state)


def optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Full optimizer state keyed by parameter *name* (as FSDP's full state dicts are), so a
    checkpoint resumes under any strategy and survives a reordering of the parameters."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=opts)
    names = _param_names(model, optimizer)
    state = optimizer.state_dict()
    return {
        "state": {names[i]: value for i, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[i] for i in group["params"]]}
            for group in state["param_groups"]
        ],
    }


def load_optimizer_state_dict(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        state = state if dist.get_rank() == 0 else {}
        set_optimizer_state_dict(model, optimizer, state, options=_broadcast_options())
        return
    index = {name: i for i, name in enumerate(_param_names(model, optimizer))}
    unknown = sorted(set(state["state"]) - set(index))
    if unknown:
        raise ValueError(f"the checkpoint has optimizer state for unknown parameters {unknown}")
    optimizer.load_state_dict(
        {
            "state": {index[name]: value for name, value in state["state"].items()},
            "param_groups": [
                {**group, "params": [index[name] for name in group["params"]]}
                for group in state["param_groups"]
            ],
        }
    )


def _param_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Names of the optimizer's parameters in its own order (= the ids of its state dict)."""
    names = {id(p): name for name, p in unwrap(model).named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


# ------------------------------------------------------------------------- collectives
def all_reduce_sum(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    if ctx.distributed:
        values = values.to(ctx.device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def average_gradients(model: nn.Module, ctx: DistContext) -> None:
    """Average every parameter's gradient over the processes (in place), as DDP's backward
    does; for steps that call the bare model several times per backward."""
    if not ctx.distributed:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= ctx.world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def all_gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank (small Python objects only)."""
    if not ctx.distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, ctx: DistContext) -> Any:
    """Rank 0's `obj` on every rank."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()
