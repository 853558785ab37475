"""``llmgym launch``: start the RL client and the LLM servers of one machine, and supervise them.

One invocation per machine. Node 0 runs the user's command (the RL client: a script, ``-m
module`` or an llmgym subcommand such as ``train``) plus its share of the LLM servers; every other
node runs only its servers. The client listens on ``--master-addr:--master-port`` (127.0.0.1:29500
by default, so nothing is reachable from other machines unless asked) and the servers connect to
it, retrying for ``--timeout-s`` seconds, so the nodes may start in any order.

Security: a single-machine job draws a random secret and hands it to its own children only; a
multi-node job refuses to start unless ``$LLMGYM_AUTHKEY`` or ``$LLMGYM_AUTHKEY_FILE`` gives every
node the same secret. Every control connection proves knowledge of it before any message is
read (see :mod:`~llmgym.llm.distributed.transport` and docs/distributed.md's threat model). The
children receive ``SIGTERM`` if the launcher itself dies, even from ``SIGKILL``.

This is a small process supervisor rather than a wrapper of ``torchrun``/``accelerate launch``:
their agents kill every worker as soon as one fails (the client would die before reporting the
server's traceback), expect one program on every rank (the servers would re-run the user's
script), and bind their rendezvous store on all interfaces. Here the client reports every
failure itself, the servers run :mod:`llmgym.llm.distributed.server`, and the launcher only
starts processes, forwards Ctrl-C / SIGTERM and makes sure none outlives the job.

The client learns it was launched from the ``LLMGYM_*`` variables below (see :func:`launch_info`);
without them the same script uses the in-process backend.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgym.config import DistributedConfig
from llmgym.errors import ConfigError
from llmgym.lifetime import exit_with_parent
from llmgym.llm.distributed import transport
from llmgym.llm.distributed.placement import (
    assign_gpus,
    first_server_rank,
    server_env,
    servers_per_node,
    visible_gpus,
)

__all__ = ["LaunchInfo", "launch_info", "client_command", "build_parser", "job_secret_env", "launch_main"]

ENV_LAUNCHED = "LLMGYM_LAUNCHED"
ENV_LLM_PROCESSES = "LLMGYM_LLM_PROCESSES"
ENV_MASTER_ADDR = "LLMGYM_MASTER_ADDR"
ENV_MASTER_PORT = "LLMGYM_MASTER_PORT"
ENV_TIMEOUT_S = "LLMGYM_TIMEOUT_S"
ENV_MODEL_PARALLELISM_SIZE = "LLMGYM_MODEL_PARALLELISM_SIZE"

_STOP_GRACE_S = 5.0
_LOOPBACK_PREFIXES = ("127.", "localhost", "::1")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchInfo:
    """What ``llmgym launch`` tells the RL client through its environment.

    Attributes:
        llm_processes: Number of LLM servers in the whole job.
        master_addr: Address the client listens on for the servers.
        master_port: Port the client listens on.
        timeout_s: Longest silence tolerated from a server.
        model_parallelism_size: GPUs per server.
    """

    llm_processes: int
    master_addr: str
    master_port: int
    timeout_s: float
    model_parallelism_size: int


def launch_info(environ: dict[str, str] | None = None) -> LaunchInfo | None:
    """Return the launch settings when this process is the client of ``llmgym launch``, else ``None``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_LAUNCHED) != "1":
        return None
    return LaunchInfo(
        llm_processes=int(env[ENV_LLM_PROCESSES]),
        master_addr=env[ENV_MASTER_ADDR],
        master_port=int(env[ENV_MASTER_PORT]),
        timeout_s=float(env[ENV_TIMEOUT_S]),
        model_parallelism_size=int(env[ENV_MODEL_PARALLELISM_SIZE]),
    )


