"""Lamorel's own generic configs, its seed, strict ``score`` kwargs and its launch command.

``lamorel_configs/`` holds Lamorel's ``examples/configs/local_{cpu,gpu}_config.yaml`` and the
configuration shown in its README (https://github.com/flowersteam/lamorel, MIT licence), verbatim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llmgym.compat.lamorel import Caller, load_lamorel_config
from llmgym.compat.lamorel_config import parse_lamorel_args
from llmgym.compat.lamorel_launcher import parse_launch_args
from llmgym.errors import ConfigError, InputError
from llmgym.testing import save_tiny_model

CONFIGS = Path(__file__).parent / "lamorel_configs"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def t5_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("lamorel-t5") / "t5", "t5")


@pytest.mark.parametrize("name", ["local_cpu_config", "local_gpu_config"])
def test_lamorels_generic_configs_build_a_caller(name: str, t5_path: Path) -> None:
    config = load_lamorel_config(CONFIGS / f"{name}.yaml", [f"lamorel_args.llm_args.model_path={t5_path}"])
    caller = Caller(config.lamorel_args)
    try:
        scores = caller.score(["Go to the red ball."], [["go forward", "turn left"]])
        assert scores[0].shape == (2,)
        assert torch.isfinite(scores[0]).all()
    finally:
        caller.close()


def test_llm_args_seed_seeds_the_generators_as_lamorel_does(t5_path: Path) -> None:
    def draw(seed: int | None) -> torch.Tensor:
        overrides = [f"lamorel_args.llm_args.model_path={t5_path}"]
        if seed is not None:
            overrides.append(f"lamorel_args.llm_args.seed={seed}")
        caller = Caller(load_lamorel_config(CONFIGS / "local_cpu_config.yaml", overrides).lamorel_args)
        caller.close()
        return torch.rand(4)

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))
    torch.manual_seed(42)
    expected = torch.rand(4)
    config = load_lamorel_config(
        CONFIGS / "local_cpu_config.yaml", [f"lamorel_args.llm_args.model_path={t5_path}"]
    )
    del config.lamorel_args.llm_args["seed"]
    Caller(config.lamorel_args).close()
    assert torch.equal(torch.rand(4), expected)  # no seed: 42, Lamorel's default


@pytest.mark.parametrize("seed", ["five", -1, True])
def test_invalid_seed_is_a_config_error(seed: object, t5_path: Path) -> None:
    config = load_lamorel_config(
        CONFIGS / "local_cpu_config.yaml", [f"lamorel_args.llm_args.model_path={t5_path}"]
    )
    config.lamorel_args.llm_args.seed = seed
    with pytest.raises(ConfigError, match="llm_args.seed"):
        Caller(config.lamorel_args)


def test_readme_configs_two_machines_join_a_ray_cluster() -> None:
    config = load_lamorel_config(
        CONFIGS / "readme_config.yaml"
    )  # machine_rank ???: the script runs on the head
    settings = parse_lamorel_args(config.lamorel_args)
    assert settings.distributed is not None and settings.distributed.ray_address == "auto"
    assert settings.distributed.llm_processes == 1


def test_score_refuses_keyword_arguments_no_module_receives(t5_path: Path) -> None:
    config = load_lamorel_config(
        CONFIGS / "local_cpu_config.yaml", [f"lamorel_args.llm_args.model_path={t5_path}"]
    )
    caller = Caller(config.lamorel_args)
    try:
        with pytest.raises(InputError, match=r"\['temperature'\].*additional_module_function_keys"):
            caller.score(["Go."], [["a", "b"]], temperature=0.5)
        caller.score(["Go."], [["a", "b"]], minibatch_size=1)  # a batching setting, not lost
    finally:
        caller.close()


SCRIPT = """
import json
import hydra
from llmgym.compat.lamorel import Caller, lamorel_init

lamorel_init()


@hydra.main(config_path="config", config_name="config", version_base=None)
def main(config_args):
    lm_server = Caller(config_args.lamorel_args)
    scores = lm_server.score(contexts=["Go to the red ball."], candidates=[["go forward", "turn left"]])
    print("RESULT", json.dumps({"scores": scores[0].tolist(), "extra": config_args.rl_script_args.extra}))
    lm_server.close()


if __name__ == "__main__":
    main()
"""


def test_a_hydra_lamorel_script_runs_through_the_launcher(tmp_path: Path, t5_path: Path) -> None:
    pytest.importorskip("hydra", reason="hydra-core comes with pip install 'llmgym[lamorel]'")
    script = tmp_path / "rl_script.py"
    script.write_text(SCRIPT)
    command = [
        sys.executable,
        "-m",
        "llmgym.compat.lamorel_launcher",
        "--config-path",
        str(CONFIGS),
        "--config-name",
        "local_cpu_config",
        f"rl_script_args.path={script}",
        f"lamorel_args.llm_args.model_path={t5_path}",
        "+rl_script_args.extra=7",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert len(result["scores"]) == 2 and result["extra"] == 7


def test_launch_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--config-path is missing"):
        parse_launch_args(["--config-name", "local_cpu_config"])
    with pytest.raises(ConfigError, match="rl_script_args.path='\\?\\?\\?'"):
        parse_launch_args(["--config-path", str(CONFIGS), "--config-name", "local_cpu_config"])
    with pytest.raises(ConfigError, match="not a Hydra override"):
        parse_launch_args(["--config-path", str(CONFIGS), "--config-name", "local_cpu_config", "--multirun"])
    script = tmp_path / "s.py"
    script.write_text("")
    launch = parse_launch_args(
        [
            "--config-path",
            str(CONFIGS),
            "--config-name=local_cpu_config.yaml",
            f"rl_script_args.path={script}",
        ]
    )
    assert launch.script_argv()[-4:] == ["--config-path", str(CONFIGS), "--config-name", "local_cpu_config"]
