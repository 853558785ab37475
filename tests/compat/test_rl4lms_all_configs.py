"""Every one of RL4LMs' 44 task YAMLs converts and trains 2 updates on tiny stand-ins and fixture rows, or is refused.

The YAMLs are RL4LMs' own (``tests/compat/rl4lms_configs/``, copied from allenai/RL4LMs
``scripts/training/task_configs/``, Apache-2.0, as test data). What the test swaps, and why, is in
:func:`_stand_ins`: the hub models become tiny local ones, each datapool reads a few fixture rows in
its dataset's format, METEOR's synonym stage reads an empty WordNet (NLTK's WordNet data is not
installed here: exact and stem matches only), and the ``spice`` metric (Java) is left out. Every
other key is RL4LMs', converted with ``approximate=True``; what the strict conversion refuses is
counted too (``test_the_count_of_exact_and_approximate_conversions``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from llmgym.compat.rl4lms import convert_rl4lms_config
from llmgym.errors import ConfigError

CONFIGS = Path(__file__).parent / "rl4lms_configs"
ALL = sorted(p.name for p in CONFIGS.glob("*.yml"))
SUPERVISED = [n for n in ALL if n.endswith("_supervised.yml") and "_on_" not in n]
RL = [n for n in ALL if n not in SUPERVISED]
SEQ2SEQ_MARKS = ("_t5_", "_bart_", "_blendorbot_")
NEEDS_JAVA = ("spice",)

TWO_UPDATES = [
    "env.num_envs=2",
    "env.kwargs.max_tokens=2",
    "algorithm.rollout_steps=2",
    "algorithm.minibatch_size=4",
    "algorithm.epochs=1",
    "train.total_env_steps=8",
    "train.eval_every=null",
    "train.checkpoint_every=null",
    "train.eval_before=false",
    "train.eval_episodes=2",
    "train.eval_num_envs=2",
    "train.eval_max_samples=2",
    "logging.progress=false",
    "logging.plot=false",
    "agent.max_prompt_tokens=48",
    "model.forward_batch_size=8",
]


def _load(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def _jsonl(folder: Path, split: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _totto_row(test: bool) -> dict:
    cell = {"column_span": 1, "row_span": 1}
    sentence = [""] if test else ["In 1999 the film came out."]
    return {
        "table": [
            [{**cell, "value": "Year", "is_header": True}, {**cell, "value": "Title", "is_header": True}],
            [{**cell, "value": "1999", "is_header": False}, {**cell, "value": "Film", "is_header": False}],
        ],
        "highlighted_cells": [[1, 0], [1, 1]],
        "table_page_title": "Page",
        "table_section_title": "Works",
        "overlap_subset": "True",
        "sentence_annotations": {
            k: sentence
            for k in (
                "original_sentence",
                "sentence_after_deletion",
                "sentence_after_ambiguity",
                "final_sentence",
            )
        },
    }


def _fixture_rows(pool: str, folder: Path) -> None:
    """Write a few rows of ``pool``'s dataset, in its hub format, for each split."""
    splits = ("train", "validation", "test")
    if pool == "commongen":
        for split in splits:
            _jsonl(folder, split, [{"concepts": ["dog", "ball"], "target": "the dog hit the ball."}] * 3)
    elif pool in ("imdb", "imdb_seq2seq"):
        rows = [{"text": f"this film number {i} was a good one to watch", "label": i % 2} for i in range(6)]
        for split in ("train", "test"):
            _jsonl(folder, split, rows)
    elif pool == "daily_dialog":
        row = {"dialog": ["Hi .", "Hello !", "How are you ?", "Fine .", "Good .", "Bye .", "See you ."]}
        row.update(emotion=[0] * 7, act=[1, 2, 3, 4, 1, 2, 3])
        for split in splits:
            _jsonl(folder, split, [row])
    elif pool in ("iwslt2017en_de", "wmt16"):
        for split in splits:
            _jsonl(folder, split, [{"translation": {"en": "Hello there", "de": "Hallo da"}}] * 3)
    elif pool == "cnn_daily_mail":
        for split in splits:
            _jsonl(folder, split, [{"article": "Some news, told here at length.", "highlights": "News."}] * 3)
    elif pool == "totto":
        for split in splits:
            _jsonl(folder, split, [_totto_row(split == "test")] * 3)
    elif pool == "narrative_qa":
        folder.mkdir(parents=True, exist_ok=True)
        for split in ("train", "dev", "test"):
            (folder / f"{split}.tsv").write_text(
                "Who? \\n Alice met Bob.\tAlice\nWhere? \\n in town.\ttown\n"
            )
    elif pool not in ("dummy_pool",):
        raise AssertionError(f"no fixture rows for datapool {pool!r}")


