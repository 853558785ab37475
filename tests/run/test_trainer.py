"""Trainer: logs, evaluation, checkpoints, exact resume."""

import dataclasses
import json
import logging
import re
import shutil

import pytest
import torch

from llmgym.errors import CheckpointError, ConfigError
from llmgym.report.runs import read_metrics
from llmgym.run.trainer import Trainer, evaluate_run, evaluation_summary, run_training
from llmgym.testing import tiny_causal_lm
from tests.algorithms.helpers import tiny_config
from tests.algorithms.test_nlpo import TOKEN_TEXTGEN

COUNTDOWN = ["env.kwargs.length=2", "algorithm.rollout_steps=4", "env.num_envs=2"]


def _trainer(config, run_dir=None):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return Trainer(config, run_dir, model=model, tokenizer=tokenizer)


def _params(trainer):
    return [p.detach().clone() for p in trainer.llm.backend.trainable_parameters()]


def test_train_writes_config_metrics_eval_checkpoint_and_plot(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *COUNTDOWN,
        "train.total_env_steps=16",
        "train.run_name=r",
        "train.eval_episodes=4",
        "train.eval_before=true",
        "logging.plot=true",
        "train.eval_every=8",
    )
    trainer = _trainer(config)
    summary = trainer.train()
    trainer.close()
    run = tmp_path / "r"
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "latest").is_file()
    records = read_metrics(run / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["env_steps"] for r in train] == [8, 16]
    assert [r["env_steps"] for r in evals] == [0, 8, 16]
    assert {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "steps_per_s"} <= train[-1].keys()
    assert summary["learning_curve"] == str(run / "learning_curve.png")
    assert (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_without_eval_before_only_the_final_evaluation_is_printed(tmp_path, capsys):
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *COUNTDOWN,
        "train.total_env_steps=4",
        "train.run_name=a",
        "train.eval_episodes=2",
        "train.eval_before=false",
    )
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    summary = run_training(config, model=model, tokenizer=tokenizer)
    assert [e["label"] for e in summary["evaluations"]] == ["after"]
    lines = [line for line in capsys.readouterr().out.splitlines() if "success" in line]
    assert len(lines) == 1 and re.fullmatch(
        r"success rate: after [\d.]+ \(mean return [-\d.]+, 2 greedy episodes\)", lines[0]
    )


def test_evaluation_summary_compares_with_the_before_evaluation_only():
    def ev(label, rate):
        return {
            "label": label,
            "success_rate": rate,
            "episode_return": rate,
            "episodes": 4.0,
            "sampled_success_rate": rate / 2,
            "sampled_episode_return": rate / 2,
        }

    assert evaluation_summary([], 1.0) == []
    assert evaluation_summary([ev("periodic", 0.25), ev("after", 0.5)], 2.0) == [
        "success rate: after 0.500 (mean return 0.500, 4 greedy episodes)",
        "sampled at temperature 2: after 0.250 (mean return 0.250)",
    ]
    assert evaluation_summary([ev("before", 0.0), ev("periodic", 0.25), ev("after", 0.5)], 1.0)[0] == (
        "success rate: before 0.000 -> after 0.500 (mean return 0.000 -> 0.500, 4 greedy episodes)"
    )
    text = {"perplexity_ref": 30.0, "distinct-2": 0.8, "sampled_kl_ref": 0.0}
    after = {**ev("after", 0.5), **text, "perplexity_ref": 33.0, "sampled_kl_ref": 1.5}
    assert evaluation_summary([{**ev("before", 0.0), **text}, after], 1.0)[2] == (
        "fluency: perplexity under the reference 30.000 -> 33.000, distinct-2 0.800 -> 0.800, "
        "KL to the reference 0.000 -> 1.500"
    )


