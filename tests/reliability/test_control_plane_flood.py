"""Idle connections from any local user cannot shut the LLM servers out (issue 35, item 5)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from llmgym.errors import BackendTimeoutError
from llmgym.llm.distributed import transport

SECRET = b"0123456789abcdef-the-job-secret"
FLOOD = 64  # twice the handshakes a listener runs at once


class _Flood:
    """Keeps ``count`` idle connections open to ``port`` (reopening those the listener drops)."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.sockets: list[socket.socket] = []
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket:
        self.opened += 1
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def _run(self) -> None:
        self.sockets = [self._open() for _ in range(self.count)]
        while not self._stop.wait(0.01):
            for i, sock in enumerate(self.sockets):
                sock.setblocking(False)
                try:  # read the greeting away, never answer it
                    dropped = sock.recv(4096) == b""
                except BlockingIOError:
                    dropped = False
                except OSError:
                    dropped = True
                if dropped:
                    sock.close()
                    self.sockets[i] = self._open()

    def __enter__(self) -> _Flood:
        self._thread.start()
        while len(self.sockets) < self.count and self._thread.is_alive():
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


@pytest.mark.timeout(60)
def test_the_real_server_gets_in_through_a_flood_of_idle_connections(caplog):
    listener = transport.ControlListener("127.0.0.1", 0, SECRET)
    port = listener.address[1]
    accepted: list = []
    waiting = threading.Thread(target=lambda: accepted.extend(listener.accept(1, timeout_s=30)), daemon=True)
    try:
        with _Flood(port, FLOOD) as flood:
            waiting.start()
            time.sleep(0.5)  # the listener has taken the flood in
            channel = transport.connect(("127.0.0.1", port), SECRET, timeout_s=20)
            waiting.join(timeout=30)
            assert flood.opened >= FLOOD
        assert len(accepted) == 1
        assert "dropped for a newer connection" in caplog.text  # the flood filled every handshake slot
        accepted[0].send(("ping", 1))
        assert channel.recv() == ("ping", 1)
        channel.close()
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


@pytest.mark.timeout(30)
def test_a_port_that_closes_connections_before_the_greeting_is_named_as_such():
    """No "not this job's RL client" for a listener that drops connections: a timeout that says what happened."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drop_everything() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=drop_everything, daemon=True)
    thread.start()
    try:
        with pytest.raises(BackendTimeoutError, match="closed it before its greeting") as info:
            transport.connect(server.getsockname()[:2], SECRET, timeout_s=1.5)
        assert "not this job's RL client" not in str(info.value)
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
