"""RL4LMs' reward, metric and datapool ids resolve in llmgym; rewards see metadata, batch and densify."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from llmgym.envs import get_reward, list_datapools, list_rewards, register_reward, text_scores
from llmgym.errors import ConfigError, MissingDependencyError
from llmgym.testing import save_tiny_classifier, save_tiny_model
from llmgym.text_metrics import MetricContext, MetricSpec, compute_metrics, get_metric, list_text_metrics

# Copied from allenai/RL4LMs rl4lms/envs/text_generation/registry.py (its three registries).
RL4LMS_REWARDS = [
    "increasing_numbers",
    "sentences_with_dates",
    "learned_reward",
    "meteor",
    "rouge",
    "bert_score",
    "bleu",
    "bleurt",
    "rouge_combined",
    "spider",
    "common_gen_repeat_penalty",
    "common_gen_repeat_penalty_batched",
    "parent",
    "sacre_bleu",
    "rouge_l_max",
    "ter",
    "chrf",
    "intent_accuracy",
    "common_gen_preference_model",
]
RL4LMS_METRICS = [
    "increasing_numbers",
    "dates",
    "learned_reward",
    "meteor",
    "rouge",
    "bert_score",
    "bleu",
    "bleurt",
    "diversity",
    "summaCZS",
    "summaCConv",
    "causal_perplexity",
    "cider",
    "spice",
    "parent_totto",
    "bleu_totto",
    "rouge_l_max",
    "sacre_bleu",
    "ter",
    "chrf",
    "intent_accuracy",
]
RL4LMS_DATAPOOLS = [
    "dummy_pool",
    "imdb",
    "commongen",
    "totto",
    "cnn_daily_mail",
    "imdb_seq2seq",
    "narrative_qa",
    "wmt16",
    "wmt14_processed_en_de",
    "wmt16newsonly",
    "iwslt2017en_de",
    "crd3",
    "daily_dialog",
]


def test_every_rl4lms_id_resolves():
    assert set(RL4LMS_REWARDS) <= set(list_rewards())
    assert set(RL4LMS_METRICS) <= set(list_text_metrics())
    assert set(RL4LMS_DATAPOOLS) <= set(list_datapools())
    for name in set(RL4LMS_REWARDS):
        get_reward(name)
    for name in set(RL4LMS_METRICS):
        get_metric(name)
    with pytest.raises(MissingDependencyError, match="SPICE needs Java"):
        compute_metrics([MetricSpec("spice")], ["p"], ["a"], [["a"]])
    with pytest.raises(MissingDependencyError, match="SPICE needs Java"):
        get_reward("spider", spice_coeff=0.5, cider_coeff=0.5)("p", "a", ["a"])


def test_corpus_bleu_is_not_a_mean_of_sentence_bleus():
    preds, refs = ["the cat sat on the mat", "a dog ran"], [["the cat sat on the mat"], ["the dog ran away"]]
    corpus = compute_metrics([MetricSpec("bleu")], ["p", "q"], preds, refs)["lexical/bleu"].corpus
    sentences = [get_reward("bleu")("p", p, r) for p, r in zip(preds, refs)]
    assert 0.0 < corpus < 1.0 and sentences[1] == 0.0 and corpus != pytest.approx(sum(sentences) / 2)
    assert get_reward("ter")("p", preds[0], refs[0]) == pytest.approx(1.0)
    assert get_reward("chrf")("p", preds[0], refs[0]) == pytest.approx(1.0)
    assert get_reward("rouge_combined")("p", preds[0], refs[0]) == pytest.approx(1.0)


def test_cider_matches_rl4lms_example():
    # RL4LMs' cider.py __main__ example, with its spaCy tokens (identical to ours on these sentences)
    corpus, scores = text_scores.cider_scores(
        ["The dog is the boy's cat.", "A boy is picking apples from trees and put them into bags."],
        [
            ["The dog is the boy's cat.", "The dog eats the cat of the boy."],
            ["A boy is picking apples from trees."],
        ],
    )
    assert len(scores) == 2 and corpus == pytest.approx(sum(scores) / 2) and scores[0] > scores[1] > 0


def test_synthetic_rewards_and_metrics():
    assert get_reward("increasing_numbers", min_tokens=20)("", "1 2 3 2", []) == pytest.approx(3 / 10)
    assert get_reward("increasing_numbers", min_tokens=2)("", "a 1 2 b", []) == pytest.approx(2 / 4)
    assert get_reward("sentences_with_dates")("", "on 2020-01-31", []) == 1.0
    values = compute_metrics(
        [MetricSpec("increasing_numbers", {"min_tokens": 20}), MetricSpec("dates")],
        ["", ""],
        ["1 2 3 2", "2020-01-31"],
        [[], []],
    )
    assert values["synthetic/increasing_numbers_in_text"].per_sample == (0.3, 0.0)
    assert values["synthetic/dates_in_text"].corpus == 0.5
    prompt = "generate a sentence with: dog frisbee catch."
    assert get_reward("common_gen_repeat_penalty")(prompt, "A dog catches a frisbee.", []) == 0.0
    assert get_reward("common_gen_repeat_penalty")(prompt, "Generate a sentence: dog", []) == -1.0


def test_metadata_dense_and_batched_rewards_in_textgen():
    seen = []

    @register_reward("test_dense_meta", dense=True, overwrite=True)
    def dense(prompt, completion, references, *, metadata, done):
        seen.append((completion, done, metadata["tag"]))
        return 1.0 if done else 0.1

    env = gym.make(
        "llmgym/TextGen-v0",
        datapool=[{"prompt": "Say:", "metadata": {"tag": "x"}}],
        reward="test_dense_meta",
        mode="token",
        max_tokens=2,
    )
    _, info = env.reset(seed=0)
    assert info["metadata"] == {"tag": "x"}
    assert env.step(" a")[1] == pytest.approx(0.1) and env.step(" b")[1] == 1.0
    assert seen == [(" a", False, "x"), (" a b", True, "x")]

    @register_reward("test_batched", batched=True, overwrite=True)
    def batched(prompts, completions, references, *, metadata):
        return [len(c) + m.get("bonus", 0) for c, m in zip(completions, metadata)]

    reward = get_reward("test_batched")
    assert reward.batch(
        ["p", "q", "r"], ["ab", "c", "xyz"], [[], [], []], [{"bonus": 1}, {}, {}], [True, False, True]
    ) == [3.0, 0.0, 3.0]
    # a reward named as module:function (what a YAML config gives)
    assert get_reward("llmgym.envs.rewards:sentiment")("p", "great", []) == 1.0
    assert get_metric("llmgym.text_metrics:bleu") is get_metric("bleu")


def test_model_based_rewards_and_metrics_load_tiny_models(tmp_path):
    cls = str(save_tiny_classifier(tmp_path / "cls", num_labels=2))
    intents = str(save_tiny_classifier(tmp_path / "intent", num_labels=4, seed=1))
    reg = str(save_tiny_classifier(tmp_path / "reg", num_labels=1))
    probs = get_reward("learned_reward", model_name=cls, label_ix=1).batch(
        ["a", "b"], [" good", " bad"], [[], []]
    )
    assert all(0.0 < p < 1.0 for p in probs) and probs[0] != probs[1]
    metric = compute_metrics(
        [MetricSpec("learned_reward", {"model_name": cls, "label_ix": 1})],
        ["a", "b"],
        [" good", " bad"],
        [[], []],
    )
    assert metric["semantic/learned_automodel_metric"].per_sample == pytest.approx(tuple(probs))
    assert isinstance(get_reward("bleurt", checkpoint=reg)("p", "the cat", ["the cat sat"]), float)
    assert compute_metrics([MetricSpec("bleurt", {"config_name": reg})], ["p"], ["x"], [["y"]])[
        "semantic/bleurt"
    ].per_sample
    same = get_reward("bert_score", model_type=cls, num_layers=1)("p", "the cat sat", ["the cat sat"])
    assert same == pytest.approx(1.0, abs=1e-4)
    meta = [{"intent": [1]}, {"intent": [2]}, {"intent": [3]}]
    acc = compute_metrics(
        [MetricSpec("intent_accuracy", {"model_name": intents})],
        ["hi <EOU>"] * 3,
        ["a", "b", "c"],
        [[]] * 3,
        meta,
    )
    reward = get_reward("intent_accuracy", model_name=intents, shape=False).batch(
        ["hi <EOU>"] * 3, ["a", "b", "c"], [[]] * 3, meta
    )
    assert acc["intent/accuracy"].per_sample == tuple(reward) and set(reward) <= {0.0, 1.0}
    t5 = str(save_tiny_model(tmp_path / "t5", kind="t5"))
    pref = get_reward("common_gen_preference_model", model_name=t5, concept_penalty_coeff=1.0)
    full, missing = pref.batch(
        ["", ""], ["dog runs", "dog runs"], [[], []], [{"concepts": ["dog"]}, {"concepts": ["dog", "cat"]}]
    )
    assert 0.0 < full < 1.0 and missing == pytest.approx(full / 2)


def test_perplexity_uses_the_policy_model(tmp_path):
    from transformers import AutoModelForCausalLM

    path = save_tiny_model(tmp_path / "lm", kind="gpt2")
    model = AutoModelForCausalLM.from_pretrained(path)
    spec = [MetricSpec("causal_perplexity", {"tokenizer_id": str(path), "stride": 8})]
    value = compute_metrics(
        spec,
        ["p"],
        ["x"],
        [["the cat sat on the mat and more words here"]],
        context=MetricContext("val", model),
    )
    assert value["fluency_metrics/perplexity"].corpus > 1.0
    assert compute_metrics(spec, ["p"], ["x"], [["a"]], context=MetricContext("train", model)) == {}


def test_meteor_needs_wordnet_or_names_the_fix():
    class NoSynonyms:  # a WordNet with no synonyms: exact and stem matches only
        def synsets(self, word, pos=None):
            return []

    assert text_scores.meteor_scores(["the cat sat"], [["the cat sat"]], wordnet=NoSynonyms())[0] > 0.9
    try:
        text_scores._wordnet()
    except MissingDependencyError as exc:
        assert "nltk.downloader wordnet" in str(exc)


def _totto(sentence, overlap):
    cell = {"column_span": 1, "row_span": 1}
    table = [
        [{**cell, "value": "Year", "is_header": True}, {**cell, "value": "Title", "is_header": True}],
        [{**cell, "value": "1999", "is_header": False}, {**cell, "value": "The Matrix", "is_header": False}],
    ]
    return {
        "raw_table": {
            "table": table,
            "highlighted_cells": [[1, 0], [1, 1]],
            "table_page_title": "Films",
            "table_section_title": "",
            "table_section_text": "",
            "overlap_subset": overlap,
            "sentence_annotations": [{"final_sentence": sentence}],
        }
    }


def test_parent_rewards_faithful_text_over_hallucination():
    meta = [
        _totto("The Matrix was released in 1999.", True),
        _totto("The Matrix was released in 1999.", False),
    ]
    texts = ["The Matrix was released in 1999.", "Titanic won eleven awards in 1997."]
    rewards = get_reward("parent").batch(["", ""], texts, [[], []], meta)
    assert rewards[0] > 0.9 and rewards[1] < 0.2
    values = compute_metrics([MetricSpec("parent_totto")], ["", ""], texts, [[], []], meta)
    assert values["table_to_text/parent_overall_f_score"].per_sample == pytest.approx(tuple(rewards))
    assert values["table_to_text/parent_overlap_f_score"].corpus == pytest.approx(rewards[0])
    assert values["table_to_text/parent_non_overlap_f_score"].corpus == pytest.approx(rewards[1])
    # table-entailed words not in the reference still count for precision: PARENT, not BLEU
    partial = get_reward("parent").batch([""], ["Films: The Matrix, 1999."], [[]], meta[:1])[0]
    assert partial > get_reward("bleu")("", "Films: The Matrix, 1999.", ["The Matrix was released in 1999."])


# ---------------------------------------------------------------- RL4LMs' own arguments, from its task YAMLs
_CONFIGS = Path(__file__).parents[1] / "compat" / "rl4lms_configs"


def _yaml(name):
    import yaml

    return yaml.safe_load((_CONFIGS / name).read_text())


def test_sacre_bleu_reward_takes_the_dialog_configs_arguments():
    args = next(
        m["args"]
        for m in _yaml("dialog_gpt2_ppo.yml")["train_evaluation"]["metrics"]
        if m["id"] == "sacre_bleu"
    )
    assert args == {"tokenize": "intl"}
    reward = get_reward("sacre_bleu", **args)  # before: every call passed metadata/done on to sacrebleu
    assert reward("p", "the cat sat on the mat", ["the cat sat on the mat"]) == pytest.approx(1.0)
    assert reward("p", "a dog", ["the cat sat on the mat"], metadata={"x": 1}) == pytest.approx(0.0)


def test_rouge_l_max_takes_narrative_qas_py_rouge_arguments():
    raw = _yaml("narrative_qa_t5_ppo.yml")
    reward = get_reward("rouge_l_max", **raw["reward_fn"]["args"])  # before: a TypeError
    words = [f"w{i}" for i in range(100)]
    reference = " ".join(words)
    longer = " ".join(words + [f"x{i}" for i in range(100)])
    assert reward("p", longer, ["other words", reference]) == pytest.approx(1.0)  # 100 words kept of each
    assert get_reward("rouge_l_max", limit_length=False)("p", longer, [reference]) == pytest.approx(2 / 3)
    # alpha weighs precision and recall as py-rouge does: P*R / ((1 - a) P + a R), here P = 0.5 at a = 1
    assert get_reward("rouge_l_max", limit_length=False, alpha=1.0)(
        "p", longer, [reference]
    ) == pytest.approx(0.5)
    metric_args = next(m["args"] for m in raw["train_evaluation"]["metrics"] if m["id"] == "rouge_l_max")
    values = compute_metrics(
        [MetricSpec("rouge_l_max", metric_args)], ["p", "q"], [longer, "x"], [[reference], []]
    )
    assert values["lexical/rouge_l_max"].per_sample == pytest.approx((1.0, 0.0))
    with pytest.raises(ConfigError, match="length_limit_type='lines'"):
        get_reward("rouge_l_max", length_limit_type="lines")("p", "a", ["a"])


def test_bert_score_metric_scores_a_split_without_references(tmp_path):
    # totto's test split has no references; RL4LMs' configs ask bert_score with language: en
    cls = str(save_tiny_classifier(tmp_path / "cls", num_labels=2))
    spec = MetricSpec("bert_score", {"model_type": cls, "num_layers": 1})
    empty = compute_metrics([spec], ["p", "q"], ["a cat", "a dog"], [[], []])
    assert empty["semantic/bert_score"].per_sample == (0.0, 0.0)
    mixed = compute_metrics(
        [spec],
        ["p", "q", "r", "s"],
        ["the cat sat", "a dog", "a dog", ""],
        [["the cat sat"], [], [""], ["x"]],
    )  # totto's test references are [""]; an empty completion scores 0 as in bert-score
    assert mixed["semantic/bert_score"].per_sample == pytest.approx((1.0, 0.0, 0.0, 0.0), abs=1e-4)


def test_preference_model_scores_an_empty_completion(tmp_path):
    # a completion of special tokens only is empty once they are left out; a tokenizer that adds no EOS gave
    # the T5 encoder no token at all
    t5 = str(save_tiny_model(tmp_path / "t5", kind="t5"))
    args = _yaml("common_gen_t5_ppo_on_supervised.yml")["reward_fn"]["args"]  # device, batch_size, model_type
    reward = get_reward("common_gen_preference_model", **args, model_name=t5)
    [empty, full] = reward.batch(["", ""], ["", "dog runs"], [[], []], [{"concepts": ["dog"]}] * 2)
    assert 0.0 < empty < 1.0 and 0.0 < full < 1.0


def test_factory_built_metrics_keep_their_names_docs_and_arguments():
    from llmgym import text_metrics

    names = {
        "bleu": "bleu",
        "sacre_bleu": "sacre_bleu",
        "chrf": "chrf",
        "ter": "ter",
        "rouge_l_max": "rouge_l_max",
        "increasing_numbers": "increasing_numbers_metric",
        "summaCZS": "summac_zs",
    }
    for metric_id, name in names.items():
        metric = getattr(text_metrics, name)
        assert get_metric(metric_id) is metric
        assert metric.__name__ == name and "RL4LMs'" in (metric.__doc__ or "")
    texts, refs = ["the cat sat on a mat"], [["the cat sat on the mat"]]
    default = compute_metrics([MetricSpec("sacre_bleu")], [""], texts, refs)["lexical/sacrebleu"].corpus
    by_char = compute_metrics([MetricSpec("sacre_bleu", {"tokenize": "char"})], [""], texts, refs)
    assert by_char["lexical/sacrebleu"].corpus != pytest.approx(default)  # the argument reaches sacrebleu
    assert default == pytest.approx(text_scores.sacrebleu_corpus(texts, refs))
