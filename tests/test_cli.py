"""Subprocess smoke runs of every CLI command and every shipped config (tiny model)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgym.config import shipped_configs

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = list(shipped_configs())  # names: llmgym train NAME resolves them from the package


def run(*args, input_text=None, check=True, cwd=ROOT):
    # PYTHONPATH: this checkout's llmgym, also when the command runs in another directory.
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "llmgym.cli", *args],
        capture_output=True,
        text=True,
        input=input_text,
        env=env,
        cwd=cwd,
        timeout=240,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_envs_lists_every_registered_env_and_marks_the_extras():
    out = run("envs").stdout
    assert "llmgym/BabyAI-Text-GoToRedBall-v0" in out and "llmgym/Blackjack-Text-v0" in out
    assert all(len(line.split(None, 1)) == 2 for line in out.strip().splitlines())
    marked = [line.split()[0] for line in out.splitlines() if "pip install" in line]
    suites = {"TextWorld": 10, "TextArena": 59, "ScienceWorld": 31}
    for suite, count in suites.items():
        lines = [line for line in out.splitlines() if line.startswith(f"llmgym/{suite}-")]
        extra = suite.lower()
        assert len(lines) == count and all(
            f"needs pip install 'llmgym[{extra}]'" in line for line in lines
        ), suite
    # minigrid is a core dependency: BabyAI needs no extra
    assert [i for i in marked if not i.startswith(tuple(f"llmgym/{s}-" for s in suites))] == [
        "llmgym/TextGen-v0"
    ]
    assert "pip install 'llmgym[metrics]' for reward=bleu or reward=sacre_bleu" in out


def test_train_help_shows_every_field_help():
    out = run("train", "--help").stdout
    assert "algorithm.learning_rate" in out and "Learning rate of the LLM" in out and "model.lora.r" in out


def test_config_prints_resolved_yaml_and_reference(tmp_path):
    out = run("config", CONFIGS[0], "train.seed=9").stdout
    assert "seed: 9" in out
    markdown = run("config", "--markdown").stdout
    assert markdown.startswith("# Config reference") and "| `env.num_envs` |" in markdown
    assert (ROOT / "docs" / "config.md").read_text() == markdown, (
        "docs/config.md is stale: llmgym config --markdown > docs/config.md"
    )


def test_config_and_train_read_an_rl4lms_task_file_converted(tiny_model_dir, tmp_path):
    # the schema (llmgym.config.load_config) knows no RL4LMs: the commands convert it (llmgym.run)
    path = ROOT / "tests" / "compat" / "rl4lms_configs" / "synthetic_generate_increasing_numbers_gpt2_ppo.yml"
    out = run("config", str(path), f"model.name={tiny_model_dir}", "train.seed=4").stdout
    assert "kl:" in out and "controller: adaptive" in out and "seed: 4" in out
    args = ["train", str(path), f"model.name={tiny_model_dir}", "env.id=llmgym/EchoWrd-v0"]
    proc = _main_in_subprocess([*args, f"train.output_dir={tmp_path}"])
    # the conversion prints its approximations (RL4LMs' separate value model) before the error line
    last = proc.stderr.splitlines()[-1]
    assert proc.returncode == 2 and last.startswith("llmgym train: error: env id 'llmgym/EchoWrd-v0'")


def test_config_list_and_show_the_shipped_configs(tmp_path):
    listed = dict(line.split(None, 1) for line in run("config", "list").stdout.splitlines())
    assert list(listed) == CONFIGS
    assert listed["quickstart"].startswith("The default run of `make train`")
    text = (ROOT / "llmgym" / "configs" / "quickstart.yaml").read_text()
    assert run("config", "show", "quickstart", cwd=tmp_path).stdout == text  # from any directory
    assert run("config", "show", "quickstart.yaml").stdout == text
    proc = run("config", "show", "quickstrt", check=False)
    assert (
        proc.returncode == 2 and "Did you mean 'quickstart'?" in proc.stderr and "textgen_a2c" in proc.stderr
    )


def test_a_config_file_that_exists_wins_over_a_shipped_name(tmp_path):
    (tmp_path / "quickstart.yaml").write_text("train:\n  seed: 77\n")
    assert "seed: 77" in run("config", "quickstart.yaml", cwd=tmp_path).stdout
    assert "seed: 77" not in run("config", "quickstart", cwd=tmp_path).stdout  # no file of that name: shipped


def test_bad_override_is_a_clear_error_not_a_traceback():
    proc = run("train", CONFIGS[0], "algorithm.learnin_rate=1", check=False)
    assert proc.returncode == 2
    assert "Did you mean 'algorithm.learning_rate'" in proc.stderr and "Traceback" not in proc.stderr


def test_train_resume_flag_is_train_resume_auto_and_not_both():
    proc = run("train", CONFIGS[0], "--resume", "train.resume=runs/x", check=False)
    assert proc.returncode == 2 and "--resume is train.resume=auto" in proc.stderr
    proc = run("train", CONFIGS[0], "--resume", check=False)  # auto needs the run's name
    assert proc.returncode == 2 and "train.resume=auto" in proc.stderr and "train.run_name" in proc.stderr


def test_play_reads_actions_from_stdin():
    out = run("play", "llmgym/EchoWord-v0", "--seed", "0", input_text="0\n").stdout
    assert "Say the word" in out and "episode over" in out


def test_play_an_unknown_env_is_one_line_naming_close_matches():
    proc = run("play", "llmgym/EchoWrd-v0", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("llmgym play: error: ")
    assert "'llmgym/EchoWord-v0'" in proc.stderr and "`llmgym envs`" in proc.stderr


def _main_in_subprocess(args, setup=""):
    """Run ``llmgym.cli.main(args)``; stdout's last line tells whether torch got imported."""
    code = f"import sys; {setup}\nfrom llmgym.cli import main\nrc = main({list(args)!r})\nprint('torch' in sys.modules)\nsys.exit(rc)"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )


