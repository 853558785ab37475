"""Attacks on the control plane, reproduced and refused: no code runs for anyone without the job secret."""

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path

import pytest

from llmgym.errors import AuthenticationError, ConfigError
from llmgym.llm.distributed import transport
from llmgym.llm.distributed.client import DistributedLLM
from llmgym.llm.distributed.launch import job_secret_env
from tests.distributed.fakes import FakeFactory
from tests.distributed.test_dispatch import _wait_dead
from tests.distributed.test_launch import CLIENT, _free_port, _launcher, _wait_file

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"0123456789abcdef-the-job-secret"
OLD_DEFAULT_KEY = b"llmgym-control-plane"  # the constant the control plane used to fall back to


class _Evil:
    """Unpickling this object creates ``path``: proof that a pickle from the attacker was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (Path(self.path),))


def _evil(path: Path) -> bytes:
    return pickle.dumps(("init", _Evil(path)))


def _legit_connect(port: int, result: list) -> threading.Thread:
    def run() -> None:
        result.append(transport.connect(("127.0.0.1", port), SECRET, timeout_s=10))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _attack_listener(port: int, marker: Path) -> None:
    """Every way of talking to the client's port without the secret, each sending an evil pickle."""
    # 1. multiprocessing's own handshake with the old built-in default key, then a pickle
    with pytest.raises(Exception):  # noqa: B017 - any refusal: the new handshake is not multiprocessing's
        conn = Client(("127.0.0.1", port), family="AF_INET", authkey=OLD_DEFAULT_KEY)
        conn.send_bytes(_evil(marker))
        conn.recv_bytes()
    # 2. the real handshake with a wrong secret
    with pytest.raises(AuthenticationError):
        transport.connect(("127.0.0.1", port), b"a wrong secret of enough bytes", timeout_s=5)
    # 3. stray bytes, and a pickle sent as the very first frame
    for junk in (os.urandom(64), len(_evil(marker)).to_bytes(4, "big") + _evil(marker)):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(junk)
            time.sleep(0.05)


@pytest.mark.timeout(60)
def test_listener_refuses_every_unauthenticated_peer_and_keeps_waiting(tmp_path, caplog):
    marker = tmp_path / "pwned"
    listener = transport.ControlListener("127.0.0.1", 0, SECRET)
    port = listener.address[1]
    silent = socket.create_connection(("127.0.0.1", port))  # says nothing: must not block the others
    result: list = []

    def attack_then_connect() -> None:
        _attack_listener(port, marker)
        _legit_connect(port, result).join()

    peers = threading.Thread(target=attack_then_connect)
    peers.start()
    try:
        channels = listener.accept(1, timeout_s=20)
    finally:
        peers.join()
        listener.close()
        silent.close()
    assert len(channels) == 1
    channels[0].send(("ping", 1))
    assert result[0].recv() == ("ping", 1)
    assert not marker.exists(), "an unauthenticated pickle was loaded"
    assert "refused a control-plane connection" in caplog.text


def _fake_client(sock: socket.socket, marker: Path, mode: str) -> None:
    """A process squatting the master port, trying to make a server unpickle its 'init'."""
    conn, _ = sock.accept()
    with conn:
        if mode == "mp-default-key":  # the old protocol: multiprocessing's challenge with the default key
            from multiprocessing.connection import Connection, deliver_challenge

            mp = Connection(conn.detach())
            try:
                deliver_challenge(mp, OLD_DEFAULT_KEY)
                mp.send_bytes(_evil(marker))
            except (OSError, EOFError, Exception):  # noqa: BLE001 - the server may hang up at any point
                pass
            mp.close()
        else:  # the new greeting, then a pickle instead of the proof
            payload = _evil(marker)
            for frame in (b"llmgym-control-plane-v2" + os.urandom(32), payload):
                try:
                    conn.sendall(len(frame).to_bytes(4, "big") + frame)
                except OSError:
                    return
            time.sleep(0.5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["mp-default-key", "greeting-then-pickle"])
def test_server_never_unpickles_from_a_fake_client(tmp_path, mode):
    marker = tmp_path / "pwned"
    sock = socket.create_server(("127.0.0.1", 0))
    fake = threading.Thread(target=_fake_client, args=(sock, marker, mode), daemon=True)
    fake.start()
    env = {**os.environ, "PYTHONPATH": str(ROOT), transport.SECRET_ENV: SECRET.decode()}
    server = subprocess.run(
        [sys.executable, "-m", "llmgym.llm.distributed.server", "--connect", f"127.0.0.1:{sock.getsockname()[1]}",
         "--rank", "0", "--timeout-s", "5"],
        env=env, capture_output=True, text=True, timeout=40,
    )
    sock.close()
    assert server.returncode != 0
    assert "AuthenticationError" in server.stderr or "handshake" in server.stderr, server.stderr[-2000:]
    assert not marker.exists(), "the server loaded a pickle from an unauthenticated client"


