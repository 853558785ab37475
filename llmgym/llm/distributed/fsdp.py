"""Sharded LLM servers (``distributed.sharding: fsdp``): one FSDP2 group over the Ray servers.

Each server applies torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) to every transformer
block and to the whole model, over the servers' existing ``torch.distributed`` group (gloo on
CPUs, NCCL on GPUs). At rest a server holds ``1/N`` of every parameter (fp32 master shards of
what trains), of every gradient and of the optimizer's state (AdamW steps the sharded
``DTensor`` parameters).

A call (``score``, ``forward``, ``generate``, ``token_logprobs``, ``update``...) gathers the
parameters with FSDP's all-gathers (``FSDPModule.unshard``; in the compute dtype, bf16 under
mixed precision) once at its start, runs the unchanged ``LocalLLM`` code on this server's share
of the batch, and frees the gathered copy at its end (``reshard``). Every server is called for
every call, an empty share included (:class:`~.dispatch.ShardedBackend` sees to it), so the
all-gathers always meet, whatever the number of forward passes, decoding steps or gradient
accumulation chunks each share needs: the passes themselves communicate nothing. Backward leaves
each server's full local gradients (FSDP's own reduction is off); ``sync_gradients`` then
averages them over the servers weighted by their sample counts, exactly as the replicated
servers do, keeps this server's shard as the master's gradient and drops the full one; after the
optimizer steps the shards, the parameters are gathered again for the next minibatch.

What is sharded: the model's parameters (frozen and trainable, LoRA adapters and base alike),
the trainable ones' gradients and optimizer state, and the frozen reference copy
(``model.reference_copy``). What is replicated: the heads (value, action: a few thousand
parameters, their gradients all-reduced as on replicated servers).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from llmgym.errors import CheckpointError
from llmgym.llm.collectives import check_num_samples, weighted_mean
from llmgym.llm.local import LocalLLM
from llmgym.llm.updater import Updater

__all__ = ["ShardedLLM", "full_tensor", "is_sharded", "replicated", "shard_model", "state_bytes"]


def is_sharded(tensor: Any) -> bool:
    """Whether ``tensor`` is a ``DTensor`` (a shard of a parameter held by FSDP)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def replicated(parameters: Sequence[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """The parameters every server holds whole (the heads), leaving out FSDP's shards."""
    return [p for p in parameters if not is_sharded(p)]


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a shard's gathered value (a collective: every server must call it), else itself."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor  # type: ignore[attr-defined]


def shard_model(model: torch.nn.Module, compute_dtype: torch.dtype) -> list[Any]:
    """Apply FSDP2 to each transformer block of ``model``, then to ``model``; return its FSDP modules.

    The blocks are the modules whose class is named in the model's ``_no_split_modules`` (each
    block's parameters are one all-gather). Under a half ``compute_dtype`` (``model.dtype``
    bfloat16) the shards keep their own dtype (fp32 for what trains) and are gathered in the
    compute dtype (``MixedPrecisionPolicy(param_dtype=...)``). FSDP's gradient reduction is
    switched off: :class:`ShardedLLM` reduces the gradients itself, weighted by samples.

    Args:
        model: The model (a PEFT model included), on this server's device.
        compute_dtype: The dtype the forward passes compute in.

    Returns:
        The FSDP modules, blocks first and ``model`` last.
    """
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    half = compute_dtype in (torch.bfloat16, torch.float16)
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype if half else None)
    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names and m is not model]
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    # llmgym runs the trunk and the LM head apart (scoring, prefill), so the first FSDP module a pass
    # enters may be a block: initialise the whole tree from its root now, as its first forward would.
    fully_shard.state(model)._lazy_init()  # type: ignore[attr-defined]
    root: Any = model
    root.set_reshard_after_forward(False)
    root.set_reshard_after_backward(False)
    root.set_requires_gradient_sync(False)
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