def test_train_checks_the_env_before_torch_the_model_or_the_run_directory(tmp_path):
    args = ["train", "env.id=llmgym/EchoWrd-v0", "model.name=/no/such/model", f"train.output_dir={tmp_path}"]
    proc = _main_in_subprocess(args)
    assert (
        proc.returncode == 2 and proc.stdout.strip() == "False"
    )  # failed before importing torch (in ~0.4 s)
    assert (
        proc.stderr.startswith("llmgym train: error: env id 'llmgym/EchoWrd-v0'")
        and proc.stderr.count("\n") == 1
    )
    assert "'llmgym/EchoWord-v0'" in proc.stderr and "`llmgym envs`" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("hidden", "overrides", "extra"),
    [
        ("sacrebleu", ["env.id=llmgym/TextGen-v0", "env.kwargs.reward=bleu"], "metrics"),
        ("tensorboard", ["logging.tensorboard=true"], "tensorboard"),
    ],
)
def test_train_reports_a_missing_extra_before_loading(tmp_path, hidden, overrides, extra):
    hide = f"sys.modules[{hidden!r}] = None"  # what an install without the extra looks like
    proc = _main_in_subprocess(["train", *overrides, f"train.output_dir={tmp_path}"], hide)
    assert proc.returncode == 2 and proc.stdout.strip() == "False" and list(tmp_path.iterdir()) == []
    assert (
        f"needs the optional package '{hidden}'" in proc.stderr
        and f"pip install 'llmgym[{extra}]'" in proc.stderr
    )


def test_play_reports_a_missing_minigrid():
    proc = _main_in_subprocess(
        ["play", "llmgym/BabyAI-Text-GoToRedBall-v0"], "sys.modules['minigrid'] = None"
    )
    assert proc.returncode == 2 and "llmgym[babyai]" in proc.stderr and "Traceback" not in proc.stderr


def test_launch_and_bench_usage_errors():
    proc = run("launch", "train", "quickstart", check=False)  # removed: the error names the Ray way
    assert (
        proc.returncode == 2
        and "distributed.llm_processes=2" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    proc = run("bench", "no-such-benchmark", check=False)
    assert proc.returncode == 2 and "Available:" in proc.stderr and "score" in proc.stderr
    proc = run("eval", "some-run", "--episodes", "2", "not-an-override", check=False)
    assert proc.returncode == 2 and "unrecognized arguments: not-an-override" in proc.stderr


SMOKE = [
    "train.total_env_steps=8",
    "env.num_envs=2",
    "algorithm.rollout_steps=4",
    "algorithm.epochs=1",
    "algorithm.minibatch_size=4",
    "train.eval_episodes=2",
    "train.eval_every=null",
    "train.checkpoint_every=null",
    "logging.progress=false",
    "agent.max_prompt_tokens=256",
    "agent.max_new_tokens=4",
    "model.forward_batch_size=8",
    "env.max_episode_steps=4",
    "algorithm.group.size=2",
]


def test_bench_outside_a_source_checkout_says_it_needs_one():
    assert "source checkout" in " ".join(run("bench", "--help").stdout.split())
    proc = _main_in_subprocess(
        ["bench", "score"], "import llmgym.cli; llmgym.cli._benchmarks_dir = lambda: None"
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(
        "llmgym bench: error: llmgym bench runs the scripts in benchmarks/ of a source checkout"
    )
    assert "pip install -e ." in proc.stderr


# In-process (llmgym.cli.main, what the console script calls): a subprocess per command would spend
# ~10 s per config importing torch and transformers; the subprocess path is smoke-run above and below.
@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_trains_and_evaluates(config, tiny_model_dir, tmp_path, monkeypatch, capsys):
    from llmgym.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = [
        "train",
        config,
        f"model.name={tiny_model_dir}",
        f"train.output_dir={tmp_path}",
        "train.run_name=run",
        *SMOKE,
    ]
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    run_dir = tmp_path / "run"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "train" for r in records) and any(r["kind"] == "eval" for r in records)
    assert (run_dir / "learning_curve.png").is_file()
    capsys.readouterr()
    assert (
        main(["eval", str(run_dir), "--episodes", "2", "env.max_episode_steps=3"]) == 0
    )  # overrides after options
    out = capsys.readouterr().out
    assert "success rate" in out and "greedy" in out


def test_scripts_wrap_the_cli(tiny_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [
        f"model.name={tiny_model_dir}",
        f"train.output_dir={tmp_path}",
        "train.run_name=s",
        "env.id=llmgym/EchoWord-v0",
        *SMOKE,
    ]
    subprocess.run(
        [sys.executable, "scripts/train.py", *args],
        check=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=240,
    )
    proc = subprocess.run(
        [sys.executable, "scripts/evaluate.py", str(tmp_path / "s"), "--episodes", "2", "--sample"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0 and "success rate" in proc.stdout and "sampled at temperature" in proc.stdout
