"""The RL client's side of the distributed backend: one object with the backend API, N servers behind it.

:class:`DistributedLLM` holds one control connection per LLM server. ``score``, ``forward``,
``generate`` and ``token_logprobs`` split their batch across the servers (balanced by token count,
counted with a copy of server 0's tokenizer, see :mod:`~llmgym.llm.distributed.balance`) and
return the answers in the original order; ``update`` sends every server its share with
``_current_batch_ids`` (the indices of its share in the batch) plus the full keyword arguments,
and returns one result per server. Every wait is bounded: a
server must answer or send a heartbeat at least every ``timeout_s`` seconds, and a closed
connection (a dead server) is reported at once.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import wait
from typing import Any, cast

from llmgym.errors import BackendError, BackendTimeoutError, InputError
from llmgym.llm.distributed import transport
from llmgym.llm.distributed.balance import (
    LengthFn,
    character_lengths,
    context_costs,
    gather_in_order,
    share_kwargs,
    split_balanced,
    token_lengths,
)
from llmgym.llm.distributed.placement import Placement, assign_gpus, server_env, visible_gpus

__all__ = ["BackendFactory", "DistributedLLM", "ServerInfo"]

#: Builds a server's backend (e.g. a ``LocalLLM``) on that server's devices; pickled with cloudpickle.
BackendFactory = Callable[[Placement], Any]

_CLOSE_GRACE_S = 10.0
#: Relative tolerance when comparing the servers' weight fingerprints after an update.
_FINGERPRINT_RTOL = 1e-5


@dataclass(frozen=True)
class ServerInfo:
    """Where one LLM server runs (for error messages).

    Attributes:
        rank: Server rank.
        host: Host name of its machine.
        pid: Its process id on that machine.
    """

    rank: int
    host: str
    pid: int


class DistributedLLM:
    """The distributed backend: the same methods as ``LocalLLM``, served by N server processes.

    Build one with :meth:`spawn` (servers as child processes of this one, no launcher needed) or
    :meth:`connect` (servers started by ``llmgym launch``, possibly on other machines).

    Args:
        listener: The listening control socket (closed once every server is connected); it admits
            only peers that know the job secret.
        factory: Builds each server's backend from its :class:`Placement`.
        num_servers: Number of servers expected to connect.
        timeout_s: Longest silence tolerated from a working server, and the deadline of the
            start (connection and model loading with heartbeats) and of collectives.
        processes: The server processes when this client started them (terminated by
            :meth:`close`); empty when a launcher owns them.
    """

    def __init__(
        self,
        listener: transport.ControlListener,
        factory: BackendFactory,
        num_servers: int,
        timeout_s: float,
        processes: Sequence[subprocess.Popen[bytes]] = (),
    ) -> None:
        self.timeout_s = timeout_s
        self._processes = list(processes)
        self._conns: list[transport.Channel] = []
        self._servers: list[ServerInfo] = []
        self._request_ids = itertools.count(1)
        self._broken: str | None = None
        self._closed = False
        self._store: Any = None
        self._config = getattr(factory, "config", None)
        self._module_function_keys = list(getattr(factory, "module_functions", None) or {})
        self._tokenizer: Any = None
        self._lengths: LengthFn | None = None
        try:
            self._start(listener, factory, num_servers)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- construction
    @classmethod
    def spawn(
        cls,
        factory: BackendFactory,
        num_servers: int,
        *,
        timeout_s: float = 60.0,
        model_parallelism_size: int = 1,
        host: str = "127.0.0.1",
    ) -> DistributedLLM:
        """Start ``num_servers`` server processes on this machine and connect to them.

        The job's secret is drawn here and reaches only the servers (in their environment); they
        also exit if this process dies.

        Args:
            factory: Builds a server's backend; must be picklable with cloudpickle.
            num_servers: Number of LLM servers.
            timeout_s: See the class docstring.
            model_parallelism_size: GPUs per server.
            host: Address the control socket binds to.

        Returns:
            The connected backend.

        Raises:
            ConfigError: When the servers need more GPUs than are visible.
            BackendError: When a server fails to start (with its traceback).
        """
        blocks = assign_gpus(num_servers, model_parallelism_size, visible_gpus())
        secret = transport.new_secret()
        listener = transport.ControlListener(host, 0, secret.encode())
        address = f"{host}:{listener.address[1]}"
        processes = [
            _start_server(address, rank, gpus, num_servers, timeout_s, secret) for rank, gpus in enumerate(blocks)
        ]
        return cls(listener, factory, num_servers, timeout_s, processes)

    @classmethod
    def connect(
        cls, factory: BackendFactory, num_servers: int, *, host: str, port: int, timeout_s: float = 60.0
    ) -> DistributedLLM:
        """Serve ``num_servers`` servers started by ``llmgym launch``: listen on ``host:port``.

        Only servers that know the job secret (``$LLMGYM_AUTHKEY``, set by the launcher) are admitted.

        Raises:
            ConfigError: When no job secret is set.
            BackendError: When the address cannot be bound or a server fails to start.
            BackendTimeoutError: When not every server connected within ``timeout_s``.
        """
        listener = transport.ControlListener(host, port, transport.require_secret())
        return cls(listener, factory, num_servers, timeout_s)

    def _start(self, listener: transport.ControlListener, factory: BackendFactory, num_servers: int) -> None:
        import cloudpickle

        host = listener.address[0]
        try:
            conns = listener.accept(num_servers, self.timeout_s, self._check_processes)
        finally:
            listener.close()
        hellos = [conn.recv() for conn in conns]
        by_rank = sorted(zip(hellos, conns), key=lambda pair: int(pair[0][1]))
        ranks = [int(hello[1]) for hello, _ in by_rank]
        if ranks != list(range(num_servers)):
            for conn in conns:
                conn.close()
            raise BackendError(
                f"the LLM servers that connected have ranks {ranks}, expected 0..{num_servers - 1}; every "
                "node's `llmgym launch` must use the same --llm-processes and --nnodes and its own --node-rank."
            )
        self._conns = [conn for _, conn in by_rank]
        self._servers = [ServerInfo(int(h[1]), str(h[2]), int(h[3])) for h, _ in by_rank]
        store_address = None
        if num_servers > 1:
            self._store = _bound_store(host, self.timeout_s)
            store_address = (host, self._store.port)
        payload = cloudpickle.dumps(factory)
        for conn in self._conns:
            conn.send(("init", payload, store_address, num_servers))
        self._gather(0, "start", range(num_servers), expect="ready")
        if num_servers > 1:
            self._measure()  # fetch the tokenizer now, so that no call pays (or fails on) the extra round trip

    # ----------------------------------------------------------------- backend API
    @property
    def num_servers(self) -> int:
        """Number of LLM servers."""
        return len(self._conns)

    @property
    def servers(self) -> list[ServerInfo]:
        """Rank, host and process id of each server."""
        return list(self._servers)

    @property
    def config(self) -> Any:
        """The model config the servers were built from."""
        return self._config

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions (heads) every server carries."""
        return list(self._module_function_keys)

    @property
    def tokenizer(self) -> Any:
        """A copy of server 0's tokenizer (fetched once; prompts, chat templates and dispatch need it).

        ``None`` when the servers' backend has no ``tokenizer``.
        """
        self._measure()
        return self._tokenizer

    @property
    def model(self) -> Any:
        """Not available: the model lives in the LLM server processes.

        Raises:
            BackendError: Always, with the alternatives.
        """
        raise BackendError(
            "LLM.model is not available with the distributed backend: the model lives in the LLM server "
            "processes. Use score/forward/generate/update, or run without `llmgym launch` (and with "
            "distributed.llm_processes=1) to get the in-process model."
        )

    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], **kwargs: Any) -> list[Any]:
        """Score the candidates: one tensor of log-probabilities per context, in the order given."""
        _check_lengths("score", contexts, candidates)
        return self._split_call("score", contexts, candidates, (), kwargs)

    def forward(
        self, keys: Sequence[str], contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Run module functions: one dict of outputs per context, in the order given."""
        if candidates is not None:
            _check_lengths("forward", contexts, candidates)
        return self._split_call("forward", contexts, candidates, (list(keys),), kwargs)

    def generate(self, contexts: Sequence[str], **kwargs: Any) -> list[Any]:
        """Generate from each context; per context, per returned sequence, in the order given."""
        return self._split_call("generate", contexts, None, (), kwargs)

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> list[Any]:
        """Compute per-token log-probabilities of completions given prompts, in the order given."""
        _check_lengths("token_logprobs", prompt_ids, completion_ids, "completion_ids")
        costs = [len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)]
        shares = split_balanced(costs, self.num_servers)
        calls = {
            rank: ("token_logprobs", ([list(prompt_ids[i]) for i in idx], [list(completion_ids[i]) for i in idx]), share_kwargs(kwargs, idx))
            for rank, idx in enumerate(shares)
            if idx
        }
        results = self._request(calls)
        return gather_in_order([shares[r] for r in calls], [results[r] for r in calls], len(prompt_ids))

    def update(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None = None, **kwargs: Any) -> list[Any]:
        """Run the Updater on every server with its share of the batch; one result per server, by rank.

        Every server is called, also one with an empty share (it must still join the gradient
        all-reduce, with weight 0). Each gets the full ``kwargs`` and ``_current_batch_ids``, the
        positions of its contexts in the batch, to pick its rows of per-sample data.

        Raises:
            BackendError: When a server fails, or the servers' weights differ after the update
                (an Updater that does not call ``self.llm.sync_gradients(n)`` before stepping).
        """
        if candidates is not None:
            _check_lengths("update", contexts, candidates)
        if "_current_batch_ids" in kwargs:
            raise InputError("update(): _current_batch_ids is set by the distributed backend; do not pass it.")
        shares = self._shares(contexts, candidates)
        calls = {
            rank: (
                "update",
                ([contexts[i] for i in idx], None if candidates is None else [candidates[i] for i in idx]),
                {**kwargs, "_current_batch_ids": idx},
            )
            for rank, idx in enumerate(shares)
        }
        results = self._request(calls, collective=True)
        prints = [results[rank][1] for rank in range(self.num_servers)]
        if not all(_close(prints[0], other) for other in prints[1:]):
            self._broken = (
                "the servers' trainable weights differ after update() (fingerprints "
                f"{prints}); the Updater must call self.llm.sync_gradients(num_samples) after backward "
                "and before its optimizer step"
            )
            raise BackendError(self._broken + ".")
        return [item for rank in range(self.num_servers) for item in results[rank][0]]

    def refresh_mask_policy(self) -> None:
        """Snapshot NLPO's mask policy on every server (their weights are equal, so are the snapshots)."""
        self._request({rank: ("refresh_mask_policy", (), {}) for rank in range(self.num_servers)}, collective=True)

    def save(self, path: str) -> Any:
        """Save the trainable state from server 0 (all servers hold the same weights).

        The other servers empty their frozen-trunk caches, as server 0 does when it saves, so a run
        resumed from the checkpoint computes exactly what this one computes next.
        """
        calls: dict[int, tuple[str, tuple[Any, ...], dict[str, Any]]] = {0: ("save", (path,), {})}
        calls.update({rank: ("clear_trunk_cache", (), {}) for rank in range(1, self.num_servers)})
        return self._request(calls)[0]

    def load(self, path: str) -> None:
        """Load trainable state on every server."""
        self._request({rank: ("load", (path,), {}) for rank in range(self.num_servers)}, collective=True)

    def trainable_parameters(self) -> list[Any]:
        """CPU copies of server 0's trainable parameters (they are not the servers' tensors)."""
        return list(self._request({0: ("trainable_parameters", (), {})})[0])

    def parameters_of(self, rank: int) -> list[Any]:
        """CPU copies of the trainable parameters of server ``rank`` (to check they agree)."""
        if not 0 <= rank < self.num_servers:
            raise InputError(f"parameters_of(rank={rank}): expected a server rank in [0, {self.num_servers}).")
        return list(self._request({rank: ("trainable_parameters", (), {})})[rank])

    def close(self) -> None:
        """Stop every server (and, for spawned ones, the processes); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("close",))
        deadline = time.monotonic() + min(_CLOSE_GRACE_S, self.timeout_s)
        pending = list(self._conns)
        while pending and time.monotonic() < deadline:
            for conn in _wait(pending, max(0.0, deadline - time.monotonic())):
                try:
                    if conn.recv()[0] == "closed":
                        pending.remove(conn)
                except (EOFError, OSError):
                    pending.remove(conn)
        for conn in self._conns:
            conn.close()
        _stop_processes(self._processes, max(0.0, deadline - time.monotonic()))
        self._store = None

    def __enter__(self) -> DistributedLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Runs at interpreter exit too, when module globals such as ``contextlib`` may already be
        # None: only builtins here, and nothing to do for a closed backend.
        if getattr(self, "_closed", True):
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass

    # ----------------------------------------------------------------- dispatch
    def _split_call(
        self,
        method: str,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None,
        leading: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> list[Any]:
        shares = self._shares(contexts, candidates)
        calls = {}
        for rank, idx in enumerate(shares):
            if not idx:
                continue
            args: tuple[Any, ...] = (*leading, [contexts[i] for i in idx])
            if candidates is not None:
                args = (*args, [list(candidates[i]) for i in idx])
            calls[rank] = (method, args, share_kwargs(kwargs, idx))
        results = self._request(calls)
        return gather_in_order([shares[r] for r in calls], [results[r] for r in calls], len(contexts))

    def _shares(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None) -> list[list[int]]:
        """Context indices of each server, balanced by token count (one server: no measuring)."""
        if self.num_servers == 1:
            return [list(range(len(contexts)))]
        return split_balanced(context_costs(contexts, candidates, self._measure()), self.num_servers)

    def _measure(self) -> LengthFn:
        """How dispatch measures texts: tokens with server 0's tokenizer (fetched once), else characters."""
        if self._lengths is None:
            self._tokenizer = self._request({0: ("tokenizer", (), {})})[0]
            self._lengths = character_lengths if self._tokenizer is None else token_lengths(self._tokenizer)
        return self._lengths

    def _request(
        self, calls: dict[int, tuple[str, tuple[Any, ...], dict[str, Any]]], collective: bool = False
    ) -> dict[int, Any]:
        if self._closed:
            raise BackendError("this distributed LLM is closed; create a new LLM to keep going.")
        if self._broken is not None:
            raise BackendError(
                f"this distributed LLM cannot be used any more: {self._broken}. Close it and create a new LLM."
            )
        request_id = next(self._request_ids)
        method = next(iter(calls.values()))[0] if calls else "nothing"
        for rank, (name, args, kwargs) in calls.items():
            try:
                self._conns[rank].send(("call", request_id, name, args, kwargs))
            except (OSError, ValueError) as exc:
                raise self._fail(self._dead(rank, method, exc)) from exc
        try:
            return self._gather(request_id, method, calls.keys())
        except BackendError as exc:
            if collective or not isinstance(exc, _ServerRaised):
                self._fail(exc)
            raise

    def _gather(self, request_id: int, method: str, ranks: Any, expect: str = "ok") -> dict[int, Any]:
        """Wait for one answer per rank; heartbeats push a server's deadline back."""
        pending = {self._conns[rank]: rank for rank in ranks}
        deadlines = dict.fromkeys(pending.values(), time.monotonic() + self.timeout_s)
        results: dict[int, Any] = {}
        first_error: BackendError | None = None
        while pending:
            self._check_processes()
            now = time.monotonic()
            late = [rank for rank in pending.values() if deadlines[rank] <= now]
            if late:
                raise BackendTimeoutError(
                    f"LLM server rank {late[0]} ({self._where(late[0])}) sent nothing for "
                    f"distributed.timeout_s={self.timeout_s:g}s during {method}(): it is hung or its machine is "
                    "unreachable. Raise distributed.timeout_s if a single call legitimately takes longer."
                )
            wait_s = min(min(deadlines[r] for r in pending.values()) - now, 0.5)
            for conn in _wait(list(pending), max(0.0, wait_s)):
                rank = pending[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError) as exc:
                    raise self._dead(rank, method, exc) from exc
                kind = message[0]
                deadlines[rank] = time.monotonic() + self.timeout_s
                if kind == "hb" or (kind in ("ok", "err") and message[1] != request_id):
                    continue  # a heartbeat, or the late answer of an earlier, failed call
                if kind == "err":
                    _, _, err_rank, where, summary, text = message
                    error = _ServerRaised(
                        f"LLM server rank {err_rank} ({where}) raised during {method}(): {summary}\n"
                        f"--- server traceback ---\n{text}"
                    )
                    if expect == "ready" or method in ("update", "load"):
                        raise error
                    first_error = first_error or error
                elif kind == expect:
                    results[rank] = message[2] if kind == "ok" else None
                else:
                    raise BackendError(f"LLM server rank {rank} sent an unexpected {kind!r} message during {method}().")
                del pending[conn]
        if first_error is not None:
            raise first_error
        return results

    def _fail(self, error: BackendError) -> BackendError:
        self._broken = f"an earlier call failed ({str(error).splitlines()[0]})"
        return error

    def _where(self, rank: int) -> str:
        info = self._servers[rank] if rank < len(self._servers) else None
        return f"{info.host} pid {info.pid}" if info else "not yet connected"

    def _dead(self, rank: int, method: str, exc: BaseException) -> BackendError:
        code = ""
        if rank < len(self._processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = f", exit code {self._processes[rank].wait(timeout=1.0)}"
        return BackendError(
            f"LLM server rank {rank} ({self._where(rank)}{code}) closed its connection during {method}() "
            f"({type(exc).__name__}): the process died (killed, out of memory, or crashed; see its log)."
        )

    def _check_processes(self) -> None:
        for rank, process in enumerate(self._processes):
            code = process.poll()
            if code is not None and code != 0 and not self._closed:
                raise self._fail(
                    BackendError(
                        f"LLM server rank {rank} (pid {process.pid}) exited with code {code}; see its output above."
                    )
                )


class _ServerRaised(BackendError):
    """A server answered with an exception (the server itself is fine)."""


def _wait(conns: list[transport.Channel], timeout: float) -> list[transport.Channel]:
    return [cast(transport.Channel, conn) for conn in wait(conns, timeout=timeout)]  # type: ignore[arg-type]


def _bound_store(host: str, timeout_s: float) -> Any:
    """Host the servers' gloo rendezvous store on ``host`` only (TCPStore alone binds every interface)."""
    import torch.distributed as dist

    sock = socket.create_server((host, 0), family=socket.AF_INET, backlog=128)
    return dist.TCPStore(
        host, sock.getsockname()[1], is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s), master_listen_fd=sock.detach(),
    )


def _check_lengths(method: str, first: Sequence[Any], second: Sequence[Any], name: str = "candidates") -> None:
    if len(first) != len(second):
        raise InputError(
            f"{method}(): got {len(first)} contexts but {len(second)} {name}; pass one {name} entry per context."
        )


def _close(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return all(abs(x - y) <= _FINGERPRINT_RTOL * max(1.0, abs(x), abs(y)) for x, y in zip(a, b))


def _start_server(
    address: str, rank: int, gpus: tuple[int, ...], local_servers: int, timeout_s: float, secret: str
) -> subprocess.Popen[bytes]:
    env = server_env(gpus, local_servers)
    env.pop(transport.SECRET_FILE_ENV, None)
    env[transport.SECRET_ENV] = secret
    command = [
        sys.executable, "-m", "llmgym.llm.distributed.server",
        "--connect", address, "--rank", str(rank), "--timeout-s", str(timeout_s),
        "--gpus", ",".join(map(str, gpus)), "--parent-pid", str(os.getpid()),
    ]
    return subprocess.Popen(command, env=env)


def _stop_processes(processes: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
