"""The control plane: mutually authenticated, integrity-checked, framed messages over TCP.

Every job has a secret. ``llmgym launch`` and :meth:`DistributedLLM.spawn` draw a random one per
job and hand it to their own child processes in the environment (``$LLMGYM_AUTHKEY``, readable
only by the same user); a multi-node job needs one shared by every node, from
``$LLMGYM_AUTHKEY`` or a private file named by ``$LLMGYM_AUTHKEY_FILE``, and refuses to start
without it. There is no default secret.

A connection is authenticated before anything is unpickled:

1. the listening side (the RL client) sends a magic string and a fresh 32-byte nonce;
2. the connecting side (an LLM server) answers with its own nonce and
   ``HMAC-SHA256(secret, "connector" | nonce_l | nonce_c)``;
3. the listener checks it and proves itself with ``HMAC-SHA256(secret, "listener" | nonce_c | nonce_l)``.

Handshake frames are at most 96 bytes and the handshake must finish within
``HANDSHAKE_TIMEOUT_S`` (the listener gives a peer ``LISTENER_HANDSHAKE_TIMEOUT_S``); a peer that
fails it is logged and dropped, and the listener keeps waiting for the real servers. Connections
that never authenticate cannot shut the servers out: the listener runs at most 32 handshakes at
once, and a new connection then drops the oldest of them (one at least 0.2 s old; the real
servers answer within milliseconds), and a server whose connection is closed before the greeting
tries again until its own timeout. Afterwards each frame carries ``HMAC-SHA256(key, sequence number |
payload)`` under a per-direction session key derived from both nonces, so a frame that was
injected, replayed, reordered or altered is refused before :func:`pickle.loads` sees it.

Payloads are pickled with :mod:`pickle` directly, never with ``ForkingPickler``: torch registers
shared-memory reductions there that cannot cross machines.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import queue
import secrets
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from llmgym.errors import AuthenticationError, BackendError, BackendTimeoutError, ConfigError

__all__ = [
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "HANDSHAKE_TIMEOUT_S",
    "Channel",
    "ControlListener",
    "new_secret",
    "secret_from_env",
    "require_secret",
    "connect",
]

logger = logging.getLogger(__name__)

SECRET_ENV = "LLMGYM_AUTHKEY"
SECRET_FILE_ENV = "LLMGYM_AUTHKEY_FILE"
#: Longest time a peer may take to complete the handshake.
HANDSHAKE_TIMEOUT_S = 5.0
#: Longest time the listener gives a peer to complete the handshake.
LISTENER_HANDSHAKE_TIMEOUT_S = 2.0

_MIN_SECRET_BYTES = 16
_MAGIC = b"llmgym-control-plane-v2"
_NONCE_BYTES = 32
_TAG_BYTES = hashlib.sha256().digest_size
_MAX_PENDING_HANDSHAKES = 32
#: A handshake this recent is never dropped for a newer connection.
_MIN_HANDSHAKE_AGE_S = 0.2
_SECRET_HELP = (
    f"set {SECRET_ENV} to the same random value on every node (e.g. `export {SECRET_ENV}=$(python -c "
    f"'import secrets; print(secrets.token_hex(32))')`) or {SECRET_FILE_ENV} to a file only you can read"
)


def new_secret() -> str:
    """Draw a fresh job secret: 64 hex characters (256 bits) from :mod:`secrets`."""
    return secrets.token_hex(32)


def secret_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """Return the job secret set by the user, or ``None`` when none is set.

    ``$LLMGYM_AUTHKEY`` wins over ``$LLMGYM_AUTHKEY_FILE``.

    Args:
        environ: Where to look (default: ``os.environ``).

    Raises:
        ConfigError: When the secret is shorter than 16 bytes, or the file is missing, empty or
            readable by other users (it must be ``chmod 600``).
    """
    env = os.environ if environ is None else environ
    value = env.get(SECRET_ENV, "")
    source = f"${SECRET_ENV}"
    if not value and env.get(SECRET_FILE_ENV):
        path = Path(env[SECRET_FILE_ENV])
        source = f"the file {path} (${SECRET_FILE_ENV})"
        try:
            mode = path.stat().st_mode
            value = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the control-plane secret from {source}: {exc}; {_SECRET_HELP}.") from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"the control-plane secret file {path} is accessible to other users (mode {stat.filemode(mode)}); "
                f"run `chmod 600 {path}`."
            )
    if not value:
        return None
    secret = value.encode()
    if len(secret) < _MIN_SECRET_BYTES:
        raise ConfigError(
            f"the control-plane secret from {source} has {len(secret)} bytes, fewer than {_MIN_SECRET_BYTES}; "
            f"use a long random value: {_SECRET_HELP}."
        )
    return secret


def require_secret(environ: Mapping[str, str] | None = None) -> bytes:
    """Return the job secret, which must be set (see :func:`secret_from_env`).

    Raises:
        ConfigError: When no secret is set, naming the two ways to set one.
    """
    secret = secret_from_env(environ)
    if secret is None:
        raise ConfigError(f"the distributed control plane needs a shared secret and none is set: {_SECRET_HELP}.")
    return secret


class Channel:
    """One authenticated control connection; every frame's integrity is checked before unpickling.

    Sending is thread-safe (a server's heartbeat thread and its main loop share a channel);
    receiving is for one thread. ``fileno`` lets :func:`multiprocessing.connection.wait` select
    over channels.

    Args:
        conn: The connection the handshake ran on.
        send_key: Session key of frames this side sends.
        recv_key: Session key of frames the peer sends.
        peer: The peer's address, for messages.
        local_address: The IP address of this side of the connection.
    """

    def __init__(self, conn: Connection, send_key: bytes, recv_key: bytes, peer: str, local_address: str) -> None:
        self._conn = conn
        self._send_key = send_key
        self._recv_key = recv_key
        self._sent = 0
        self._received = 0
        self._lock = threading.Lock()
        self.peer = peer
        self.local_address = local_address

    def send(self, message: tuple[Any, ...]) -> None:
        """Pickle, sign and send one message."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            tag = _frame_tag(self._send_key, self._sent, payload)
            self._conn.send_bytes(tag + payload)
            self._sent += 1

    def recv(self) -> tuple[Any, ...]:
        """Receive one message, check its tag, then unpickle it (blocking).

        Raises:
            EOFError: When the peer closed the connection (or died).
            AuthenticationError: When the frame's tag is wrong (altered, injected or replayed).
            BackendError: When the message is not a non-empty tuple.
        """
        frame = memoryview(self._conn.recv_bytes())
        tag, payload = frame[:_TAG_BYTES], frame[_TAG_BYTES:]
        if not hmac.compare_digest(tag, _frame_tag(self._recv_key, self._received, payload)):
            raise AuthenticationError(
                f"a control message from {self.peer} failed its integrity check (altered, injected or replayed); "
                "the connection is no longer trusted."
            )
        self._received += 1
        message = pickle.loads(payload)
        if not isinstance(message, tuple) or not message:
            raise BackendError(f"malformed control message {message!r}: expected a non-empty tuple")
        return message

    def fileno(self) -> int:
        """The socket's file descriptor (for ``select``)."""
        return self._conn.fileno()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn.closed

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()


class ControlListener:
    """The RL client's listening socket: accepts only peers that pass the handshake.

    Args:
        host: Address to bind (only this one: ``127.0.0.1`` keeps the job on this machine).
        port: Port to bind; ``0`` picks a free one (see :attr:`address`).
        secret: The job secret.

    Raises:
        BackendError: When the address cannot be bound, naming it and the fix.
    """

    def __init__(self, host: str, port: int, secret: bytes) -> None:
        try:
            self._sock = socket.create_server((host, port), family=socket.AF_INET, backlog=64)
        except OSError as exc:
            raise BackendError(
                f"cannot listen on {host}:{port} for the LLM servers ({exc}); choose a free "
                "distributed.master_port (--master-port) or a local distributed.master_addr."
            ) from exc
        self._secret = secret
        self._ready: queue.Queue[Channel] = queue.Queue()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._closed = False
        self.address: tuple[str, int] = self._sock.getsockname()[:2]

    def accept(self, count: int, timeout_s: float, check_alive: Callable[[], None] | None = None) -> list[Channel]:
        """Wait for ``count`` authenticated peers within ``timeout_s``.

        A peer that fails the handshake (wrong secret, garbage, silence) is logged and dropped;
        the wait goes on.

        Args:
            count: Channels to wait for.
            timeout_s: Overall deadline.
            check_alive: Called about every 0.1 s while waiting; raises to abort (e.g. when a server
                process the caller started has died).

        Returns:
            The channels, in arrival order.

        Raises:
            BackendTimeoutError: When fewer than ``count`` peers authenticated in time.
        """
        deadline = time.monotonic() + timeout_s
        channels: list[Channel] = []
        try:
            while len(channels) < count:
                if check_alive is not None:
                    check_alive()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BackendTimeoutError(
                        f"only {len(channels)} of {count} LLM server(s) connected within distributed.timeout_s="
                        f"{timeout_s:g}s; check that every node's `llmgym launch` runs with the same "
                        f"--master-addr/--master-port and ${SECRET_ENV}, and that the servers' logs show no error."
                    )
                readable, _, _ = select.select([self._sock], [], [], min(0.1, remaining))
                if readable:
                    self._admit(*self._sock.accept())
                while len(channels) < count:
                    try:
                        channels.append(self._ready.get_nowait())
                    except queue.Empty:
                        break
        except BaseException:
            for channel in channels:
                channel.close()
            raise
        return channels

    def close(self) -> None:
        """Stop listening; peers still in their handshake are dropped."""
        with self._lock:
            self._closed = True
            for pending in self._pending.values():
                pending.drop()
        self._sock.close()
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                return

    def _admit(self, sock: socket.socket, address: tuple[str, int]) -> None:
        """Start the handshake of a new connection, dropping the oldest pending one if all slots are taken."""
        peer = f"{address[0]}:{address[1]}"
        with self._lock:
            if len(self._pending) >= _MAX_PENDING_HANDSHAKES:
                oldest_id = min(self._pending, key=lambda key: self._pending[key].started)
                oldest = self._pending[oldest_id]
                if time.monotonic() - oldest.started < _MIN_HANDSHAKE_AGE_S:
                    logger.warning("refused a control-plane connection from %s: too many handshakes in progress", peer)
                    sock.close()
                    return
                del self._pending[oldest_id]
                oldest.drop()
            key, self._next_id = self._next_id, self._next_id + 1
            self._pending[key] = _Pending(sock.dup(), time.monotonic())
        threading.Thread(
            target=self._authenticate, args=(key, sock, peer), name="llmgym-handshake", daemon=True
        ).start()

    def _authenticate(self, key: int, sock: socket.socket, peer: str) -> None:
        try:
            channel = _handshake(sock, self._secret, peer, listening=True, timeout_s=LISTENER_HANDSHAKE_TIMEOUT_S)
        except (AuthenticationError, EOFError, OSError) as exc:
            with self._lock:
                pending = self._pending.pop(key, None)
            reason = "dropped for a newer connection, all handshake slots taken" if pending is None else exc
            logger.warning("refused a control-plane connection from %s: %s", peer, reason)
            if pending is not None:
                pending.watch.close()
            return
        with self._lock:
            pending = self._pending.pop(key, None)
            if pending is None or self._closed:  # dropped as it finished, or the listener closed
                channel.close()
            else:
                self._ready.put(channel)
        if pending is not None:
            pending.watch.close()


@dataclass
class _Pending:
    """A connection in its handshake: a duplicate of its socket (to drop it) and when it started."""

    watch: socket.socket
    started: float

    def drop(self) -> None:
        """End the handshake: its thread reads an EOF."""
        try:
            self.watch.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.watch.close()


class _NoGreeting(ConnectionError):
    """The listener closed the connection (or stayed silent) before its greeting."""


def connect(address: tuple[str, int], secret: bytes, timeout_s: float) -> Channel:
    """Connect to the RL client and authenticate both ways.

    Retries while the client is not listening yet, or closes the connection before its greeting
    (e.g. while it drops connections that flood it).

    Raises:
        BackendTimeoutError: When no connection succeeded within ``timeout_s``, saying whether the
            port refused the connections or closed them before the greeting.
        AuthenticationError: When the peer on that address does not know the job secret.
    """
    deadline = time.monotonic() + timeout_s
    peer = f"{address[0]}:{address[1]}"
    dropped = 0
    while True:
        try:
            sock = socket.create_connection(address, timeout=HANDSHAKE_TIMEOUT_S)
        except (TimeoutError, ConnectionRefusedError, ConnectionResetError) as exc:
            if time.monotonic() >= deadline:
                raise BackendTimeoutError(
                    f"the RL client at {peer} did not accept this LLM server within "
                    f"{timeout_s:g}s ({exc}); check --master-addr/--master-port and that node 0 runs."
                ) from exc
            time.sleep(0.2)
            continue
        try:
            return _handshake(sock, secret, peer, listening=False)
        except _NoGreeting as exc:
            dropped += 1
            if time.monotonic() >= deadline:
                raise BackendTimeoutError(
                    f"the RL client at {peer} accepted this LLM server's connection but closed it before its greeting "
                    f"(or stayed silent), {dropped} time(s) within {timeout_s:g}s (last: {exc.__cause__!r}): it may be "
                    "flooded with connections by another process on this machine, or what listens on that port is "
                    "not an llmgym RL client. Fix: check --master-addr/--master-port and which process holds the "
                    "port (`ss -tlnp`)."
                ) from exc
        except (EOFError, OSError) as exc:
            raise AuthenticationError(
                f"the RL client at {peer} broke off the control-plane handshake after its greeting ({exc!r}): it "
                f"refused this server's proof, so it has another ${SECRET_ENV}."
            ) from exc
        time.sleep(0.05)


# --------------------------------------------------------------------------- handshake


def _handshake(
    sock: socket.socket, secret: bytes, peer: str, listening: bool, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> Channel:
    """Run the mutual challenge on a fresh socket and return the channel (see the module docstring).

    The socket's reads and writes time out after ``timeout_s`` during the handshake only.

    Raises:
        AuthenticationError: When the peer does not know the secret (or is no llmgym peer).
        _NoGreeting: (connecting side) When the listener closed or stayed silent before its greeting.
        EOFError, OSError: When the peer broke off the handshake otherwise.
    """
    sock.settimeout(None)
    _set_io_timeout(sock, timeout_s)
    local_address = str(sock.getsockname()[0])
    conn = Connection(sock.detach())
    try:
        mine = secrets.token_bytes(_NONCE_BYTES)
        if listening:
            conn.send_bytes(_MAGIC + mine)
            answer = conn.recv_bytes(maxlength=_NONCE_BYTES + _TAG_BYTES)
            theirs, tag = answer[:_NONCE_BYTES], answer[_NONCE_BYTES:]
            _verify(tag, _proof(secret, b"connector", mine, theirs), peer)
            conn.send_bytes(_proof(secret, b"listener", theirs, mine))
            nonce_l, nonce_c = mine, theirs
        else:
            try:
                hello = conn.recv_bytes(maxlength=len(_MAGIC) + _NONCE_BYTES)
            except (EOFError, OSError) as exc:
                raise _NoGreeting(f"no greeting from {peer}") from exc
            if not hello.startswith(_MAGIC) or len(hello) != len(_MAGIC) + _NONCE_BYTES:
                raise AuthenticationError(f"the peer at {peer} is not an llmgym RL client (unexpected greeting)")
            theirs = hello[len(_MAGIC):]
            conn.send_bytes(mine + _proof(secret, b"connector", theirs, mine))
            _verify(conn.recv_bytes(maxlength=_TAG_BYTES), _proof(secret, b"listener", mine, theirs), peer)
            nonce_l, nonce_c = theirs, mine
        _set_io_timeout(conn, 0.0)
    except BaseException:
        conn.close()
        raise
    session = hmac.new(secret, b"session" + nonce_l + nonce_c, hashlib.sha256).digest()
    to_connector = hmac.new(session, b"listener->connector", hashlib.sha256).digest()
    to_listener = hmac.new(session, b"connector->listener", hashlib.sha256).digest()
    if listening:
        return Channel(conn, to_connector, to_listener, peer, local_address)
    return Channel(conn, to_listener, to_connector, peer, local_address)


def _proof(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


def _verify(tag: bytes, expected: bytes, peer: str) -> None:
    if not hmac.compare_digest(tag, expected):
        raise AuthenticationError(f"the peer at {peer} does not know this job's secret (${SECRET_ENV})")


def _frame_tag(key: bytes, sequence: int, payload: bytes | memoryview) -> bytes:
    mac = hmac.new(key, sequence.to_bytes(8, "big"), hashlib.sha256)
    mac.update(payload)
    return mac.digest()


def _set_io_timeout(connection: socket.socket | Connection, seconds: float) -> None:
    """Bound blocking reads and writes on the socket (0: no bound) without making it non-blocking."""
    with socket.socket(fileno=os.dup(connection.fileno())) as sock:
        whole = int(seconds)
        value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
