"""`llmgym launch`: a two-node job on 127.0.0.1, Ctrl-C, argument errors."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgym.errors import ConfigError
from llmgym.llm.distributed.launch import client_command, launch_info, launch_main
from tests.distributed.test_dispatch import _wait_dead

ROOT = Path(__file__).resolve().parents[2]
CLIENT = str(Path(__file__).with_name("launched_client.py"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _interactive_sigint() -> None:
    # A launcher typed at a terminal gets Ctrl-C; one started in the background by a script
    # inherits SIGINT ignored (as this test run may be), so restore the terminal's disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _launcher(*args: str, secret: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LLMGYM_AUTHKEY", None)
    if secret is not None:
        env["LLMGYM_AUTHKEY"] = secret
    return subprocess.Popen(
        [sys.executable, "-m", "llmgym.llm.distributed.launch", *args], cwd=ROOT, env=env,
        preexec_fn=_interactive_sigint,
    )


def _wait_file(path: Path, within_s: float) -> dict:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not written in {within_s}s"
        time.sleep(0.2)
    return json.loads(path.read_text())


@pytest.mark.timeout(90)
def test_two_launchers_on_localhost_form_one_job(tmp_path):
    port = str(_free_port())
    common = ["--llm-processes", "2", "--nnodes", "2", "--master-port", port, "--timeout-s", "30"]
    out = tmp_path / "result.json"
    secret = "a shared secret of the two nodes"
    node1 = _launcher(*common, "--node-rank", "1", CLIENT, str(out), "fake", secret=secret)  # servers wait
    node0 = _launcher(*common, "--node-rank", "0", CLIENT, str(out), "fake", secret=secret)
    assert node0.wait(timeout=75) == 0
    assert node1.wait(timeout=15) == 0
    record = json.loads(out.read_text())
    assert [rank for rank, _, _ in record["servers"]] == [0, 1]
    assert [len(s) for s in record["scores"]] == [2, 1, 1]
    assert _wait_dead([record["client_pid"]] + [pid for _, _, pid in record["servers"]], 5) == []


@pytest.mark.timeout(60)
def test_ctrl_c_on_launcher_stops_every_process(tmp_path):
    out = tmp_path / "result.json"
    launcher = _launcher("--llm-processes", "2", "--master-port", str(_free_port()), "--timeout-s", "20", CLIENT, str(out), "hang")
    record = _wait_file(out, 45)
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=15) == 130
    assert _wait_dead([record["client_pid"]] + [pid for _, _, pid in record["servers"]], 5) == []


def test_launch_arguments():
    with pytest.raises(ConfigError, match="needs a command"):
        launch_main(["--llm-processes", "2"])
    with pytest.raises(ConfigError, match="rl_processes=2"):
        launch_main(["--rl-processes", "2", "x.py"])
    with pytest.raises(ConfigError, match="llm_processes=1 is smaller than distributed.nnodes=2"):
        launch_main(["--nnodes", "2", "--node-rank", "1", "x.py"])
    assert client_command(["train.py", "--x"]) == [sys.executable, "train.py", "--x"]
    assert client_command(["-m", "pkg.mod"]) == [sys.executable, "-m", "pkg.mod"]
    assert client_command(["python", "a.py"]) == [sys.executable, "a.py"]
    assert client_command(["train", "c.yaml"])[-2:] == ["train", "c.yaml"]
    assert launch_info({}) is None
    info = launch_info({
        "LLMGYM_LAUNCHED": "1", "LLMGYM_LLM_PROCESSES": "3", "LLMGYM_MASTER_ADDR": "127.0.0.1",
        "LLMGYM_MASTER_PORT": "1234", "LLMGYM_TIMEOUT_S": "5", "LLMGYM_MODEL_PARALLELISM_SIZE": "1",
    })
    assert info is not None and info.llm_processes == 3 and info.master_port == 1234


def test_make_backend_selection(monkeypatch):
    from llmgym.config import DistributedConfig
    from llmgym.llm.distributed import backend

    calls = []
    monkeypatch.setattr(backend.DistributedLLM, "connect", classmethod(lambda cls, f, n, **kw: calls.append(("connect", n, kw))))
    monkeypatch.setattr(backend.DistributedLLM, "spawn", classmethod(lambda cls, f, n, **kw: calls.append(("spawn", n, kw))))
    monkeypatch.setenv("LLMGYM_LAUNCHED", "1")
    for key, value in [("LLM_PROCESSES", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "4321"),
                       ("TIMEOUT_S", "7"), ("MODEL_PARALLELISM_SIZE", "1")]:
        monkeypatch.setenv(f"LLMGYM_{key}", value)
    backend.make_backend("tiny", distributed=DistributedConfig(llm_processes=5))
    monkeypatch.delenv("LLMGYM_LAUNCHED")
    backend.make_backend("tiny", distributed=DistributedConfig(llm_processes=3, timeout_s=9, backend="spawn"))
    assert calls == [
        ("connect", 2, {"host": "127.0.0.1", "port": 4321, "timeout_s": 7.0}),
        ("spawn", 3, {"timeout_s": 9.0, "model_parallelism_size": 1, "host": "127.0.0.1"}),
    ]