def test_eval_sample_also_evaluates_the_sampled_policy_reproducibly(tmp_path, capsys):
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *COUNTDOWN,
        "train.total_env_steps=8",
        "train.run_name=s",
        "train.eval_episodes=6",
        "train.eval_before=true",
        "train.eval_sample=true",
        "agent.temperature=3.0",
    )
    trainer = _trainer(config)
    first, second = trainer.evaluate("a"), trainer.evaluate("b")
    trainer.close()
    sampled = {"sampled_success_rate", "sampled_episode_return", "sampled_episode_length"}
    assert sampled <= first.keys()
    assert all(first[k] == second[k] for k in sampled)

    model, tokenizer = tiny_causal_lm("llama", seed=0)
    again = dataclasses.replace(
        config, train=dataclasses.replace(config.train, run_name="s2")
    )  # a new run: a new folder
    summary = run_training(again, model=model, tokenizer=tokenizer)
    assert all(sampled <= e.keys() for e in summary["evaluations"])
    assert "sampled at temperature 3: before " in capsys.readouterr().out


# The second case trains LoRA on the top block only, so passes run from the frozen-trunk cache,
# with several contexts packed per row. Saving empties that cache (as loading does), so the
# uninterrupted run writes its checkpoint at step 16 too, as a run that later crashes would have.
@pytest.mark.parametrize(
    "model",
    [[], ["model.lora.r=4", "model.lora.layers=[-1]", "model.trunk_cache_mb=64", "model.row_tokens=512"]],
    ids=["full", "lora-top"],
)
def test_resume_equals_uninterrupted_training(tmp_path, model):
    base = [*COUNTDOWN, "algorithm.epochs=2", "algorithm.minibatch_size=4", *model]
    straight = _trainer(
        tiny_config(
            tmp_path,
            "llmgym/Countdown-v0",
            *base,
            "train.total_env_steps=32",
            "train.run_name=a",
            "train.checkpoint_every=16",
        )
    )
    straight.train()
    expected = _params(straight)
    straight.close()

    first = _trainer(
        tiny_config(tmp_path, "llmgym/Countdown-v0", *base, "train.total_env_steps=16", "train.run_name=b")
    )
    first.train()
    first.close()
    metrics = tmp_path / "b" / "metrics.jsonl"
    with metrics.open("a") as fh:  # logged by a run killed before its checkpoint at step 24
        fh.write(json.dumps({"kind": "train", "env_steps": 24}) + "\n")
    (tmp_path / "b" / "checkpoints" / ".step-0000000024-tmp-x").mkdir()  # and its half-written checkpoint
    resumed = _trainer(
        tiny_config(
            tmp_path,
            "llmgym/Countdown-v0",
            *base,
            "train.total_env_steps=32",
            f"train.resume={tmp_path / 'b'}",
        )
    )
    assert resumed.algorithm.env_steps == 16
    resumed.train()
    got = _params(resumed)
    resumed.close()
    assert all(torch.allclose(a, b, atol=0, rtol=0) for a, b in zip(expected, got))
    state = json.loads(
        (tmp_path / "b" / "checkpoints" / "step-0000000032" / "trainer_state.json").read_text()
    )
    assert state["algorithm"]["env_steps"] == 32
    assert [r["env_steps"] for r in read_metrics(metrics) if r["kind"] == "train"] == [8, 16, 24, 32]
    assert not [p for p in (tmp_path / "b" / "checkpoints").iterdir() if p.name.startswith(".")]


