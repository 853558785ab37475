"""Where the Ray backend runs: a private local Ray instance, or a cluster the user started.

* **Private instance** (no ``distributed.ray_address``): ``ray.init(address="local")`` on this machine, in a
  temp dir of its own (so neither ``RAY_ADDRESS`` nor another user's ``ray start --head`` can capture it), with the CPUs
  the servers reserve (``llm_processes * cpus_per_server``), the visible GPUs, the dashboard off,
  the object store capped at ``object_store_mb`` and token authentication on with a token drawn
  for this process (``RAY_AUTH_TOKEN`` in the environment of this process and of the Ray processes
  it starts, never written to disk). Ray's processes listen on every interface whatever the
  settings (see docs/security.md): the token is what keeps others out. The instance is shut down
  by :meth:`RayRuntime.shutdown`, at interpreter exit, and on SIGTERM; a reaper process stops what
  Ray leaves of it (and removes its temp dir) when the driver is killed outright.
* **A cluster** (``distributed.ray_address``: ``auto`` or ``host:port``): joined only if it
  refuses a request that carries no token, unless ``distributed.allow_unauthenticated_cluster``
  is set (then with a warning).
* **Ray already initialised** in this process (by an earlier ``start_ray`` or the user's
  ``ray.init``): used as it is, and left running.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from types import FrameType

from llmgym.config import DistributedConfig
from llmgym.errors import AuthenticationError, BackendError, require_installed
from llmgym.lifetime import Reaper

__all__ = ["RayRuntime", "check_token_file", "cluster_requires_token", "reload_ray_auth", "start_ray"]

_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
#: Variables that would point a private instance's ``ray.init`` (or its processes) at another Ray cluster.
_ADDRESS_VARS = ("RAY_ADDRESS",)
#: Set in the environment of the Ray processes a private instance starts, to its temp dir: how the reaper finds them.
_INSTANCE_VAR = "LLMGYM_RAY_INSTANCE"
#: This process's token for the private instances it starts (drawn once: Ray caches the token it loads).
_TOKEN = secrets.token_hex(32)

#: The clean-up of a private instance's reaper (a :class:`~llmgym.lifetime.Reaper`): when the driver dies without
#: shutting Ray down (SIGKILL, the OOM killer), it kills the instance's processes Ray leaves behind (its dashboard
#: and runtime-env agents wait ~60 s on the dead GCS) and removes the instance's temp dir.
_REAP_INSTANCE = """
import os, shutil
import psutil
def reap(args, messages):
    temp_dir, mark = args
    # The instance's processes carry its mark in their environment, or (the agents, whose process titles
    # overwrite it) hold its log files open.
    procs = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.uids().real != os.getuid():
                continue
            if proc.environ().get(mark) == temp_dir or any(
                f.path.startswith(temp_dir + os.sep) for f in proc.open_files()
            ):
                procs.append(proc)
        except psutil.Error:
            pass
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)
    shutil.rmtree(temp_dir, ignore_errors=True)
"""

#: Asks a GCS for a key without any token; prints REFUSED when token authentication turned it away.
_PROBE = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1], cluster_id="0" * 56).internal_kv_get(b"llmgym-probe", None, timeout=float(sys.argv[2]))
    print("ANSWERED")
except Exception as exc:
    print("REFUSED" if "InvalidAuthToken" in str(exc) else "ANSWERED", type(exc).__name__)
"""


@dataclass
class RayRuntime:
    """The Ray instance the backend's actors run in.

    Attributes:
        gcs_address: ``host:port`` of the instance's GCS (what ``ray.init(address=...)`` takes).
        private: Whether this process started it (and so shuts it down).
        owned: Whether this process called ``ray.init`` (and so calls ``ray.shutdown``).
    """

    gcs_address: str
    private: bool
    owned: bool
    _saved_env: dict[str, str | None] = field(default_factory=dict, repr=False)
    _closed: bool = field(default=False, repr=False)
    #: A private instance's own Ray temp dir (sessions, sockets, logs), removed at shutdown.
    temp_dir: str | None = None
    _reaper: Reaper | None = field(default=None, repr=False)

    def shutdown(self) -> None:
        """Disconnect (and stop a private instance: no Ray process stays behind); safe to call twice."""
        if self._closed or not self.owned:
            return
        self._closed = True
        import ray

        ray.shutdown()
        global _started
        if _started is self:
            _started = None
        _restore(self._saved_env)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if self._reaper is not None:
            self._reaper.dismiss()