class _NoSynonyms:
    """A WordNet without entries: METEOR's synonym stage matches nothing (exact and stem matches remain)."""

    def synsets(self, word, pos=None):  # noqa: D102
        return []


@pytest.fixture(autouse=True)
def _empty_wordnet(monkeypatch):
    from llmgym.envs import text_scores

    monkeypatch.setattr(text_scores, "_wordnet", _NoSynonyms)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """Tiny local models for RL4LMs' hub ones: a causal LM, a T5, a 2-label and a 4-label classifier."""
    from llmgym.testing import save_tiny_classifier, save_tiny_model

    root = tmp_path_factory.mktemp("stand_ins")
    return {
        "causal": str(save_tiny_model(root / "causal", kind="gpt2")),
        "seq2seq": str(save_tiny_model(root / "t5", kind="t5")),
        "sentiment": str(save_tiny_classifier(root / "sentiment", num_labels=2)),
        "intent": str(save_tiny_classifier(root / "intent", num_labels=4, seed=1)),
    }


def _stand_ins(raw: dict, models: dict, data: Path) -> tuple[dict, str]:
    """RL4LMs' config with tiny local models and fixture rows; returns it and the policy model used."""
    model = models["seq2seq"] if any(m in raw["_name"] for m in SEQ2SEQ_MARKS) else models["causal"]
    pool = raw["datapool"]["id"]
    _fixture_rows(pool, data / pool)
    if pool != "dummy_pool":
        raw["datapool"]["args"] = {**(raw["datapool"].get("args") or {}), "data_dir": str(data / pool)}
    reward = raw["reward_fn"]
    args = reward.setdefault("args", {}) or {}
    reward["args"] = args
    if reward["id"] == "learned_reward":
        args["model_name"] = models["sentiment"]
    if reward["id"] == "intent_accuracy":
        args["model_name"] = models["intent"]
    if reward["id"] == "common_gen_preference_model":
        args["model_name"] = models["seq2seq"]
    metrics = []
    for metric in raw["train_evaluation"].get("metrics") or []:
        margs = dict(metric.get("args") or {})
        if metric["id"] in NEEDS_JAVA:
            continue
        if metric["id"] == "bert_score":
            margs.update(model_type=models["sentiment"], num_layers=1)
        if metric["id"] == "learned_reward":
            margs["model_name"] = models["sentiment"]
        if metric["id"] == "intent_accuracy":
            margs["model_name"] = models["intent"]
        if metric["id"] == "causal_perplexity":
            margs["tokenizer_id"] = model
        metrics.append({"id": metric["id"], "args": margs})
    raw["train_evaluation"]["metrics"] = metrics
    del raw["_name"]
    return raw, model


def _converted(name: str, models: dict, tmp_path: Path):
    raw = {**_load(name), "_name": name}
    raw, model = _stand_ins(raw, models, tmp_path / "data")
    return convert_rl4lms_config(raw, approximate=True, model_name=model), model


@pytest.mark.parametrize("name", SUPERVISED)
def test_supervised_configs_are_refused_with_the_sft_command(name):
    raw = _load(name)
    with pytest.raises(
        ConfigError, match=r"alg.id='supervised'.*llmgym sft task.yaml 'env.kwargs.datapool="
    ) as error:
        convert_rl4lms_config(raw, approximate=True, model_name="unused")
    pool = raw["datapool"]["id"]
    assert f"""'env.kwargs.datapool="{pool}"' """ in str(
        error.value
    )  # IMDB's: imdb_seq2seq, the continuation alone
    assert f"--learning-rate {raw['alg']['training_args']['learning_rate']}" in str(error.value)
    assert "no llmgym equivalent" not in str(error.value)  # T5 ones too


def _sft_command(message: str) -> list[str]:
    """The arguments of the llmgym sft command a supervised config's refusal gives, between the file and --out."""
    import re
    import shlex

    found = re.search(r"llmgym sft task\.yaml (.*?) --out FOLDER", message)
    assert found, message
    return shlex.split(found.group(1))


