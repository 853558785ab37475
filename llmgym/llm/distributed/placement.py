"""Where each LLM server runs: servers per node and GPUs per server (pure functions).

Nothing here touches torch or the GPUs: callers pass what they see (the number of nodes, the
visible GPU ids), so every rule is unit tested on a laptop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from llmgym.errors import ConfigError

__all__ = [
    "Placement", "servers_per_node", "first_server_rank", "assign_gpus", "visible_gpus", "cpu_threads_per_server", "server_env",
]


@dataclass(frozen=True)
class Placement:
    """The devices of one LLM server.

    Attributes:
        rank: Server rank in ``[0, num_servers)`` (the RL client is not counted).
        gpus: Physical GPU ids of this server (as listed in ``CUDA_VISIBLE_DEVICES``); empty on CPU.
    """

    rank: int
    gpus: tuple[int, ...] = ()

    @property
    def device(self) -> str:
        """The torch device of the model's first layers: ``"cpu"`` or ``"cuda:0"``.

        A server only sees its own GPUs (its ``CUDA_VISIBLE_DEVICES`` is narrowed to ``gpus``), so
        its first GPU is always ``cuda:0``.
        """
        return "cuda:0" if self.gpus else "cpu"

    @property
    def model_parallel(self) -> bool:
        """Whether the model is sharded over several GPUs (Accelerate ``device_map``)."""
        return len(self.gpus) > 1


def servers_per_node(llm_processes: int, nnodes: int) -> list[int]:
    """Split the LLM servers over the nodes as evenly as possible, the first nodes taking the extra.

    Node 0 also runs the RL client, which mostly waits on the servers, so it gets no fewer servers.

    Args:
        llm_processes: Total number of LLM servers in the job.
        nnodes: Number of machines.

    Returns:
        The number of servers on each node, indexed by node rank.

    Raises:
        ConfigError: When a count is not positive or a node would get no server.
    """
    if llm_processes < 1:
        raise ConfigError(f"distributed.llm_processes={llm_processes} must be >= 1; set it to the number of LLM servers.")
    if nnodes < 1:
        raise ConfigError(f"distributed.nnodes={nnodes} must be >= 1; set it to the number of machines.")
    if nnodes > 1 and llm_processes < nnodes:
        raise ConfigError(
            f"distributed.llm_processes={llm_processes} is smaller than distributed.nnodes={nnodes}, so some "
            f"machine would run no LLM server; use at least {nnodes} LLM processes or fewer nodes."
        )
    base, extra = divmod(llm_processes, nnodes)
    return [base + (1 if node < extra else 0) for node in range(nnodes)]


def first_server_rank(llm_processes: int, nnodes: int, node_rank: int) -> int:
    """Return the global rank of the first server on ``node_rank`` (servers are numbered node by node)."""
    if not 0 <= node_rank < nnodes:
        raise ConfigError(f"distributed.node_rank={node_rank} must lie in [0, nnodes={nnodes}).")
    return sum(servers_per_node(llm_processes, nnodes)[:node_rank])


def assign_gpus(num_servers: int, model_parallelism_size: int, gpus: Sequence[int]) -> list[tuple[int, ...]]:
    """Give each server of one machine its own block of GPUs.

    Args:
        num_servers: LLM servers on this machine.
        model_parallelism_size: GPUs per server (the model is sharded across them).
        gpus: The GPU ids visible on this machine, in order; empty on a CPU-only machine.

    Returns:
        For each local server, the tuple of its GPU ids: consecutive blocks of
        ``model_parallelism_size`` ids; all empty tuples (CPU) when ``gpus`` is empty and
        ``model_parallelism_size`` is 1.

    Raises:
        ConfigError: When the servers need more GPUs than are visible, or model parallelism is asked
            for on a machine without GPUs.
    """
    if num_servers < 1:
        raise ConfigError(f"num_servers={num_servers} must be >= 1 (LLM servers on this machine).")
    if model_parallelism_size < 1:
        raise ConfigError(
            f"distributed.model_parallelism_size={model_parallelism_size} must be >= 1 (GPUs per LLM server)."
        )
    if not gpus:
        if model_parallelism_size > 1:
            raise ConfigError(
                f"distributed.model_parallelism_size={model_parallelism_size} shards each LLM server over "
                "several GPUs, but no GPU is visible on this machine; set it to 1 to run on CPU."
            )
        return [() for _ in range(num_servers)]
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"The visible GPU ids {list(gpus)} contain duplicates; fix CUDA_VISIBLE_DEVICES.")
    needed = num_servers * model_parallelism_size
    if needed > len(gpus):
        raise ConfigError(
            f"{num_servers} LLM server(s) x distributed.model_parallelism_size={model_parallelism_size} need "
            f"{needed} GPUs on this machine but only {len(gpus)} are visible ({list(gpus)}); lower "
            "distributed.llm_processes or distributed.model_parallelism_size, add nodes, or expose more GPUs."
        )
    size = model_parallelism_size
    return [tuple(gpus[i * size : (i + 1) * size]) for i in range(num_servers)]


def visible_gpus(environ: dict[str, str] | None = None, device_count: int | None = None) -> list[int]:
    """List the GPU ids this process may use.

    Args:
        environ: Environment to read ``CUDA_VISIBLE_DEVICES`` from (default: ``os.environ``).
        device_count: Number of GPUs torch sees, used when ``CUDA_VISIBLE_DEVICES`` is unset; ``None``
            asks torch.

    Returns:
        The ids listed in ``CUDA_VISIBLE_DEVICES`` when it is set (an empty list when it is empty or
        ``-1``), else ``range(device_count)``.

    Raises:
        ConfigError: When ``CUDA_VISIBLE_DEVICES`` holds something other than integer ids.
    """
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        items = [item.strip() for item in listed.split(",") if item.strip()]
        if items == ["-1"]:
            return []
        if not all(item.isdigit() for item in items):
            raise ConfigError(
                f"CUDA_VISIBLE_DEVICES={listed!r} must be a comma-separated list of GPU indices (UUIDs are "
                "not supported by llmgym launch); set it to e.g. 0,1,2,3."
            )
        return [int(item) for item in items]
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return list(range(device_count))



def cpu_threads_per_server(local_servers: int, cpu_count: int) -> int:
    """Split this machine's cores between its CPU servers (so N servers do not fight over them).

    Args:
        local_servers: LLM servers on this machine.
        cpu_count: Cores available to the job.

    Returns:
        At least 1 thread per server.
    """
    return max(1, cpu_count // max(1, local_servers))


def server_env(gpus: tuple[int, ...], local_servers: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Build the environment of one server process: its GPUs only, or its share of the CPU threads.

    Args:
        gpus: The server's physical GPU ids (empty on CPU).
        local_servers: Servers on this machine.
        environ: Base environment (default: ``os.environ``); ``OMP_NUM_THREADS`` set there wins.

    Returns:
        A copy of ``environ`` with ``CUDA_VISIBLE_DEVICES`` narrowed to ``gpus``, or, on CPU,
        ``OMP_NUM_THREADS`` set to the server's share of the cores.
    """
    env = dict(os.environ if environ is None else environ)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    elif "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(cpu_threads_per_server(local_servers, os.cpu_count() or 1))
    return env