def client_command(command: Sequence[str]) -> list[str]:
    """Build the command line of the RL client.

    Args:
        command: ``SCRIPT.py ARGS...``, ``-m MODULE ARGS...``, ``python ...``, or an llmgym
            subcommand (``train quickstart ...``).

    Returns:
        The argv to execute, with this interpreter for Python code.

    Raises:
        ConfigError: When ``command`` is empty.
    """
    if not command:
        raise ConfigError(
            "llmgym launch needs a command after its options, e.g. `llmgym launch --llm-processes 2 "
            "train babyai_ppo` or `llmgym launch --llm-processes 2 my_script.py`."
        )
    first = command[0]
    if first == "-m" or first.endswith(".py") or Path(first).is_file():
        return [sys.executable, *command]
    if Path(first).name.startswith("python"):
        return [sys.executable, *command[1:]]
    return [sys.executable, "-c", "import sys; from llmgym.cli import main; sys.exit(main())", *command]


def build_parser(prog: str = "llmgym launch") -> argparse.ArgumentParser:
    """Build the argument parser of ``llmgym launch`` (defaults from :class:`DistributedConfig`)."""
    d = DistributedConfig()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run an RL script or llmgym subcommand with N LLM server processes (one call per machine).",
    )
    parser.add_argument("--llm-processes", type=int, default=d.llm_processes, help="LLM servers in the whole job.")
    parser.add_argument("--rl-processes", type=int, default=d.rl_processes, help="RL client processes (only 1).")
    parser.add_argument(
        "--model-parallelism-size", type=int, default=d.model_parallelism_size, help="GPUs per LLM server."
    )
    parser.add_argument("--nnodes", type=int, default=d.nnodes, help="Machines in the job.")
    parser.add_argument("--node-rank", type=int, default=d.node_rank, help="Rank of this machine (0 runs the client).")
    parser.add_argument("--master-addr", default=d.master_addr, help="Address of node 0, where the client listens.")
    parser.add_argument("--master-port", type=int, default=d.master_port, help="Port the client listens on.")
    parser.add_argument(
        "--timeout-s", type=float, default=d.timeout_s, help="Seconds before a silent LLM server is declared dead."
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="SCRIPT.py ARGS, -m MODULE ARGS, or a subcommand.")
    return parser


def _config(args: argparse.Namespace) -> DistributedConfig:
    return DistributedConfig(
        llm_processes=args.llm_processes,
        rl_processes=args.rl_processes,
        model_parallelism_size=args.model_parallelism_size,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        timeout_s=args.timeout_s,
    )


def _server_command(config: DistributedConfig, rank: int, gpus: tuple[int, ...]) -> list[str]:
    return [
        sys.executable, "-m", "llmgym.llm.distributed.server",
        "--connect", f"{config.master_addr}:{config.master_port}",
        "--rank", str(rank),
        "--gpus", ",".join(map(str, gpus)),
        "--timeout-s", str(config.timeout_s),
        "--parent-pid", str(os.getpid()),
    ]


