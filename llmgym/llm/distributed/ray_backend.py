"""The Ray backend: N LLM servers as Ray actors behind the ``LocalLLM`` API.

:class:`RayLLM` starts (or joins, see :mod:`.ray_runtime`) Ray, reserves one placement-group
bundle per server (``cpus_per_server`` CPUs and ``gpus_per_server`` GPUs, all on one node), starts
an :class:`~.ray_server.LLMServer` actor in each and joins them into one ``torch.distributed``
group. Batches are split and gathered by :class:`~.dispatch.ShardedBackend`. Every failure is a
``BackendError`` naming the server: an exception raised on it (with its traceback), a killed
actor or a lost node (at once, as Ray reports it), resources no node has (at once) or that do not
free up within ``timeout_s``, and a call that has not answered within ``call_timeout_s`` (a
``BackendTimeoutError`` naming the server and the call); the collective calls (``update``,
``load``, ``refresh_mask_policy``) are not timed: each server bounds its waits for its peers by
``collective_timeout_s`` itself, and a long update is not a hang. When a server's wait runs out,
the error names the servers that had not finished the call (the stuck ones), not the one that waited.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

from llmgym.config import DistributedConfig
from llmgym.errors import BackendError, BackendTimeoutError, PlacementError
from llmgym.llm.distributed.backend import ServerFactory
from llmgym.llm.distributed.dispatch import Calls, ShardedBackend
from llmgym.llm.distributed.ray_runtime import RayRuntime, start_ray
from llmgym.llm.distributed.ray_server import LLMServer, ServerLocation

__all__ = ["RayLLM"]

_CLOSE_GRACE_S = 5.0
#: What gloo's and NCCL's errors say when a collective's wait for a peer ran out.
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)


class RayLLM(ShardedBackend):
    """The backend methods of ``LocalLLM``, served by ``config.llm_processes`` Ray actors.

    Args:
        factory: Builds each server's backend (a ``LocalLLM``, or what ``factory(placement,
            collectives)`` returns; shipped to the actors once, through the object store).
        config: The ``distributed`` section (servers, resources, timeouts, Ray address).
        balance_by_tokens: Split batches by token count (the default); ``False``: in contiguous
            chunks of equal size (Lamorel's split, see :class:`~.dispatch.ShardedBackend`).

    Raises:
        PlacementError: When the servers' resources cannot be reserved within ``timeout_s``.
        BackendError: When a server fails to start (with its traceback).
    """

    def __init__(
        self, factory: ServerFactory, config: DistributedConfig, balance_by_tokens: bool = True
    ) -> None:
        super().__init__(
            config.llm_processes,
            factory.config,
            factory.module_function_keys,
            config.check_weights,
            balance_by_tokens,
            sharded=config.sharding == "fsdp",
        )
        self.timeout_s = config.timeout_s
        self.collective_timeout_s = config.collective_timeout_s
        self.call_timeout_s = config.call_timeout_s
        self._actors: list[Any] = []
        self._locations: list[ServerLocation] = []
        self._group: Any = None
        self._broken: str | None = None
        self._closed = False
        self._runtime: RayRuntime = start_ray(config)
        try:
            self._start(factory, config)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- construction
    def _start(self, factory: ServerFactory, config: DistributedConfig) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        gpus = _gpus_per_server(config)
        bundle = {"CPU": float(config.cpus_per_server), **({"GPU": float(gpus)} if gpus else {})}
        _check_some_node_fits(bundle)
        self._group = placement_group([dict(bundle) for _ in range(self.num_servers)], strategy="PACK")
        ready, _ = ray.wait([self._group.ready()], timeout=config.timeout_s)
        if not ready:
            raise PlacementError(
                f"{self.num_servers} LLM servers of {bundle} each could not be placed within "
                f"distributed.timeout_s={config.timeout_s:g}s; the cluster has {_available()} available. Free "
                "resources, lower distributed.llm_processes / cpus_per_server / gpus_per_server, or raise timeout_s."
            )
        actor = ray.remote(LLMServer)
        self._actors = [
            actor.options(
                num_cpus=config.cpus_per_server,
                num_gpus=gpus,
                max_restarts=0,
                max_task_retries=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=rank
                ),
                runtime_env=config.runtime_env or None,
            ).remote(
                rank,
                self.num_servers,
                config.cpus_per_server,
                config.timeout_s,
                self._runtime.private,
                config.collective_timeout_s,
            )
            for rank in range(self.num_servers)
        ]
        where = self._wait("start", {rank: a.where.remote() for rank, a in enumerate(self._actors)}, True)
        self._locations = [where[rank] for rank in range(self.num_servers)]
        store = None
        if self.num_servers > 1:
            store = self._wait("start", {0: self._actors[0].host_store.remote()}, True)[0]
        shipped = ray.put(factory)
        group_backend = "nccl" if gpus >= 1 else "gloo"  # NCCL refuses two ranks on one GPU
        starts = {rank: a.start.remote(shipped, store, group_backend) for rank, a in enumerate(self._actors)}
        self._wait("start", starts, True)
        if self.num_servers > 1 and self._balance_by_tokens:
            self._measure()  # fetch the tokenizer now, so that no call pays (or fails on) the extra round trip

    # ----------------------------------------------------------------- properties
    @property
    def servers(self) -> list[ServerLocation]:
        """Where each server runs (rank, node, pid, GPUs)."""
        return list(self._locations)

    @property
    def runtime(self) -> RayRuntime:
        """The Ray instance the servers run in."""
        return self._runtime

    # ----------------------------------------------------------------- calls
    def _request(self, calls: Calls, collective: bool = False) -> dict[int, Any]:
        if self._closed:
            raise BackendError("this LLM is closed; create a new LLM to keep going.")
        if self._broken is not None:
            raise BackendError(
                f"this LLM cannot be used any more: {self._broken}. Close it and create a new LLM."
            )
        method = next(iter(calls.values()))[0] if calls else "nothing"
        refs = {
            rank: self._actors[rank].call.remote(name, args, kwargs)
            for rank, (name, args, kwargs) in calls.items()
        }
        return self._wait(method, refs, collective, deadline_s=None if collective else self.call_timeout_s)

    def _wait(
        self, method: str, refs: dict[int, Any], fatal: bool, deadline_s: float | None = None
    ) -> dict[int, Any]:
        """Results by rank; the first failure is raised at once (``fatal``: and the LLM is unusable after).

        With ``deadline_s``, a server that has not answered within that many seconds is a
        ``BackendTimeoutError`` naming it (its call still runs, so the LLM is unusable after).
        """
        import ray
        from ray.exceptions import RayTaskError

        ranks = {ref: rank for rank, ref in refs.items()}
        pending = list(ranks)
        results: dict[int, Any] = {}
        end = None if deadline_s is None else time.monotonic() + deadline_s
        while pending:
            left = None if end is None else max(0.0, end - time.monotonic())
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                late = ", ".join(self._where(ranks[ref]) for ref in pending)
                self._broken = f"LLM server {late} did not answer {method}() in time"
                raise BackendTimeoutError(
                    f"LLM server {late} did not answer {method}() within distributed.call_timeout_s={deadline_s:g}s "
                    "and is still running it (a module function or kernel that never returns?). This LLM cannot be "
                    "used any more: close it and create a new one; raise distributed.call_timeout_s if such calls "
                    "are expected to take longer."
                )
            rank = ranks[done[0]]
            try:
                results[rank] = ray.get(done[0])
            except RayTaskError as exc:
                running = [ranks[ref] for ref in pending]
                if fatal and running and _TIMED_OUT.search(_cause(exc)):
                    raise self._stuck(method, rank, running, _cause(exc)) from None
                error = BackendError(
                    f"LLM server {self._where(rank)} raised during {method}(): {_cause(exc)}\n"
                    f"--- server traceback ---\n{exc}"
                )
                if fatal:
                    self._broken = f"an earlier call failed ({_cause(exc)})"
                raise error from None
            except ray.exceptions.RayError as exc:
                self._broken = f"LLM server {self._where(rank)} is gone"
                raise BackendError(
                    f"LLM server {self._where(rank)} died during {method}(): {type(exc).__name__}: "
                    f"{_first_lines(str(exc))}"
                ) from None
        return results

    def _stuck(self, method: str, waited: int, late: list[int], cause: str) -> BackendTimeoutError:
        """The error of a collective that timed out on server ``waited`` while servers ``late`` had not finished.

        The server that raised waited for its peers and is not the one to blame: the servers still
        running the call never joined the collective in time.
        """
        names = ", ".join(self._where(rank) for rank in late)
        self._broken = f"LLM server {names} did not join a collective of {method}() in time"
        return BackendTimeoutError(
            f"LLM server {names} did not join a collective of {method}() within "
            f"distributed.collective_timeout_s={self.collective_timeout_s:g}s and is still running it (slow, or hung in "
            f"a module function, the Updater or a kernel); server {self._where(waited)} waited for it and timed out "
            f"({cause}). This LLM cannot be used any more: close it and create a new one; raise "
            "distributed.collective_timeout_s if one server's share can take that much longer than its peers'."
        )

    def _where(self, rank: int) -> str:
        return self._locations[rank].describe() if rank < len(self._locations) else f"rank {rank}"

    # ----------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Stop every server actor, release their placement group, stop a private Ray; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        import ray
        from ray.util.placement_group import remove_placement_group

        if ray.is_initialized():
            if self._broken is None:  # a hung or dead server would only make the grace time pass
                with contextlib.suppress(Exception):
                    ray.wait(
                        [a.close.remote() for a in self._actors],
                        num_returns=len(self._actors),
                        timeout=_CLOSE_GRACE_S,
                    )
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            if self._group is not None:
                with contextlib.suppress(Exception):
                    remove_placement_group(self._group)
        self._actors = []
        self._runtime.shutdown()

    def __enter__(self) -> RayLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gpus_per_server(config: DistributedConfig) -> float:
    """``gpus_per_server``, or when unset ``model_parallelism_size`` if the cluster has GPUs, else 0.

    Raises:
        PlacementError: When ``model_parallelism_size > 1`` asks for GPUs the cluster does not have.
    """
    import ray

    if config.gpus_per_server is not None:
        return float(config.gpus_per_server)
    if ray.cluster_resources().get("GPU", 0) > 0:
        return float(config.model_parallelism_size)
    if config.model_parallelism_size > 1:
        raise PlacementError(
            f"distributed.model_parallelism_size={config.model_parallelism_size} spreads each LLM server's model "
            "over that many GPUs, but the Ray cluster has no GPU; set it to 1 to run on CPUs, or add GPU nodes."
        )
    return 0.0


def _check_some_node_fits(bundle: dict[str, float]) -> None:
    """Raise at once when no node of the cluster has a server's bundle, naming the missing resource."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    if any(all(node.get(key, 0.0) >= amount for key, amount in bundle.items()) for node in nodes):
        return
    short = [
        key for key, amount in bundle.items() if max((n.get(key, 0.0) for n in nodes), default=0.0) < amount
    ]
    largest = {key: max((n.get(key, 0.0) for n in nodes), default=0.0) for key in bundle}
    raise PlacementError(
        f"each LLM server needs {bundle} on one node, but no node of the Ray cluster has enough "
        f"{' and '.join(short) or 'of them together'} (the largest node has {largest}). Set "
        "distributed.gpus_per_server=0 to run on CPUs, lower distributed.cpus_per_server, or add such a node."
    )


def _available() -> dict[str, float]:
    import ray

    return {key: value for key, value in ray.available_resources().items() if key in ("CPU", "GPU")}


def _cause(exc: Any) -> str:
    cause = getattr(exc, "cause", None)
    return f"{type(cause).__name__}: {cause}" if cause is not None else _first_lines(str(exc))


def _first_lines(text: str, count: int = 3) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines()[:count])
