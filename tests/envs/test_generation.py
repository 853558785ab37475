from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest

from llmgym.envs import (
    get_reward,
    list_rewards,
    load_datapool,
    register_datapool,
    register_reward,
    text_scores,
)
from llmgym.envs.datapools import Sample
from llmgym.envs.generation import TextGenEnv
from llmgym.envs.registration import ENV_SPECS, check_env_id
from llmgym.errors import ConfigError, InputError, InvalidActionError, MissingDependencyError


def test_rewards_against_hand_values():
    assert get_reward("exact_match")("p", "  Paris ", ["Paris"]) == 1.0
    assert get_reward("exact_match")("p", "paris", ["Paris"]) == 0.0
    assert get_reward("exact_match", ignore_case=True)("p", "paris", ["Paris"]) == 1.0
    assert get_reward("contains_reference")("p", "It is PARIS, France", ["Paris"]) == 1.0
    assert get_reward("keywords", keywords=["cat", "dog", "fox"])(
        "p", "A Cat and a dog", []
    ) == pytest.approx(2 / 3)
    assert get_reward("keywords")("p", "red and blue", ["red", "green"]) == 0.5
    assert get_reward("length_penalty", target_length=4)("p", "one two three four", []) == 0.0
    assert get_reward("length_penalty", target_length=4)("p", "one two", []) == -0.5
    assert get_reward("sentiment")("p", "A great, wonderful film", []) == 1.0
    assert get_reward("sentiment")("p", "great acting but a boring, dull plot", []) == pytest.approx(-1 / 3)
    assert get_reward("sentiment")("p", "a film", []) == 0.0


def test_bleu_and_rouge():
    pytest.importorskip("sacrebleu")
    pytest.importorskip("rouge_score")
    ref = "the cat sat on the mat"
    assert get_reward("bleu")("p", ref, [ref]) == pytest.approx(1.0)
    assert get_reward("bleu")("p", "dogs run fast", [ref]) < 0.1
    assert get_reward("rouge")("p", ref, [ref]) == pytest.approx(1.0)
    # ROUGE-L of "the cat sat" vs the reference: LCS 3, precision 1, recall 3/6 -> F = 2/3.
    assert get_reward("rouge")("p", "the cat sat", [ref]) == pytest.approx(2 / 3)
    assert get_reward("rouge", rouge_type="rouge1")("p", "mat cat", [ref]) == pytest.approx(
        2 * (1 * 2 / 6) / (1 + 2 / 6)
    )


@pytest.mark.parametrize("extra", next(e for e in ENV_SPECS if e.id == "llmgym/TextGen-v0").extras)
def test_textgen_extras_match_the_rewards_and_are_checked_before_making(monkeypatch, extra):
    for name in [extra.module, *(m for m in sys.modules if m.startswith(f"{extra.module}."))]:
        monkeypatch.setitem(sys.modules, name, None)  # what an install without the extra looks like
    text_scores._rouge_scorer.cache_clear()
    text_scores._bert_scorer.cache_clear()
    for value in extra.values:
        with pytest.raises(MissingDependencyError, match=rf"pip install 'llmgym\[{extra.extra}\]'"):
            get_reward(value)("p", "c", ["r"])  # what the registry declares is what the reward needs
        with pytest.raises(MissingDependencyError, match=rf"{extra.kwarg}='{value}'.*'{extra.module}'"):
            check_env_id("llmgym/TextGen-v0", {extra.kwarg: value})
    check_env_id("llmgym/TextGen-v0", {extra.kwarg: "sentiment"})


def test_reward_registry_and_errors():
    @register_reward("test_length_bonus")
    def bonus(prompt, completion, references, *, per_char=1.0):
        return per_char * len(completion)

    assert "test_length_bonus" in list_rewards()
    assert get_reward("test_length_bonus", per_char=0.5)("p", "abcd", []) == 2.0
    with pytest.raises(ConfigError, match="already registered"):
        register_reward("test_length_bonus", bonus)
    with pytest.raises(ConfigError, match="Did you mean.*sentiment"):
        get_reward("sentimnt")


