r"""Start a Lamorel RL script the way ``python -m lamorel_launcher.launch`` does, in one process.

Lamorel starts ``n_rl_processes + n_llm_processes`` copies of the RL script through accelerate;
with :mod:`llmgym.compat.lamorel` the LLM lives in the RL process, so one copy is enough. This
launcher takes Lamorel's command line unchanged and runs ``rl_script_args.path`` with the Hydra
arguments that Lamorel's launcher would give it::

    python -m llmgym.compat.lamorel_launcher --config-path /abs/path/configs --config-name local_cpu_config \\
        rl_script_args.path=/abs/path/my_script.py lamorel_args.llm_args.model_path=/models/t5-small

The script's ``@hydra.main`` then reads the same file with the same overrides (Hydra comes with
``pip install 'llmgym[lamorel]'``); ``hydra.run.dir=.`` is added, as Lamorel does, so the script
runs in the current folder.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmgym.compat.lamorel_config import load_lamorel_config
from llmgym.errors import ConfigError

__all__ = ["LamorelLaunch", "main", "parse_launch_args"]


@dataclass(frozen=True)
class LamorelLaunch:
    """A parsed Lamorel launch command.

    Attributes:
        config_path: The folder holding the config (``--config-path``).
        config_name: The config's file name without ``.yaml`` (``--config-name``).
        script: The RL script (``rl_script_args.path``).
        overrides: The Hydra overrides, ``rl_script_args.path`` included, in the order given.
    """

    config_path: Path
    config_name: str
    script: Path
    overrides: tuple[str, ...]

    def script_argv(self) -> list[str]:
        """The ``sys.argv`` the script's ``@hydra.main`` sees: overrides, run dir, config location."""
        return [
            str(self.script),
            *self.overrides,
            "hydra.run.dir=.",
            "--config-path",
            str(self.config_path),
            "--config-name",
            self.config_name,
        ]


def _option(args: list[str], name: str) -> str:
    """Remove ``--name VALUE`` or ``--name=VALUE`` from ``args`` and return the value."""
    for i, arg in enumerate(args):
        if arg == name:
            if i + 1 >= len(args):
                raise ConfigError(f"{name} needs a value, e.g. {name} /abs/path/to/configs.")
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if arg.startswith(name + "="):
            del args[i]
            return arg.split("=", 1)[1]
    raise ConfigError(
        f"{name} is missing; Lamorel's launch command is: python -m llmgym.compat.lamorel_launcher "
        "--config-path DIR --config-name NAME rl_script_args.path=SCRIPT [overrides]."
    )


def parse_launch_args(argv: Sequence[str]) -> LamorelLaunch:
    """Parse Lamorel's launch command line and check the config and the script.

    Args:
        argv: The arguments after the program name.

    Returns:
        The launch to run.

    Raises:
        ConfigError: On a missing ``--config-path``/``--config-name``, a missing config file, an
            invalid ``lamorel_args`` section, or a missing ``rl_script_args.path`` script.
    """
    args = list(argv)
    config_path = Path(_option(args, "--config-path")).absolute()
    config_name = _option(args, "--config-name").removesuffix(".yaml")
    for arg in args:
        if "=" not in arg or arg.startswith("-"):
            raise ConfigError(f"argument {arg!r} is not a Hydra override; write dotted.key=value.")
    config = load_lamorel_config(config_path / f"{config_name}.yaml", args)
    script = (
        str(config.rl_script_args.path)
        if "rl_script_args" in config and "path" in config.rl_script_args
        else "???"
    )
    if script == "???" or not Path(script).is_file():
        raise ConfigError(
            f"rl_script_args.path={script!r} is not a file; give the RL script's path, "
            "e.g. rl_script_args.path=/abs/path/to/my_script.py."
        )
    return LamorelLaunch(config_path, config_name, Path(script).absolute(), tuple(args))


def main(argv: Sequence[str] | None = None) -> None:
    """Run the RL script of a Lamorel launch command in this process.

    Args:
        argv: The arguments after the program name (default: ``sys.argv[1:]``).
    """
    launch = parse_launch_args(sys.argv[1:] if argv is None else argv)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = launch.script_argv()
    sys.path.insert(0, str(launch.script.parent))
    try:
        runpy.run_path(str(launch.script), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


if __name__ == "__main__":
    main()