@pytest.mark.parametrize("name", SUPERVISED)
def test_supervised_configs_run_through_the_sft_command_their_refusal_gives(
    name, stand_ins, tmp_path, monkeypatch
):
    # What the refusal tells the user, done: convert the ppo config of the same task, run llmgym sft on it with
    # the refusal's arguments (the supervised config's datapool, its arguments, learning rate and batch size).
    from llmgym.cli import main

    raw = _load(name)
    model = stand_ins["seq2seq"] if raw["alg"]["model_type"] == "seq2seq" else stand_ins["causal"]
    pool = raw["datapool"]["id"]
    _fixture_rows(pool, tmp_path / "data" / pool)
    raw["datapool"]["args"] = {
        **(raw["datapool"].get("args") or {}),
        "data_dir": str(tmp_path / "data" / pool),
    }
    with pytest.raises(ConfigError) as error:
        convert_rl4lms_config(raw, approximate=True, model_name=model)
    arguments = _sft_command(str(error.value))
    rl, _ = _converted(name.replace("_supervised.yml", "_ppo.yml"), stand_ins, tmp_path / "rl")
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump(rl.config))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out = tmp_path / "sft"
    tiny = [f"model.name={model}", "model.dtype=float32", "model.device=cpu", "agent.max_prompt_tokens=48"]
    assert (
        main(["sft", str(task), *tiny, *arguments, "--out", str(out), "--steps", "3", "--max-length", "64"])
        == 0
    )
    meta = json.loads((out / "llmgym_sft.json").read_text())
    assert meta["datapool"] == raw["datapool"]["id"] and len(meta["losses"]) == 3
    assert meta["trainer"] == ("Seq2SeqTrainer" if raw["alg"]["model_type"] == "seq2seq" else "SFTTrainer")
    assert meta["learning_rate"] == raw["alg"]["training_args"]["learning_rate"]


@pytest.mark.parametrize("name", RL)
def test_every_rl_config_trains_two_updates_on_tiny_stand_ins(name, stand_ins, tmp_path, monkeypatch):
    from llmgym.cli import main

    conversion, model = _converted(name, stand_ins, tmp_path)
    path = tmp_path / "converted.yaml"
    path.write_text(yaml.safe_dump(conversion.config))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = ["train", str(path), f"model.name={model}", f"train.output_dir={tmp_path}", "train.run_name=run"]
    assert main([*args, *TWO_UPDATES]) == 0
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sum(1 for e in lines if e["kind"] == "train") == 2
    last = [e for e in lines if e["kind"] == "eval"][-1]
    tag = "sampled/" if conversion.config["train"]["eval_split_decoding"] == "sample" else ""
    assert f"val/{tag}episode_return" in last and f"test/{tag}episode_return" in last


def test_the_count_of_exact_and_approximate_conversions(stand_ins, tmp_path):
    # What docs/textgen.md counts: how many RL configs convert strictly, and how many name each approximated key.
    exact, counts = [], Counter()
    for name in RL:
        conversion, _ = _converted(name, stand_ins, tmp_path / name)
        keys = {line.split(":")[0] for line in conversion.approximations}
        counts.update(keys)
        if not keys:
            exact.append(name)
    assert (len(ALL), len(SUPERVISED), len(RL)) == (44, 6, 38)
    # min_length maps exactly onto agent.min_new_tokens; an evaluation without generation_kwargs, or sampling
    # with the rollouts' own settings, onto train.eval_split_decoding: sample
    assert exact == [
        "common_gen_t5_nlpo.yml",
        "dialog_gpt2_nlpo.yml",
        "dialog_gpt2_nlpo_on_supervised.yml",
        "dialog_gpt2_ppo.yml",
        "dialog_gpt2_ppo_on_supervised.yml",
        "imdb_text_continuation_gpt2_nlpo.yml",
        "imdb_text_continuation_gpt2_nlpo_on_supervised.yml",
        "imdb_text_continuation_gpt2_ppo.yml",
        "imdb_text_continuation_gpt2_ppo_on_supervised.yml",
        "synthetic_generate_dates_gpt2_ppo.yml",
        "synthetic_generate_increasing_numbers_gpt2_nlpo.yml",
        "synthetic_generate_increasing_numbers_gpt2_ppo.yml",
        "synthetic_generate_increasing_numbers_gpt2_trpo.yml",
        "synthetic_generate_increasing_numbers_t5_nlpo.yml",
        "synthetic_generate_increasing_numbers_t5_ppo.yml",
    ]
    assert (
        dict(counts)
        == {
            "train_evaluation.generation_kwargs.num_beams": 15,
            "train_evaluation.generation_kwargs.top_k": 4,  # summarization: top_k 0 where its rollouts cut to 50 or 100
            "train_evaluation.generation_kwargs.temperature": 4,  # summarization: 0.7
            "train_evaluation.generation_kwargs.length_penalty": 4,
            "alg.args.use_rms_prop": 2,
            "alg.policy.args.prompt_truncation_side": 2,  # NarrativeQA NLPO: rollouts cut right, evaluation left
            "env.args.context_start_token": 2,  # BART's and Blenderbot's decoder start, not the tiny T5's
        }
    )
