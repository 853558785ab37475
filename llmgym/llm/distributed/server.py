"""An LLM server process: builds its backend from the client's factory and answers the client's calls.

Started by :mod:`llmgym.llm.distributed.launch` (``llmgym launch``) or by
:meth:`DistributedLLM.spawn <llmgym.llm.distributed.client.DistributedLLM.spawn>` as
``python -m llmgym.llm.distributed.server --connect HOST:PORT --rank R [--gpus 0,1]``, with
``CUDA_VISIBLE_DEVICES`` already narrowed to its GPUs. It then:

1. connects to the client, authenticates both ways with the job secret (``$LLMGYM_AUTHKEY``,
   see :mod:`~llmgym.llm.distributed.transport`; nothing is unpickled before) and says hello
   (rank, host, pid);
2. receives ``("init", factory, store address, number of servers)``, builds the backend with
   ``factory(placement)``, joins the gloo group of the servers (never the client; its sockets
   bound to the interface this server reaches the client through) and takes server 0's
   trainable weights (broadcast), so every server starts identical;
3. answers ``("call", request id, method, args, kwargs)`` messages one at a time, sending
   heartbeats while it works; any exception goes back to the client with its traceback;
4. exits on ``("close",)``, when the client disconnects, (from the heartbeat thread) when the
   client can no longer be reached while a call is running, or when the process that started it
   (``--parent-pid``: the launcher or the spawning client) dies, so no server outlives its job.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import os
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

from llmgym.lifetime import exit_with_parent
from llmgym.llm.distributed import transport
from llmgym.llm.distributed.gradients import GradientSync, WeightedMean, broadcast_parameters, fingerprint
from llmgym.llm.distributed.placement import Placement

__all__ = ["SERVER_METHODS", "serve", "main"]

#: Methods the client may call on a server's backend.
SERVER_METHODS = frozenset(
    {
        "score", "forward", "generate", "update", "token_logprobs", "save", "load", "clear_trunk_cache",
        "trainable_parameters", "tokenizer", "refresh_mask_policy",
    }
)

_LOST_CLIENT_EXIT = 3
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


class _Heartbeat:
    """Sends ``("hb",)`` every ``interval`` seconds while the server is busy; exits if the client is gone."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None], interval: float) -> None:
        self._send = send
        self._interval = interval
        self._busy = threading.Event()
        threading.Thread(target=self._run, name="llmgym-heartbeat", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._busy.wait()
            time.sleep(self._interval)
            if not self._busy.is_set():
                continue
            try:
                self._send(("hb",))
            except OSError:
                # The client is gone while the main thread is busy (maybe stuck in a collective
                # waiting for a dead peer): nobody will ever read the result, so leave now.
                os._exit(_LOST_CLIENT_EXIT)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Mark the server busy (heartbeats flow) for the duration of the block."""
        self._busy.set()
        try:
            yield
        finally:
            self._busy.clear()


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


class _Server:
    def __init__(self, conn: transport.Channel, placement: Placement, timeout_s: float) -> None:
        self.conn = conn
        self.placement = placement
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self.heartbeat = _Heartbeat(self._send, interval=max(0.05, min(5.0, timeout_s / 4)))
        self.backend: Any = None
        self.group_size = 1

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self.conn.send(message)

    def _error(self, request_id: int, exc: BaseException) -> tuple[Any, ...]:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        where = f"{socket.gethostname()} pid {os.getpid()}"
        return ("err", request_id, self.placement.rank, where, f"{type(exc).__name__}: {exc}", text)

    def run(self) -> int:
        self._send(("hello", self.placement.rank, socket.gethostname(), os.getpid()))
        message = self.conn.recv()
        if message[0] != "init":
            raise RuntimeError(f"expected an init message from the RL client, got {message[0]!r}")
        _, factory_bytes, store_address, num_servers = message
        with self.heartbeat.busy():
            try:
                self._start(factory_bytes, store_address, num_servers)
            except Exception as exc:  # noqa: BLE001 - reported to the client, which raises it
                self._send(self._error(0, exc))
                return 1
        self._send(("ready", self.placement.rank))
        return self._loop()

    def _start(self, factory_bytes: bytes, store_address: tuple[str, int] | None, num_servers: int) -> None:
        import cloudpickle

        factory = cloudpickle.loads(factory_bytes)
        self.backend = factory(self.placement)
        self.group_size = num_servers
        if num_servers > 1:
            import torch.distributed as dist

            if store_address is None:
                raise RuntimeError("several LLM servers but no rendezvous store address in the init message")
            timeout = timedelta(seconds=self.timeout_s)
            _bind_gloo_to(self.conn.local_address)
            store = dist.TCPStore(store_address[0], store_address[1], is_master=False, timeout=timeout)
            dist.init_process_group(
                "gloo", store=store, rank=self.placement.rank, world_size=num_servers, timeout=timeout
            )
            broadcast_parameters(list(self.backend.trainable_parameters()))
        # The Updater calls self.llm.sync_gradients(n) and self.llm.all_reduce_mean(values, n): on a server
        # they are the weighted all-reduces.
        self.backend.sync_gradients = GradientSync(self.backend, enabled=num_servers > 1)
        self.backend.all_reduce_mean = WeightedMean(enabled=num_servers > 1)

    def _loop(self) -> int:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return _LOST_CLIENT_EXIT
            if message[0] == "close":
                self._shutdown()
                with contextlib.suppress(OSError):
                    self._send(("closed", self.placement.rank))
                return 0
            _, request_id, method, args, kwargs = message
            with self.heartbeat.busy():
                try:
                    reply: tuple[Any, ...] = ("ok", request_id, self._call(method, args, kwargs))
                except Exception as exc:  # noqa: BLE001 - reported to the client, which raises it
                    reply = self._error(request_id, exc)
            self._send(reply)

    def _call(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        if method not in SERVER_METHODS:
            raise ValueError(f"unknown LLM server method {method!r}; expected one of {sorted(SERVER_METHODS)}")
        if method == "trainable_parameters":
            return [p.detach().cpu().clone() for p in self.backend.trainable_parameters()]
        if method == "tokenizer":
            return getattr(self.backend, "tokenizer", None)  # None: the client balances by characters
        result = getattr(self.backend, method)(*args, **kwargs)
        if method == "update":
            return _to_cpu(result), fingerprint(list(self.backend.trainable_parameters()))
        return _to_cpu(result)

    def _shutdown(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
        if self.group_size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def serve(conn: transport.Channel, placement: Placement, timeout_s: float) -> int:
    """Run one LLM server on an open control connection until the client closes it.

    Args:
        conn: Authenticated connection to the RL client.
        placement: This server's rank and GPUs.
        timeout_s: Timeout of the servers' collectives; heartbeats go out every ``timeout_s / 4``.

    Returns:
        The process exit code: 0 after a clean close, non-zero otherwise.
    """
    return _Server(conn, placement, timeout_s).run()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llmgym.llm.distributed.server", description=__doc__)
    parser.add_argument("--connect", required=True, help="HOST:PORT of the RL client's control socket.")
    parser.add_argument("--rank", type=int, required=True, help="Server rank in [0, number of servers).")
    parser.add_argument("--gpus", default="", help="Comma-separated physical GPU ids of this server (empty: CPU).")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="Connection and collective timeout.")
    parser.add_argument("--parent-pid", type=int, default=None, help="Exit when this process (the parent) dies.")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of a server process; returns its exit code."""
    args = _parse(argv)
    if args.parent_pid is not None:
        exit_with_parent(args.parent_pid)
    host, _, port = args.connect.rpartition(":")
    gpus = tuple(int(g) for g in args.gpus.split(",") if g)
    placement = Placement(rank=args.rank, gpus=gpus)
    conn = transport.connect((host, int(port)), transport.require_secret(), args.timeout_s)
    try:
        return serve(conn, placement, args.timeout_s)
    except (EOFError, OSError):
        return _LOST_CLIENT_EXIT
    except KeyboardInterrupt:
        return 130
    finally:
        conn.close()


def _bind_gloo_to(address: str) -> None:
    """Make gloo listen on the interface that holds ``address`` (unless ``GLOO_SOCKET_IFNAME`` is set).

    Gloo otherwise binds the address the host name resolves to, which may be reachable from other
    machines although the job was asked to stay on ``127.0.0.1``.
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


if __name__ == "__main__":
    sys.exit(main())
