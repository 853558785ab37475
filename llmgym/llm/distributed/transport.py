"""The control plane: authenticated, framed, pickled messages over TCP between client and servers.

Built on :mod:`multiprocessing.connection` (length-prefixed frames, HMAC challenge on connect,
``wait`` over many connections with a timeout). Payloads are pickled with :mod:`pickle` directly,
never with ``ForkingPickler``: torch registers shared-memory reductions there that cannot cross
machines.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from llmgym.errors import BackendError, BackendTimeoutError

__all__ = ["AUTHKEY_ENV", "authkey_from_env", "send", "recv", "listen", "accept", "connect"]

AUTHKEY_ENV = "LLMGYM_AUTHKEY"
_DEFAULT_AUTHKEY = b"llmgym-control-plane"


def authkey_from_env() -> bytes:
    """Return the shared secret of the job: ``$LLMGYM_AUTHKEY`` when set, else a fixed default.

    The default only guards against connecting to another program's port by mistake; set the
    variable to a random value (the same on every node) when the network is shared.
    """
    value = os.environ.get(AUTHKEY_ENV)
    return value.encode() if value else _DEFAULT_AUTHKEY


def send(conn: Connection, message: tuple[Any, ...]) -> None:
    """Pickle and send one message."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def recv(conn: Connection) -> tuple[Any, ...]:
    """Receive and unpickle one message (blocking).

    Raises:
        EOFError: When the peer closed the connection (or died).
    """
    message = pickle.loads(conn.recv_bytes())
    if not isinstance(message, tuple) or not message:
        raise BackendError(f"malformed control message {message!r}: expected a non-empty tuple")
    return message


def listen(host: str, port: int, authkey: bytes) -> Listener:
    """Open the client's listening socket (``port=0`` picks a free port: see ``.address``).

    Raises:
        BackendError: When the address cannot be bound, naming it and the fix.
    """
    try:
        return Listener((host, port), family="AF_INET", authkey=authkey)
    except OSError as exc:
        raise BackendError(
            f"cannot listen on {host}:{port} for the LLM servers ({exc}); choose a free "
            "distributed.master_port (--master-port) or a local distributed.master_addr."
        ) from exc


def accept(
    listener: Listener, count: int, timeout_s: float, check_alive: Callable[[], None] | None = None
) -> list[Connection]:
    """Accept ``count`` authenticated connections within ``timeout_s``.

    Args:
        listener: The listening socket.
        count: Connections to wait for.
        timeout_s: Overall deadline.
        check_alive: Called about every 0.1 s while waiting; raises to abort (e.g. when a server
            process the caller started has died).

    Returns:
        The connections, in arrival order.

    Raises:
        BackendTimeoutError: When fewer than ``count`` peers connected in time (the listener is
            then closed).
    """
    accepted: queue.Queue[Connection | BaseException] = queue.Queue()

    def run() -> None:
        for _ in range(count):
            try:
                accepted.put(listener.accept())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                accepted.put(exc)
                return

    threading.Thread(target=run, name="llmgym-accept", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    conns: list[Connection] = []
    try:
        while len(conns) < count:
            if check_alive is not None:
                check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BackendTimeoutError(
                    f"only {len(conns)} of {count} LLM server(s) connected within distributed.timeout_s="
                    f"{timeout_s:g}s; check that every node's `llmgym launch` runs with the same "
                    "--master-addr/--master-port and that the servers' logs show no error."
                )
            try:
                item = accepted.get(timeout=min(0.1, remaining))
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise BackendError(f"accepting an LLM server connection failed: {item!r}") from item
            conns.append(item)
    except BaseException:
        listener.close()
        for conn in conns:
            conn.close()
        raise
    return conns


def connect(address: tuple[str, int], authkey: bytes, timeout_s: float) -> Connection:
    """Connect to the client, retrying while it is not listening yet.

    Raises:
        BackendTimeoutError: When no connection succeeded within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return Client(address, family="AF_INET", authkey=authkey)
        except (ConnectionRefusedError, ConnectionResetError, FileNotFoundError) as exc:
            if time.monotonic() >= deadline:
                raise BackendTimeoutError(
                    f"the RL client at {address[0]}:{address[1]} did not accept this LLM server within "
                    f"{timeout_s:g}s ({exc}); check --master-addr/--master-port and that node 0 runs."
                ) from exc
            time.sleep(0.2)