def _channel_pair() -> tuple[transport.Channel, transport.Channel]:
    listener = transport.ControlListener("127.0.0.1", 0, SECRET)
    result: list = []
    thread = _legit_connect(listener.address[1], result)
    try:
        (accepted,) = listener.accept(1, timeout_s=10)
    finally:
        listener.close()
    thread.join()
    return accepted, result[0]


@pytest.mark.timeout(30)
def test_altered_injected_or_replayed_frames_are_refused_before_unpickling(tmp_path):
    marker = tmp_path / "pwned"
    server_side, client_side = _channel_pair()
    client_side.send(("hello", 0))
    assert server_side.recv() == ("hello", 0)
    # an injected frame: right framing, no valid tag
    client_side._conn.send_bytes(os.urandom(32) + _evil(marker))
    with pytest.raises(AuthenticationError, match="integrity"):
        server_side.recv()
    # a replayed frame: a valid tag for a sequence number already used
    a, b = _channel_pair()
    b.send(("call", 1))
    assert a.recv() == ("call", 1)
    b._sent = 0
    b.send(("call", 1))
    with pytest.raises(AuthenticationError):
        a.recv()
    assert not marker.exists()
    for channel in (server_side, client_side, a, b):
        channel.close()


def test_secret_sources_and_their_errors(tmp_path):
    assert transport.secret_from_env({}) is None
    with pytest.raises(ConfigError, match="needs a shared secret"):
        transport.require_secret({})
    with pytest.raises(ConfigError, match="fewer than 16"):
        transport.secret_from_env({transport.SECRET_ENV: "short"})
    path = tmp_path / "secret"
    path.write_text(SECRET.decode() + "\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        transport.secret_from_env({transport.SECRET_FILE_ENV: str(path)})
    path.chmod(0o600)
    assert transport.secret_from_env({transport.SECRET_FILE_ENV: str(path)}) == SECRET
    with pytest.raises(ConfigError, match="cannot read"):
        transport.secret_from_env({transport.SECRET_FILE_ENV: str(tmp_path / "missing")})
    assert transport.new_secret() != transport.new_secret()
    assert len(transport.new_secret()) == 64


def test_multi_node_launch_requires_a_shared_secret():
    from llmgym.config import DistributedConfig

    with pytest.raises(ConfigError, match="needs one control-plane secret"):
        job_secret_env(DistributedConfig(llm_processes=2, nnodes=2), environ={})
    assert job_secret_env(DistributedConfig(llm_processes=2, nnodes=2), {transport.SECRET_ENV: SECRET.decode()}) == {}
    one_node = job_secret_env(DistributedConfig(llm_processes=2), environ={})
    assert len(one_node[transport.SECRET_ENV]) == 64
    assert one_node != job_secret_env(DistributedConfig(llm_processes=2), environ={})  # a new secret per job


def _listening(pids: list[int]) -> list[str]:
    """Local ``IP:PORT`` of the IPv4 TCP sockets in LISTEN state held by ``pids`` (what ``ss -ltnp`` shows)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    addresses = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
            ip_hex, port_hex = fields[1].split(":")
            addresses.append(f"{socket.inet_ntoa(bytes.fromhex(ip_hex)[::-1])}:{int(port_hex, 16)}")
    return addresses


@pytest.mark.timeout(60)
def test_spawned_job_binds_nothing_beyond_loopback():
    with DistributedLLM.spawn(FakeFactory(), 2, timeout_s=20.0) as llm:
        llm.update(["a", "b"], [["1"], ["2"]], targets=[1.0, 2.0])  # the gloo group is in use
        addresses = _listening([os.getpid(), *(s.pid for s in llm.servers)])
    assert addresses, "expected the rendezvous store and gloo to listen"
    assert all(a.startswith("127.") for a in addresses), addresses


@pytest.mark.timeout(90)
def test_sigkill_of_the_launcher_takes_its_job_down(tmp_path):
    out = tmp_path / "result.json"
    launcher = _launcher("--llm-processes", "2", "--master-port", str(_free_port()), "--timeout-s", "20", CLIENT, str(out), "hang")
    record = _wait_file(out, 45)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    assert _wait_dead([record["client_pid"]] + [pid for _, _, pid in record["servers"]], 10) == []


@pytest.mark.timeout(90)
def test_launcher_reports_a_sigkilled_client_as_137(tmp_path):
    out = tmp_path / "result.json"
    launcher = _launcher("--llm-processes", "1", "--master-port", str(_free_port()), "--timeout-s", "20", CLIENT, str(out), "sigkill")
    assert launcher.wait(timeout=60) == 128 + signal.SIGKILL


def test_no_secret_constant_in_the_source():
    source = "\n".join(p.read_text() for p in (ROOT / "llmgym").rglob("*.py"))
    assert f'b"{OLD_DEFAULT_KEY.decode()}"' not in source


@pytest.mark.timeout(60)
def test_finalizer_is_silent_at_interpreter_exit(monkeypatch):
    from llmgym.llm.distributed import client as client_module

    llm = DistributedLLM.spawn(FakeFactory(), 1, timeout_s=20.0)
    llm.close()
    monkeypatch.setattr(client_module, "contextlib", None)  # what module teardown at exit does
    llm.__del__()