class ShardedLLM(LocalLLM):
    """A ``LocalLLM`` whose model is sharded with FSDP2 over the LLM servers' process group.

    Built on each server by :class:`~.backend.LocalLLMFactory` when ``distributed.sharding`` is
    ``fsdp``; the public methods are ``LocalLLM``'s, each gathering the parameters around itself.
    Every server must make every call (an empty share included), in the same order. Its arguments
    are ``LocalLLM``'s (``collectives``: the servers' process group; the heads are replicated on
    every server).
    """

    def _prepare_training(self, updater: Updater | type[Updater] | None) -> None:
        """Shard the model (and the reference) over the servers, then bind the Updater over the master shards.

        After each optimizer step inside a call, the stepped parameters are gathered again.
        """
        _broadcast_trainable(self.model)
        self._trained_modules = shard_model(self.model, self.compute_dtype)
        self._fsdp_modules = list(self._trained_modules)
        if self.reference_model is not None:
            self._fsdp_modules += shard_model(self.reference_model, self.compute_dtype)
        #: The trainable parameters' master shards by name (the optimizer's parameters).
        self.masters = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        self._depth = 0
        super()._prepare_training(updater)
        if self.updater is not None and self.updater.optimizer is not None:
            self.updater.optimizer.register_step_post_hook(lambda *_: self._regather())

    # ------------------------------------------------------------------ gathering
    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Within this block the model (and reference) hold their whole parameters (a collective).

        Nested blocks gather once.
        """
        self._check_open()
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        for module in self._fsdp_modules:
            module.unshard()
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            for module in self._fsdp_modules:
                module.reshard()

    def _regather(self) -> None:
        """After an optimizer step on the shards: gather the stepped parameters again (inside a call)."""
        if not self._depth:
            return
        for module in self._trained_modules:
            module.reshard()
        for module in self._trained_modules:
            module.unshard()

    # ------------------------------------------------------------------ public API, gathered
    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], **kwargs: Any) -> Any:
        """``LocalLLM.score`` with the parameters gathered (an empty share joins the gathering)."""
        with self.gathered():
            return super().score(contexts, candidates, **kwargs) if len(contexts) else []

    def forward(self, keys: Sequence[str], contexts: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        """``LocalLLM.forward`` with the parameters gathered."""
        with self.gathered():
            return super().forward(keys, contexts, *args, **kwargs) if len(contexts) else []

    def token_logprobs(self, prompt_ids: Sequence[Sequence[int]], *args: Any, **kwargs: Any) -> Any:
        """``LocalLLM.token_logprobs`` with the parameters gathered."""
        with self.gathered():
            return super().token_logprobs(prompt_ids, *args, **kwargs) if len(prompt_ids) else []

    def generate(self, contexts: Sequence[str], **generation_kwargs: Any) -> Any:
        """``LocalLLM.generate`` with the parameters gathered."""
        with self.gathered():
            return super().generate(contexts, **generation_kwargs)

    def update(self, contexts: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        """``LocalLLM.update`` with the parameters gathered (and gathered again after each optimizer step)."""
        with self.gathered():
            return super().update(contexts, *args, **kwargs)

    def refresh_mask_policy(self) -> None:
        """``LocalLLM.refresh_mask_policy`` on the gathered weights (the snapshot is whole on every server)."""
        with self.gathered():
            super().refresh_mask_policy()

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a sharded checkpoint (:mod:`~llmgym.llm.sharded_state`): every server its shards, server 0 the rest.

        A collective: every server calls it with the same ``path`` (on a file system they share).
        """
        import torch.distributed as dist

        from llmgym.llm.sharded_state import save_sharded_state

        self._check_open()
        optimizer = self.updater.optimizer if self.updater is not None else None
        rest = None
        if self.updater is not None:
            rest = {k: v for k, v in self.updater.state_dict().items() if k != "optimizer"}
        meta: dict[str, Any] = {
            "sharding": "fsdp",
            "servers": dist.get_world_size(),
            "modules": sorted(self.module_functions),
        }
        if self.base_fingerprint is not None:
            meta["base_model"] = self.base_fingerprint.to_json()
        modules = dict(self.module_functions.items())
        save_sharded_state(path, self.model, modules, optimizer, rest, meta, self.mask_policy.state_dict())
        self.clear_trunk_cache()

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load a sharded checkpoint, written by any number of sharded servers (DCP reshards); a collective.

        Raises:
            CheckpointError: When the folder is incomplete, corrupted, from another base model, or was
                written by unsharded servers (whole weights: resume it with ``distributed.sharding=none``).
        """
        from llmgym.llm.persistence import load_llm_state, load_mask_policy, read_meta

        self._check_open()
        if read_meta(Path(path)).get("weights") != "sharded":
            raise CheckpointError(
                f"checkpoint {str(path)!r} was written by unsharded LLM servers (distributed.sharding=none); load it "
                "with distributed.sharding=none (any number of servers), or start the sharded run afresh."
            )
        optimizer = self.updater.optimizer if self.updater is not None else None
        modules = dict(self.module_functions.items())
        state = load_llm_state(path, self.model, modules, self.base_fingerprint, optimizer)
        with self.gathered():
            self.mask_policy.load_state_dict(load_mask_policy(path), self.model)
        self.trunk_cache.clear()
        self.weights_version += 1
        if state is not None and self.updater is not None:
            self.updater.load_state_dict(state)

    # ------------------------------------------------------------------ training
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters' master shards (``DTensor``), then the heads' parameters."""
        heads = [p for p in self.module_functions.parameters() if p.requires_grad]
        return list(self.masters.values()) + heads

    def sync_gradients(self, num_samples: int) -> None:
        """Average the gradients over the servers, weighted by ``num_samples``; keep this server's shard.

        The full local gradients that backward left on the gathered parameters are all-reduced
        one parameter at a time (float32, as on replicated servers), sliced to this server's
        shard, set as the master's gradient and dropped. The heads' gradients are all-reduced whole.
        """
        from torch.distributed.tensor import DTensor

        check_num_samples("sync_gradients", num_samples)
        heads = [p for p in self.module_functions.parameters() if p.requires_grad]
        self.collectives.sync_gradients(heads, num_samples)
        gathered = dict(self.model.named_parameters())
        for name, master in self.masters.items():
            param = gathered[name]
            grad = param.grad if param.grad is not None else torch.zeros(param.shape, device=param.device)
            mean = weighted_mean(grad.detach().reshape(-1).to(torch.float32), num_samples).view(param.shape)
            local = _shard_of(
                mean, master.to_local().shape, master.device_mesh.get_local_rank(), master.device_mesh.size()
            )  # type: ignore[attr-defined]
            master.grad = DTensor.from_local(
                local.to(master.dtype),
                master.device_mesh,  # type: ignore[attr-defined]
                master.placements,  # type: ignore[attr-defined]
                shape=master.shape,
                stride=master.stride(),
                run_check=False,
            )
            param.grad = None


