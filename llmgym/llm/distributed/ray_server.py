"""One LLM server of the Ray backend: a Ray actor holding a ``LocalLLM``.

The driver (:mod:`.ray_backend`) creates one :class:`LLMServer` actor per server in a
placement-group bundle, then:

1. asks server 0 for a rendezvous address (:meth:`LLMServer.host_store`: a ``TCPStore`` bound to
   server 0's node address only, or to loopback on a private instance);
2. calls :meth:`LLMServer.start` on every server at once: each joins the servers'
   ``torch.distributed`` group (NCCL with whole GPUs, else gloo; the rendezvous bounded by
   ``timeout_s``, every collective by ``collective_timeout_s``), builds its ``LocalLLM`` with the group's collectives passed in, and takes
   server 0's trainable weights (broadcast), so every server starts identical;
3. calls :meth:`LLMServer.call` with a backend method's name and arguments; results come back
   with every tensor on the CPU. An exception travels back through Ray (with its traceback) and the
   driver raises it as ``BackendError``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from llmgym.llm.collectives import ProcessGroupCollectives
from llmgym.llm.distributed.fsdp import full_tensor, replicated, state_bytes
from llmgym.llm.distributed.placement import Placement

__all__ = ["SERVER_METHODS", "LLMServer", "ServerLocation"]

#: Backend methods the driver may call on a server.
SERVER_METHODS = frozenset(
    {
        "score",
        "forward",
        "generate",
        "update",
        "token_logprobs",
        "save",
        "load",
        "clear_trunk_cache",
        "trainable_parameters",
        "tokenizer",
        "refresh_mask_policy",
    }
)

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


@dataclass(frozen=True)
class ServerLocation:
    """Where one LLM server runs (for error messages and placement checks).

    Attributes:
        rank: Server rank.
        node_id: Ray node id of its machine.
        address: IP address of its node.
        pid: Its process id on that node.
        gpus: The GPU ids Ray gave it (empty on CPU).
    """

    rank: int
    node_id: str
    address: str
    pid: int
    gpus: tuple[str, ...]

    def describe(self) -> str:
        """``rank R (node ADDRESS id ABCDEF12, pid P)``."""
        return f"rank {self.rank} (node {self.address} id {self.node_id[:8]}, pid {self.pid})"


class LLMServer:
    """The body of an LLM server actor (the driver wraps it with ``ray.remote``).

    Args:
        rank: Server rank in ``[0, world_size)``.
        world_size: Number of servers.
        threads: torch intra-op threads (Ray sets ``OMP_NUM_THREADS=1`` in its workers).
        timeout_s: Deadline of the group's rendezvous.
        loopback: Bind the group's store and sockets to ``127.0.0.1`` (every server on the
            driver's machine: a private Ray instance); else to the node's address.
        collective_timeout_s: Deadline of every collective of the group; ``None``: ``timeout_s``.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        threads: int,
        timeout_s: float,
        loopback: bool,
        collective_timeout_s: float | None = None,
    ) -> None:
        import ray
        import torch

        torch.set_num_threads(threads)
        self.rank = rank
        self.world_size = world_size
        self.timeout = timedelta(seconds=timeout_s)
        self.collective_timeout = timedelta(seconds=collective_timeout_s or timeout_s)
        context = ray.get_runtime_context()
        gpus = tuple(str(g) for g in context.get_accelerator_ids().get("GPU", []))
        self.location = ServerLocation(
            rank, context.get_node_id(), ray.util.get_node_ip_address(), os.getpid(), gpus
        )
        self.bind_address = "127.0.0.1" if loopback else self.location.address
        self.backend: Any = None
        self._store: Any = None

    def where(self) -> ServerLocation:
        """Where this server runs."""
        return self.location

    def host_store(self) -> tuple[str, int]:
        """Host the group's rendezvous store on the bind address only (server 0); returns ``(host, port)``."""
        import torch.distributed as dist

        host = self.bind_address
        sock = socket.create_server((host, 0), family=socket.AF_INET, backlog=128)
        port = sock.getsockname()[1]
        self._store = dist.TCPStore(
            host,
            port,
            is_master=True,
            wait_for_workers=False,
            timeout=self.timeout,
            master_listen_fd=sock.detach(),
        )
        return host, port

    def start(self, factory: Any, store_address: tuple[str, int] | None, group_backend: str) -> None:
        """Join the servers' group, build the backend with ``factory(placement, collectives)``, align weights.

        Args:
            factory: A :class:`~llmgym.llm.distributed.backend.LocalLLMFactory`.
            store_address: Server 0's rendezvous store; ``None`` for a single server.
            group_backend: ``"nccl"`` (a whole GPU or more per server) or ``"gloo"`` (CPU, or
                GPUs shared between servers: NCCL refuses two ranks on one device).
        """
        import torch.distributed as dist

        placement = Placement(rank=self.rank, gpus=tuple(range(len(self.location.gpus))))
        collectives = ProcessGroupCollectives()
        if self.world_size > 1:
            if store_address is None:
                raise ValueError("several LLM servers but no rendezvous store address")
            store = self._store or dist.TCPStore(*store_address, is_master=False, timeout=self.timeout)
            _bind_gloo_to(self.bind_address)
            if self.bind_address == "127.0.0.1":
                os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
            dist.init_process_group(
                group_backend,
                store=store,
                rank=self.rank,
                world_size=self.world_size,
                timeout=self.collective_timeout,
            )
        self.backend = factory(placement, collectives)
        if self.world_size > 1:  # FSDP's shards come from the same weights on every server: the heads only
            collectives.broadcast_parameters(replicated(self.backend.trainable_parameters()))

    def call(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """Run ``backend.method(*args, **kwargs)``; tensors in the result come back on the CPU.

        Besides the backend's own methods, ``trainable_parameters`` returns CPU copies (shards
        gathered whole: then every server must be called), ``tokenizer`` the tokenizer and
        ``fingerprint`` a cheap summary of the replicated weights (sum, sum of squares), and
        ``state_bytes`` this server's bytes of parameters, gradients and optimizer state.

        Raises:
            ValueError: On a method that is not served.
        """
        if method == "fingerprint":
            return fingerprint(replicated(self.backend.trainable_parameters()))
        if method == "state_bytes":
            return state_bytes(self.backend)
        if method not in SERVER_METHODS:
            raise ValueError(
                f"unknown LLM server method {method!r}; expected one of {sorted(SERVER_METHODS)}"
            )
        if method == "trainable_parameters":
            return [full_tensor(p.detach()).cpu().clone() for p in self.backend.trainable_parameters()]
        if method == "tokenizer":
            return getattr(self.backend, "tokenizer", None)
        return _to_cpu(getattr(self.backend, method)(*args, **kwargs))

    def close(self) -> None:
        """Release the model and leave the group."""
        import torch.distributed as dist

        if self.backend is not None:
            self.backend.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def fingerprint(parameters: Sequence[Any]) -> tuple[float, float]:
    """Summarise the weights cheaply (sum and sum of squares, float64) to compare servers."""
    import torch

    total, squares = 0.0, 0.0
    with torch.no_grad():
        for p in parameters:
            d = p.detach().double()
            total += float(d.sum())
            squares += float((d * d).sum())
    return total, squares


def _to_cpu(value: Any) -> Any:
    """Move every tensor inside a result (lists, tuples, dicts, dataclasses) to the CPU."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, list):
        return [_to_cpu(item) for item in value]
    if isinstance(value, tuple):
        return type(value)(*map(_to_cpu, value)) if hasattr(value, "_fields") else tuple(map(_to_cpu, value))
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _to_cpu(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value


def _bind_gloo_to(address: str) -> None:
    """Make gloo listen on the interface that holds ``address`` (unless ``GLOO_SOCKET_IFNAME`` is set).

    Gloo otherwise binds the address the host name resolves to, which may be reachable from other
    machines although a private instance keeps its servers on ``127.0.0.1``.
    """
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on this interface
                continue
        if socket.inet_ntoa(packed[20:24]) == address:
            os.environ["GLOO_SOCKET_IFNAME"] = name
            return
