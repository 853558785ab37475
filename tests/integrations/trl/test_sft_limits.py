"""llmgym sft refuses what would write a broken model: non-finite learning rates and weights, examples over the window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgym.cli import main
from llmgym.config import load_config
from llmgym.errors import ConfigError, NonFiniteError
from llmgym.integrations.trl.sft import SFTSettings, run_sft
from llmgym.testing import save_tiny_model, tiny_causal_lm

TINY = ["model.dtype=float32", "model.device=cpu", "model.lora.layers=null", "train.seed=0"]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("sft") / "tiny")


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("sft") / "gpt2", kind="gpt2")


@pytest.fixture()
def long_pool(tmp_path: Path) -> Path:
    """Two samples whose references are 3,000 words: far over the tiny models' 512 positions."""
    path = tmp_path / "long.jsonl"
    rows = [{"prompt": f"Story {i}:", "references": [" ".join(["word"] * 3000)]} for i in range(2)]
    rows.append({"prompt": "Short:", "references": ["yes"]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("rate", ["inf", "nan", "-1", "0"])
def test_a_non_finite_or_non_positive_learning_rate_is_refused_while_parsing(rate, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["sft", "textgen_ppo", "--out", str(tmp_path / "out"), "--learning-rate", rate])
    assert exit_info.value.code == 2
    assert "--learning-rate" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rate", [float("inf"), float("nan")])
def test_sft_settings_refuse_a_non_finite_learning_rate(rate, tmp_path):
    with pytest.raises(ConfigError, match="finite number > 0"):
        SFTSettings(tmp_path / "out", learning_rate=rate)


def test_a_learning_rate_that_makes_the_weights_nan_writes_nothing(tiny_folder, tmp_path):
    config = load_config("textgen_ppo", [f"model.name={tiny_folder}", *TINY, "model.lora=null"])
    model, tokenizer = tiny_causal_lm()
    out = tmp_path / "sft"
    with pytest.raises(NonFiniteError, match=r"(nan|inf).*--learning-rate 1e\+12.*nothing was written"):
        run_sft(config, SFTSettings(out, max_steps=3, learning_rate=1e12), model=model, tokenizer=tokenizer)
    assert not out.exists()
    assert not list(tmp_path.iterdir())  # no temporary folder left either


@pytest.mark.parametrize("fixture", ["tiny_folder", "gpt2_folder"])
def test_examples_over_the_window_are_refused_naming_length_window_and_fix(
    fixture, long_pool, tmp_path, request
):
    folder = request.getfixturevalue(fixture)
    config = load_config("textgen_ppo", [f"model.name={folder}", *TINY, f"env.kwargs.datapool={long_pool}"])
    with pytest.raises(ConfigError, match=r"2 of 3 examples .* window of 512 positions .* --max-length 512"):
        run_sft(config, SFTSettings(tmp_path / "out", max_steps=1))
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="exceeds the model's context window of 512"):
        run_sft(config, SFTSettings(tmp_path / "out", max_steps=1, max_length=513))


def test_max_length_cuts_long_examples_with_a_message(gpt2_folder, long_pool, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "sft",
            "textgen_ppo",
            f"model.name={gpt2_folder}",
            *TINY,
            f"env.kwargs.datapool={long_pool}",
            "--out",
            str(out),
            "--steps",
            "1",
            "--max-length",
            "64",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "2 examples cut to --max-length 64 tokens, 0 left out" in capsys.readouterr().out
    meta = json.loads((out / "llmgym_sft.json").read_text())
    assert (meta["max_length"], meta["truncated"], meta["dropped"]) == (64, 2, 0)


@pytest.fixture()
def tiny_t5():
    """A tiny T5 whose tokenizer states t5-base's model_max_length of 512 (T5 has relative positions)."""
    from llmgym.testing import tiny_seq2seq_lm

    model, tokenizer = tiny_seq2seq_lm()
    tokenizer.model_max_length = 512
    return model, tokenizer


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("sft") / "t5", kind="t5")


def test_a_t5_whose_weights_become_nan_writes_nothing(t5_folder, tiny_t5, tmp_path):
    config = load_config("textgen_ppo", [f"model.name={t5_folder}", *TINY, "model.lora=null"])
    model, tokenizer = tiny_t5
    out = tmp_path / "sft"
    with pytest.raises(NonFiniteError, match=r"(nan|inf).*--learning-rate 1e\+12.*nothing was written"):
        run_sft(config, SFTSettings(out, max_steps=3, learning_rate=1e12), model=model, tokenizer=tokenizer)
    assert not list(tmp_path.iterdir())


def test_t5_references_over_the_limit_are_refused_or_cut_to_max_length(
    t5_folder, tiny_t5, long_pool, tmp_path
):
    config = load_config(
        "textgen_ppo",
        [f"model.name={t5_folder}", *TINY, "model.lora=null", f"env.kwargs.datapool={long_pool}"],
    )
    model, tokenizer = tiny_t5
    with pytest.raises(
        ConfigError, match=r"2 of 3 examples .* longer than the 512 positions .* --max-length 512"
    ):
        run_sft(config, SFTSettings(tmp_path / "out", max_steps=1), model=model, tokenizer=tokenizer)
    with pytest.raises(ConfigError, match="exceeds the 512 positions the model takes"):
        run_sft(
            config,
            SFTSettings(tmp_path / "out", max_steps=1, max_length=513),
            model=model,
            tokenizer=tokenizer,
        )
    assert not (tmp_path / "out").exists()
    result = run_sft(
        config, SFTSettings(tmp_path / "out", max_steps=1, max_length=64), model=model, tokenizer=tokenizer
    )
    assert (result.truncated, result.dropped, result.num_examples) == (2, 0, 3)


def test_seq2seq_max_length_cuts_references_and_leaves_out_longer_prompts():
    from llmgym.integrations.trl.sft import SFTExample, fit_seq2seq_examples

    short = SFTExample([1, 2, 3, 4], [0, 0, 1, 1])
    long_reference = SFTExample([1, 5, 6, 7, 8], [0, 1, 1, 1, 1])
    long_prompt = SFTExample([1, 2, 3, 4, 9], [0, 0, 0, 0, 1])
    kept, truncated, dropped = fit_seq2seq_examples([short, long_reference, long_prompt], 8, "test", 3)
    assert [(e.prompt_ids, e.completion_ids) for e in kept] == [([1, 2], [3, 4]), ([1], [5, 6, 7])]
    assert (truncated, dropped) == (1, 1)
    with pytest.raises(ConfigError, match="every prompt is longer than --max-length 1"):
        fit_seq2seq_examples([short], 8, "test", 1)


def test_causal_max_length_cuts_examples_and_leaves_out_those_with_no_reference_token_left():
    from llmgym.integrations.trl.sft import SFTExample, fit_examples

    short = SFTExample([1, 2, 3], [0, 1, 1])
    long = SFTExample([1, 2, 5, 6, 7], [0, 0, 1, 1, 1])
    prompt_fills = SFTExample([1, 2, 3, 4, 9], [0, 0, 0, 0, 1])
    kept, truncated, dropped = fit_examples([short, long, prompt_fills], None, 3)
    assert [(e.input_ids, e.completion_mask) for e in kept] == [
        ([1, 2, 3], [0, 1, 1]),
        ([1, 2, 5], [0, 0, 1]),
    ]
    assert (truncated, dropped) == (1, 1)
    with pytest.raises(ConfigError, match="every prompt fills --max-length 2"):
        fit_examples([long], None, 2)
    with pytest.raises(ConfigError, match="1 of 2 examples are longer than the model's context window of 4"):
        fit_examples([short, long], 4, None)