def _restore(saved: dict[str, str | None]) -> None:
    """Put back the environment variables ``saved`` holds (``None``: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


#: The runtime ``start_ray`` started last in this process, while it runs.
_started: RayRuntime | None = None


def start_ray(config: DistributedConfig) -> RayRuntime:
    """Start a private Ray instance or join ``config.ray_address``; see the module docstring.

    Args:
        config: The ``distributed`` section.

    Returns:
        The runtime; call :meth:`RayRuntime.shutdown` when done (also registered at exit).

    Raises:
        MissingDependencyError: When Ray is not installed.
        AuthenticationError: When the cluster accepts requests without a token and
            ``allow_unauthenticated_cluster`` is off, or joining one with a ``RAY_AUTH_TOKEN_PATH``
            file that its group or others may read (:func:`check_token_file`).
        BackendError: When Ray cannot start or the cluster cannot be reached.
    """
    require_installed("ray", "ray", "distributed.llm_processes > 1 (the Ray backend)")
    import ray

    global _started
    if ray.is_initialized():
        private = _started is not None and _started.private
        return RayRuntime(_gcs_address(), private=private, owned=False)
    if config.ray_address is None:
        runtime = _start_private(config)
    else:
        runtime = _join(config)
    _started = runtime
    atexit.register(runtime.shutdown)
    _stop_on_sigterm()
    return runtime


def cluster_requires_token(gcs_address: str, timeout_s: float = 10.0) -> bool:
    """Whether the Ray cluster at ``gcs_address`` refuses a request that carries no token.

    The request comes from a fresh Python process with the Ray token variables removed from its
    environment, so nothing this process knows is sent.

    Raises:
        BackendError: When the probe cannot run or reach the cluster within ``timeout_s``.
    """
    env = {k: v for k, v in os.environ.items() if k not in _AUTH_VARS}
    env["RAY_AUTH_MODE"] = "disabled"
    command = [sys.executable, "-c", _PROBE, gcs_address, str(max(1.0, timeout_s / 2))]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BackendError(f"the Ray cluster at {gcs_address} did not answer within {timeout_s:g}s.") from exc
    if "REFUSED" in done.stdout:
        return True
    if "ANSWERED" in done.stdout:
        return False
    raise BackendError(f"could not probe the Ray cluster at {gcs_address}: {done.stderr.strip()[-500:]}")


def _start_private(config: DistributedConfig) -> RayRuntime:
    """Start this process's own Ray instance: never another cluster, whatever the machine or environment holds.

    ``address="local"`` starts a new instance even when ``RAY_ADDRESS`` is set or a ``ray start --head``
    (running, or only its ``ray_current_cluster`` file) is on the machine, which ``ray.init()`` would
    join; its own temp dir keeps it from overwriting that file (which ``ray status`` and other users'
    ``ray.init()`` read) and from mixing its sessions with other instances'. ``RAY_ADDRESS`` is unset
    while it runs, so none of its processes follows it either.
    """
    import ray
    import torch

    saved = {name: os.environ.get(name) for name in (*_AUTH_VARS, *_ADDRESS_VARS)}
    for name in ("RAY_AUTH_TOKEN_PATH", *_ADDRESS_VARS):
        os.environ.pop(name, None)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = _TOKEN
    reload_ray_auth()
    temp_dir = tempfile.mkdtemp(prefix="llmgym-ray-")
    os.environ[_INSTANCE_VAR] = temp_dir  # inherited by every Ray process of the instance (the reaper's mark)
    try:
        ray.init(
            address="local",
            _temp_dir=temp_dir,
            num_cpus=config.llm_processes * config.cpus_per_server,
            num_gpus=torch.cuda.device_count(),
            include_dashboard=False,
            object_store_memory=config.object_store_mb * 2**20,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": {"PYTHONPATH": _python_path()}},
        )
    except Exception as exc:
        _restore(saved)
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise BackendError(f"could not start a local Ray instance: {type(exc).__name__}: {exc}") from exc
    finally:
        os.environ.pop(_INSTANCE_VAR, None)
    reaper = Reaper(_REAP_INSTANCE, [temp_dir, _INSTANCE_VAR], site_packages=True)
    return RayRuntime(
        _gcs_address(), private=True, owned=True, _saved_env=saved, temp_dir=temp_dir, _reaper=reaper
    )


def check_token_file() -> None:
    """Refuse a ``RAY_AUTH_TOKEN_PATH`` file that others than its owner may read (or write).

    Whoever reads the token can run code on every machine of the cluster, so the file must be
    ``chmod 600`` (or stricter), as for an SSH key.

    Raises:
        AuthenticationError: When the file's mode grants its group or others any access; the
            message names the file and the ``chmod`` that fixes it. A missing file is left to Ray.
    """
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not path:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # Ray names a missing or unreadable file itself
    if mode & 0o077:
        raise AuthenticationError(
            f"RAY_AUTH_TOKEN_PATH={path} is readable or writable by others than its owner (mode "
            f"{stat.S_IMODE(mode):o}), so they can take the cluster's token and run code on it. Run "
            f"`chmod 600 {path}` and start again."
        )


def _join(config: DistributedConfig) -> RayRuntime:
    import ray

    check_token_file()
    address = str(config.ray_address)
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        gcs_address = canonicalize_bootstrap_address_or_die(address)
    except Exception as exc:
        raise BackendError(
            f"distributed.ray_address={address!r}: no Ray cluster found there ({exc}). Start one with "
            "`ray start --head` (and `ray start --address HEAD:6379` on the other machines), or leave "
            "ray_address null for a private local instance."
        ) from exc
    if not cluster_requires_token(gcs_address, config.timeout_s):
        if not config.allow_unauthenticated_cluster:
            raise AuthenticationError(
                f"the Ray cluster at {gcs_address} accepts requests without a token: anyone who can reach it "
                "can run code on its machines. Restart it with RAY_AUTH_MODE=token (see docs/security.md), or "
                "set distributed.allow_unauthenticated_cluster=true to join it anyway."
            )
        warnings.warn(
            f"joining the Ray cluster at {gcs_address}, whose token authentication is off "
            "(distributed.allow_unauthenticated_cluster=true): anyone who reaches it can run code on it.",
            stacklevel=3,
        )
    try:
        ray.init(
            address=gcs_address,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": {"PYTHONPATH": _python_path()}},
        )
    except Exception as exc:
        raise BackendError(
            f"could not join the Ray cluster at {gcs_address}: {type(exc).__name__}: {exc}. With token "
            "authentication on, this process needs the cluster's token (RAY_AUTH_MODE=token and "
            "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, see docs/security.md)."
        ) from exc
    return RayRuntime(gcs_address, private=False, owned=True)


def _gcs_address() -> str:
    import ray

    return str(ray.get_runtime_context().gcs_address)


def _python_path() -> str:
    """The driver's own import folders (not the interpreter's), so the servers import the same llmgym and modules."""
    prefixes = tuple({os.path.abspath(sys.prefix), os.path.abspath(sys.base_prefix)})
    paths = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    return os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p) and not p.startswith(prefixes)))


def reload_ray_auth() -> None:
    """Make Ray's C++ core re-read the auth variables (it caches them at the first ``ray.init``)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` (so the exit handlers stop the actors) unless the user handles it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _exit(signum: int, frame: FrameType | None) -> None:
        del frame
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