def _broadcast_trainable(model: torch.nn.Module) -> None:
    """Give every server server 0's trainable weights (LoRA's random init), one tensor at a time, in place."""
    import torch.distributed as dist

    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                dist.broadcast(param.data, src=0)


def _shard_of(full: torch.Tensor, shape: torch.Size, rank: int, world: int) -> torch.Tensor:
    """The server's dim-0 chunk of ``full`` (FSDP2's ``torch.chunk`` layout: trailing ranks may hold none)."""
    chunks = full.chunk(world, dim=0)
    local = chunks[rank] if rank < len(chunks) else full.new_zeros((0, *full.shape[1:]))
    if local.shape != shape:
        raise RuntimeError(
            f"gradient shard of shape {tuple(local.shape)} does not match FSDP's shard {tuple(shape)} on rank {rank}"
        )
    return local.contiguous()


def state_bytes(backend: Any) -> dict[str, int]:
    """Bytes this server holds at rest: parameters, gradients and optimizer state (shards count their local part).

    Args:
        backend: A server's ``LocalLLM`` or :class:`ShardedLLM`.

    Returns:
        ``{"parameters", "gradients", "optimizer"}``: every parameter of the model, the reference copy
        and the heads (tied ones once), the trainable parameters' gradients, the optimizer's tensors.
    """

    def size(tensor: torch.Tensor) -> int:
        local = tensor.to_local() if is_sharded(tensor) else tensor  # type: ignore[attr-defined]
        return int(local.numel() * local.element_size())

    modules = [backend.model, backend.reference_model, backend.module_functions]
    params = {id(p): p for module in modules if module is not None for p in module.parameters()}
    grads = [p.grad for p in backend.trainable_parameters() if p.grad is not None]
    optimizer = getattr(backend.updater, "optimizer", None)
    states = [
        value
        for state in (optimizer.state.values() if optimizer is not None else [])
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]
    return {
        "parameters": sum(map(size, params.values())),
        "gradients": sum(map(size, grads)),
        "optimizer": sum(map(size, states)),
    }