SOURCE = [*COUNTDOWN, "model.lora.r=4", "train.total_env_steps=16", "train.checkpoint_every=8"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A LoRA run of 16 env steps with checkpoints at 8 and 16 (copy it before changing it)."""
    root = tmp_path_factory.mktemp("runs")
    trainer = _trainer(tiny_config(root, "llmgym/Countdown-v0", *SOURCE, "train.run_name=src"))
    trainer.train()
    trainer.close()
    return root / "src"


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _resume_config(tmp_path, run, *overrides):
    return tiny_config(
        tmp_path, "llmgym/Countdown-v0", *SOURCE, "train.run_name=src", f"train.resume={run}", *overrides
    )


def test_resume_without_the_optimizer_state_is_refused_naming_the_file(trained_run, tmp_path):
    run = _copy(trained_run, tmp_path)
    for step in (8, 16):
        (run / "checkpoints" / f"step-{step:010d}" / "llm" / "updater.pt").unlink()
    with pytest.raises(
        CheckpointError,
        match=r"(?s)step-0000000016/llm/updater.pt is missing.*step-0000000008/llm/updater.pt",
    ):
        _trainer(_resume_config(tmp_path, run))


def test_resume_falls_back_to_the_older_checkpoint_and_trims_the_metrics(trained_run, tmp_path, caplog):
    run = _copy(trained_run, tmp_path)
    (run / "checkpoints" / "step-0000000016" / "llm" / "updater.pt").write_bytes(b"corrupted")
    with caplog.at_level(logging.WARNING):
        trainer = _trainer(_resume_config(tmp_path, run))
    trainer.close()
    assert trainer.algorithm.env_steps == 8
    assert "older checkpoint" in caplog.text and "updater.pt is corrupted" in caplog.text
    assert [r["env_steps"] for r in read_metrics(run / "metrics.jsonl")] == [8]


def test_resume_refuses_config_changes_naming_each_old_and_new_value(trained_run, tmp_path):
    run = _copy(trained_run, tmp_path)
    saved = (run / "config.yaml").read_text()
    changes = {
        "model.lora.r": (4, 8),
        "env.num_envs": (2, 4),
        "train.seed": (0, 1),
        "algorithm.learning_rate": (0.003, 0.001),
        "env.id": ("'llmgym/Countdown-v0'", "'llmgym/EchoWord-v0'"),
    }
    with pytest.raises(ConfigError) as info:
        _trainer(
            _resume_config(tmp_path, run, *(f"{k}={new}".replace("'", "") for k, (_, new) in changes.items()))
        )
    for key, (old, new) in changes.items():
        assert f"{key}: {old} -> {new}" in str(info.value)
    assert (run / "config.yaml").read_text() == saved


def test_resume_accepts_a_longer_run_and_other_harmless_changes(trained_run, tmp_path, caplog):
    run = _copy(trained_run, tmp_path)
    with caplog.at_level(logging.WARNING, logger="llmgym.checkpoint"):
        trainer = _trainer(_resume_config(tmp_path, run, "train.total_env_steps=24", "logging.log_every=2"))
    trainer.close()
    assert trainer.algorithm.env_steps == 16
    [line] = caplog.messages
    assert (
        "changed settings: train.total_env_steps: 16 -> 24;" in line and "logging.log_every: 1 -> 2" in line
    )


def test_resume_without_checkpoint_is_clear(tmp_path):
    config = tiny_config(tmp_path, "llmgym/Countdown-v0", *COUNTDOWN, f"train.resume={tmp_path / 'none'}")
    with pytest.raises(CheckpointError, match="No checkpoint"):
        _trainer(config)


def test_resume_auto_starts_a_new_name_and_continues_an_existing_one(trained_run, tmp_path):
    fresh = _trainer(
        tiny_config(tmp_path, "llmgym/Countdown-v0", *SOURCE, "train.run_name=new", "train.resume=auto")
    )
    fresh.close()
    assert fresh.run_dir == tmp_path / "new" and fresh.algorithm.env_steps == 0
    _copy(trained_run, tmp_path)  # tmp_path/run: 16 env steps, checkpoints at 8 and 16
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *SOURCE,
        "train.run_name=run",
        "train.resume=auto",
        "train.total_env_steps=24",
    )
    resumed = _trainer(config)
    assert resumed.run_dir == tmp_path / "run" and resumed.algorithm.env_steps == 16
    resumed.train()
    resumed.close()
    assert [r["env_steps"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [8, 16, 24]


def test_resume_auto_restarts_a_run_stopped_before_its_first_checkpoint(trained_run, tmp_path, caplog):
    run = _copy(trained_run, tmp_path)
    shutil.rmtree(run / "checkpoints")  # killed (SIGKILL) before its first checkpoint
    config = tiny_config(tmp_path, "llmgym/Countdown-v0", *SOURCE, "train.run_name=run", "train.resume=auto")
    with caplog.at_level(logging.WARNING):
        trainer = _trainer(config)
    assert trainer.algorithm.env_steps == 0 and "starting it again" in caplog.text
    trainer.train()
    trainer.close()
    assert [r["env_steps"] for r in read_metrics(run / "metrics.jsonl")] == [8, 16]  # no record twice
    shutil.rmtree(run / "checkpoints")
    with pytest.raises(ConfigError, match=r"model.lora.r: 4 -> 8"):  # another run under that name
        _trainer(
            tiny_config(
                tmp_path,
                "llmgym/Countdown-v0",
                *SOURCE,
                "train.run_name=run",
                "train.resume=auto",
                "model.lora.r=8",
            )
        )


def test_resume_auto_refuses_a_folder_that_holds_no_run(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    config = tiny_config(
        tmp_path, "llmgym/Countdown-v0", *COUNTDOWN, "train.run_name=mine", "train.resume=auto"
    )
    with pytest.raises(ConfigError, match=r"holds files that are not an llmgym run \(notes.txt\)"):
        _trainer(config)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_periodic_checkpoints_are_pruned_to_keep_checkpoints(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *COUNTDOWN,
        "train.total_env_steps=40",
        "train.checkpoint_every=8",
        "train.keep_checkpoints=3",
        "train.run_name=r",
    )
    trainer = _trainer(config)
    trainer.train()
    trainer.close()
    kept = sorted(p.name for p in (tmp_path / "r" / "checkpoints").glob("step-*"))
    assert kept == ["step-0000000024", "step-0000000032", "step-0000000040"]


def test_an_unknown_env_id_fails_before_the_run_directory_and_the_model(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWrd-v0", "train.run_name=run", "model.name=/no/such/model")
    with pytest.raises(
        ConfigError, match=r"'llmgym/EchoWrd-v0' is not a registered.*'llmgym/EchoWord-v0'.*llmgym envs"
    ):
        Trainer(config)  # a model loaded first would raise ModelNotFoundError
    assert not (tmp_path / "run").exists()


def test_evaluate_run_loads_the_checkpoint(tmp_path, tiny_model_dir, capsys):
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *COUNTDOWN,
        "train.total_env_steps=8",
        "train.run_name=e",
        f"model.name={tiny_model_dir}",
    )
    trainer = Trainer(config)
    trainer.train()
    trainer.close()
    result = evaluate_run(tmp_path / "e", episodes=6, seed=5)
    assert result["episodes"] == 6.0 and 0.0 <= result["success_rate"] <= 1.0
    assert "success rate" in capsys.readouterr().out


def test_evaluate_run_of_a_config_is_the_untrained_model(tmp_path, tiny_model_dir, capsys):
    from llmgym.run.evaluation import evaluate

    trainer = Trainer(
        tiny_config(
            tmp_path, "llmgym/Countdown-v0", *COUNTDOWN, "train.run_name=z", f"model.name={tiny_model_dir}"
        )
    )
    want = evaluate(trainer.eval_agent, trainer.config, 5, seed=3)  # the model before any update
    trainer.close()
    result = evaluate_run(
        tmp_path / "z" / "config.yaml", episodes=5, seed=3
    )  # a config, not a run: zero-shot
    assert result == want and "zero-shot" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="does not exist and is not the name of a shipped config"):
        evaluate_run(tmp_path / "nowhere.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError):
        evaluate_run(tmp_path / "empty")


def test_evaluate_does_not_depend_on_the_number_of_envs(tmp_path):
    from llmgym.run.build import build_agent, build_llm
    from llmgym.run.evaluation import evaluate

    config = tiny_config(tmp_path, "llmgym/Countdown-v0", "env.kwargs.length=3")
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    llm = build_llm(config, model=model, tokenizer=tokenizer)
    results = [evaluate(build_agent(config, llm, width), config, episodes=7, seed=5) for width in (1, 3, 8)]
    assert results[0] == results[1] == results[2]
    assert results[0]["episodes"] == 7.0


def test_evaluate_reports_the_task_return_without_shaping(tmp_path):
    pytest.importorskip("minigrid")
    from llmgym.run.build import build_agent, build_llm
    from llmgym.run.evaluation import evaluate

    env = [
        "env.id=llmgym/BabyAI-Text-GoToRedBallNoDists-v0",
        "env.max_episode_steps=12",
        "agent.temperature=100",
    ]
    plain = tiny_config(tmp_path, "x", *env)
    shaped = tiny_config(tmp_path, "x", *env, "env.kwargs.reward_shaping=0.5")
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    llm = build_llm(plain, model=model, tokenizer=tokenizer)
    # Near-uniform sampled actions (the same draws in both runs) move the agent, so the shaping is not zero.
    results = [
        evaluate(build_agent(config, llm, 2), config, 6, seed=0, greedy=False) for config in (plain, shaped)
    ]
    assert results[0] == pytest.approx(results[1])


def test_resume_from_a_trainer_state_of_another_version_is_a_checkpoint_error(trained_run, tmp_path):
    from llmgym.checkpoint import write_manifest

    run = _copy(trained_run, tmp_path)
    folder = run / "checkpoints" / "step-0000000016"
    state = json.loads((folder / "trainer_state.json").read_text())
    del state["last_eval_steps"]
    (folder / "trainer_state.json").write_text(json.dumps(state))
    write_manifest(folder)
    with pytest.raises(CheckpointError, match="lacks 'last_eval_steps'.*another llmgym version"):
        _trainer(_resume_config(tmp_path, run))


def _resume_at(tmp_path, env_id, base, total, split):
    """Train ``total`` env steps in run ``a``; train ``split`` in run ``c`` and resume it to ``total``.

    Asserts that the resumed run starts at ``split`` env steps and ends with exactly the parameters of
    the uninterrupted run. (Not with ``algorithm.anneal_lr``: the first part anneals over its own
    ``total_env_steps``, ``split``, so a resume that raises the budget differs from the straight run.)

    Returns:
        The number of updates the resumed run started from.
    """
    straight = _trainer(
        tiny_config(tmp_path, env_id, *base, f"train.total_env_steps={total}", "train.run_name=a")
    )
    straight.train()
    expected = _params(straight)
    straight.close()
    first = _trainer(
        tiny_config(tmp_path, env_id, *base, f"train.total_env_steps={split}", "train.run_name=c")
    )
    first.train()
    first.close()
    resumed = _trainer(
        tiny_config(
            tmp_path, env_id, *base, f"train.total_env_steps={total}", f"train.resume={tmp_path / 'c'}"
        )
    )
    assert resumed.algorithm.env_steps == split
    updates_at_resume = resumed.algorithm.updates
    resumed.train()
    got = _params(resumed)
    resumed.close()
    assert all(torch.allclose(a, b, atol=0, rtol=0) for a, b in zip(expected, got))
    return updates_at_resume


@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_group_baselines_train_through_the_trainer_and_resume_exactly(tmp_path, algorithm):
    base = [
        "env.kwargs.words=[banana,dog]",
        f"algorithm.name={algorithm}",
        "algorithm.group.size=2",
        "agent.action_head=false",
        "algorithm.epochs=2",
        "algorithm.minibatch_size=4",
    ]
    _resume_at(tmp_path, "llmgym/EchoWord-v0", base, total=16, split=8)


def test_nlpo_trains_through_the_trainer_and_resumes_exactly(tmp_path):
    # 8 env steps per update, the mask policy refreshed after updates 2 and 4: the checkpoint after update 3
    # holds a snapshot that is neither the initial policy nor the checkpointed one, so only a restored
    # snapshot resumes exactly.
    # The adaptive KL weight in the reward changes at every update: the resumed run goes on from the checkpoint's.
    base = [
        *TOKEN_TEXTGEN,
        "algorithm.rollout_steps=2",
        "algorithm.nlpo.mask_update_interval=2",
        "algorithm.nlpo.mask_top_p=0.5",
        "algorithm.epochs=2",
        "algorithm.minibatch_size=4",
        "model.lora.r=4",
        "algorithm.kl.coef=0.5",
        "algorithm.kl.penalty=reward",
        "algorithm.kl.controller=adaptive",
        "algorithm.kl.target=0.001",
        "algorithm.kl.horizon=8",
    ]
    assert _resume_at(tmp_path, "llmgym/TextGen-v0", base, total=40, split=24) == 3


def test_trpo_trains_through_the_trainer_and_resumes_exactly(tmp_path):
    base = [
        *COUNTDOWN,
        "algorithm.name=trpo",
        "algorithm.epochs=2",
        "algorithm.minibatch_size=4",
        "model.lora.r=4",
        "algorithm.trpo.max_kl=0.05",
    ]
    _resume_at(tmp_path, "llmgym/Countdown-v0", base, total=16, split=8)
    train = [r for r in read_metrics(tmp_path / "a" / "metrics.jsonl") if r["kind"] == "train"]
    assert {"approx_kl", "step_fraction", "policy_improvement", "value_loss"} <= train[-1].keys()
    assert all(r["approx_kl"] <= 0.05 for r in train) and any(r["step_fraction"] > 0 for r in train)


def test_textgen_evaluations_report_perplexity_under_the_reference_distinct_n_and_kl(tmp_path):
    from llmgym.report.records import EpisodeRecorder
    from llmgym.run.build import build_agent, build_llm
    from llmgym.run.evaluation import evaluate

    config = tiny_config(
        tmp_path,
        "llmgym/TextGen-v0",
        "env.kwargs.datapool=review_openings",
        "env.kwargs.reward=keywords",
        "env.kwargs.reward_kwargs={keywords: [k]}",
        "agent.type=generative",
        "agent.max_new_tokens=3",
        "model.lora.r=4",
    )
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    llm = build_llm(config, model=model, tokenizer=tokenizer)
    recorder = EpisodeRecorder(6, llm.tokenizer)
    sampled = evaluate(build_agent(config, llm, 3), config, 6, seed=0, greedy=False, recorder=recorder)
    # LoRA starts at zero: the policy is its reference, so the reference's perplexity is the sampled tokens' own
    log_probs = [
        v for r in recorder.records(0, "x", 0, "sampled") for s in r.steps for v in s.token_log_probs
    ]
    assert len(log_probs) == 18
    assert sampled["perplexity_ref"] == pytest.approx(
        torch.tensor(log_probs).mean().neg().exp().item(), rel=1e-4
    )
    assert sampled["kl_ref"] == pytest.approx(0.0, abs=1e-4)
    assert 0 < sampled["distinct-1"] <= 1 and 0 < sampled["distinct-2"] <= 1
    with torch.no_grad():
        for name, param in llm.model.named_parameters():
            if "lora_B" in name:
                param.add_(0.5)
    moved = evaluate(build_agent(config, llm, 3), config, 6, seed=0, greedy=False)
    greedy = evaluate(build_agent(config, llm, 3), config, 6, seed=0)
    assert moved["kl_ref"] > 0.01
    assert {"perplexity_ref", "distinct-1", "distinct-2"} <= greedy.keys() and "kl_ref" not in greedy