def test_datapool_from_list_jsonl_and_dataset(tmp_path):
    pool = load_datapool(["a", {"prompt": "b", "references": "B"}, Sample("c", ("C", "CC"))])
    assert pool == [Sample("a"), Sample("b", ("B",)), Sample("c", ("C", "CC"))]
    path = tmp_path / "pool.jsonl"
    path.write_text(
        json.dumps({"q": "2+2=", "a": ["4"]}) + "\n\n" + json.dumps({"q": "3+3=", "a": "6"}) + "\n"
    )
    assert load_datapool(str(path), prompt_key="q", reference_key="a") == [
        Sample("2+2=", ("4",)),
        Sample("3+3=", ("6",)),
    ]
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"prompt": ["x", "y"], "references": [["X"], ["Y"]]})
    assert load_datapool(ds) == [Sample("x", ("X",)), Sample("y", ("Y",))]


def test_datapool_errors(tmp_path):
    with pytest.raises(ConfigError, match="Did you mean.*review_openings"):
        load_datapool("review_opening")
    with pytest.raises(InputError, match="no prompt"):
        load_datapool([])
    with pytest.raises(InputError, match="prompt_key"):
        load_datapool([{"text": "x"}])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(InputError, match="bad.jsonl:2"):
        load_datapool(bad)


def test_registered_datapool_factory():
    register_datapool("test_pool", lambda n=2: [f"prompt {i}" for i in range(n)], overwrite=True)
    env = TextGenEnv("test_pool", datapool_kwargs={"n": 3}, reward="exact_match")
    assert [s.prompt for s in env.samples] == ["prompt 0", "prompt 1", "prompt 2"]


def test_completion_mode_one_step():
    env = gym.make(
        "llmgym/TextGen-v0",
        datapool=[{"prompt": "Capital of France:", "references": ["Paris"]}],
        reward="exact_match",
    )
    obs, info = env.reset(seed=0)
    assert obs == {"text": "Capital of France:", "prompt": "Capital of France:", "completion": ""}
    assert info["references"] == ["Paris"]
    obs, reward, terminated, truncated, info = env.step(" Paris")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert obs["text"] == "Capital of France: Paris" and info["completion"] == " Paris"
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="str"):
        env.step(3)


def test_token_mode_rewards_at_the_end():
    env = TextGenEnv(["This movie was"], reward="sentiment", mode="token", max_tokens=5, eos_token="</s>")
    env.reset(seed=0)
    steps = [env.step(tok) for tok in [" really", " great", "</s>"]]
    assert [s[1] for s in steps] == [0.0, 0.0, 1.0]
    assert [s[2] for s in steps] == [False, False, True]
    assert steps[-1][0]["completion"] == " really great"
    env.reset(seed=0)
    steps = [env.step(" bad") for _ in range(5)]
    assert steps[-1][1:3] == (-1.0, True) and not any(s[2] for s in steps[:-1])


def test_reset_index_option_and_bad_mode():
    env = TextGenEnv(["a", "b", "c"])
    assert env.reset(options={"index": 2})[0]["prompt"] == "c"
    with pytest.raises(ConfigError, match="index"):
        env.reset(options={"index": 5})
    with pytest.raises(ConfigError, match="mode"):
        TextGenEnv(["a"], mode="words")


def test_special_tokens_are_left_out_of_the_scored_completion():
    # RL4LMs decodes completions with skip_special_tokens=True: a sampled T5 <pad> never reaches the reward
    sample = Sample("Capital of France:", (" Paris",))
    env = TextGenEnv(
        [sample], reward="exact_match", mode="token", max_tokens=5, eos_token="</s>", special_tokens=["<pad>"]
    )
    env.reset(seed=0)
    steps = [env.step(tok) for tok in [" Par", "<pad>", "is", "</s>"]]
    obs, reward, done, _, info = steps[-1]
    assert (reward, done, info["completion"]) == (1.0, True, " Paris")
    assert obs["completion"] == " Par<pad>is"  # the observation keeps what the model was fed
    with pytest.raises(ConfigError, match="special_tokens"):
        TextGenEnv([sample], special_tokens="<pad>")