def job_secret_env(config: DistributedConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment entries that give this machine's children the job secret.

    Args:
        config: The job's layout.
        environ: Where the user may have set a secret (default: ``os.environ``).

    Returns:
        ``{}`` when the user set a secret (the children inherit it), else a fresh random one.

    Raises:
        ConfigError: When the job spans several machines and no secret is set: each node's
            launcher would draw a different one.
    """
    if transport.secret_from_env(environ) is not None:
        return {}
    if config.nnodes > 1:
        raise ConfigError(
            f"a job over --nnodes={config.nnodes} machines needs one control-plane secret shared by every node "
            f"and none is set: set ${transport.SECRET_ENV} to the same random value on every node (`python -c "
            f"'import secrets; print(secrets.token_hex(32))'`) or ${transport.SECRET_FILE_ENV} to a file only you can read."
        )
    return {transport.SECRET_ENV: transport.new_secret()}


def _start(config: DistributedConfig, command: Sequence[str]) -> tuple[subprocess.Popen[bytes] | None, list[Any]]:
    counts = servers_per_node(config.llm_processes, config.nnodes)
    local = counts[config.node_rank]
    first = first_server_rank(config.llm_processes, config.nnodes, config.node_rank)
    blocks = assign_gpus(local, config.model_parallelism_size, visible_gpus())
    secret_env = job_secret_env(config)
    client = None
    servers: list[subprocess.Popen[bytes]] = []
    try:
        if config.node_rank == 0:
            env = {**os.environ, **secret_env}
            env.update({
                ENV_LAUNCHED: "1",
                ENV_LLM_PROCESSES: str(config.llm_processes),
                ENV_MASTER_ADDR: config.master_addr,
                ENV_MASTER_PORT: str(config.master_port),
                ENV_TIMEOUT_S: str(config.timeout_s),
                ENV_MODEL_PARALLELISM_SIZE: str(config.model_parallelism_size),
            })
            client = subprocess.Popen(
                client_command(command), env=env, preexec_fn=functools.partial(exit_with_parent, os.getpid())
            )
        for index, gpus in enumerate(blocks):
            env = {**server_env(gpus, local), **secret_env}
            servers.append(subprocess.Popen(_server_command(config, first + index, gpus), env=env))
    except BaseException:
        _stop([p for p in [client, *servers] if p is not None], signal.SIGTERM)
        raise
    return client, servers


def _stop(processes: Sequence[subprocess.Popen[bytes]], sig: int) -> None:
    """Signal every live process, wait a grace period, then kill what is left."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)
    deadline = time.monotonic() + _STOP_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _supervise(client: subprocess.Popen[bytes] | None, servers: Sequence[subprocess.Popen[bytes]], grace_s: float) -> int:
    """Wait for the job: the client's end (node 0) or the servers' end (other nodes)."""
    if client is not None:
        code = client.wait()
        # The client's exit closed its connections, so servers are leaving; stragglers are killed.
        deadline = time.monotonic() + grace_s
        for server in servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=max(0.0, deadline - time.monotonic()))
        _stop(servers, signal.SIGTERM)
        return _exit_status(code)
    codes = [_exit_status(server.wait()) for server in servers]
    return max(codes) if codes else 0


def _exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: ``128 + N`` for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def launch_main(argv: Sequence[str]) -> int:
    """Run ``llmgym launch`` with the arguments after ``launch``; returns the exit code.

    Node 0 returns the client's exit code; other nodes return their servers' worst exit code
    (other nodes ignore the command, so every node can share one command line). A child killed
    by signal N counts as ``128 + N``, as in a shell.
    Ctrl-C or SIGTERM stops every process started here (SIGTERM, then SIGKILL after 5 s) and
    returns 130 / 143.

    Raises:
        ConfigError: On invalid options (named, with the fix), e.g. more GPUs asked than visible,
            or a multi-node job without a shared secret.
    """
    args = build_parser().parse_args(list(argv))
    config = _config(args)
    if config.node_rank == 0 and not args.command:
        client_command(args.command)  # raises the explanatory ConfigError
    if not config.master_addr.startswith(_LOOPBACK_PREFIXES):
        logger.warning(
            "the job listens on %s: control connections are authenticated, but the servers' gloo collectives "
            "and rendezvous store are not; use it only on a trusted cluster network.", config.master_addr,
        )

    def terminate(signum: int, frame: object) -> None:
        raise _Stopped(signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    client, servers = _start(config, args.command)
    processes = [p for p in [client, *servers] if p is not None]
    try:
        return _supervise(client, servers, grace_s=config.timeout_s)
    except KeyboardInterrupt:
        _stop(processes, signal.SIGTERM)
        return 130
    except _Stopped as stop:
        _stop(processes, signal.SIGTERM)
        return 128 + stop.signum
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


if __name__ == "__main__":
    sys.exit(launch_main(sys.argv[1:]))
