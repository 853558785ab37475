"""RL4LMs' datapools load offline from fixture files in their datasets' formats, with splits and metadata."""

from __future__ import annotations

import json

import pytest

from llmgym.envs import load_datapool
from llmgym.envs.rl4lms_pools import DatasetUnavailableError

pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))


def _write(folder, split, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder)


def test_imdb_splits_prompts_and_references(tmp_path):
    rows = [{"text": f"review {i} was really very good", "label": i % 2} for i in range(10)]
    folder = _write(tmp_path / "imdb", "train", rows)
    _write(tmp_path / "imdb", "test", rows[:3])
    train = load_datapool("imdb", split="train", seed=42, data_dir=folder)
    val = load_datapool("imdb", split="val", seed=42, data_dir=folder)
    test = load_datapool("imdb", split="test", seed=42, data_dir=folder)
    assert (len(train), len(val), len(test)) == (8, 2, 3)
    assert {s.references[0] for s in train + val} == {r["text"] for r in rows}
    sample = train[0]
    assert sample.references[0].startswith(sample.prompt) and len(sample.prompt.split(" ")) == 3
    seq = load_datapool("imdb_seq2seq", split="train", seed=42, data_dir=folder)
    assert all(s.prompt + " " + s.references[0] == s.metadata["reference"] for s in seq) and len(seq) == 4


def test_commongen_daily_dialog_translation_and_cnn(tmp_path):
    folder = _write(
        tmp_path / "cg",
        "validation",
        [{"concepts": ["dog", "frisbee"], "target": "A dog catches a frisbee."}],
    )
    [s] = load_datapool(
        "commongen", split="val", prefix="generate a sentence with: ", concept_end_token=".", data_dir=folder
    )
    assert s.prompt == "generate a sentence with: dog frisbee." and s.metadata == {
        "concepts": ["dog", "frisbee"]
    }
    folder = _write(
        tmp_path / "dd",
        "train",
        [{"dialog": ["Hi .", "Hello !", "How are you ?"], "emotion": [0, 4, 0], "act": [1, 2, 3]}],
    )
    pool = load_datapool("daily_dialog", split="train", context_size=2, data_dir=folder)
    assert [(s.prompt, s.references, dict(s.metadata)) for s in pool] == [
        ("Hi .<EOU>Hello ! <EOU>", ("How are you ?<EOU>",), {"emotion": [0], "intent": [3]})
    ]
    folder = _write(tmp_path / "wmt", "test", [{"translation": {"en": "Hello", "de": "Hallo"}}])
    for pool_id in ("wmt16", "wmt16newsonly", "iwslt2017en_de", "wmt14_processed_en_de"):
        [s] = load_datapool(
            pool_id, split="test", prompt_prefix="translate English to German: ", data_dir=folder
        )
        assert (s.prompt, s.references) == ("translate English to German: Hello", ("Hallo",))
    folder = _write(
        tmp_path / "cnn", "train", [{"article": "Some news, told here.", "highlights": "News."}] * 3
    )
    pool = load_datapool(
        "cnn_daily_mail",
        split="train",
        prompt_suffix=" TL;DR:",
        truncate_article=2,
        max_size=2,
        data_dir=folder,
    )
    assert [s.prompt for s in pool] == ["Some news TL;DR:"] * 2


def test_totto_linearises_the_highlighted_cells(tmp_path):
    cell = {"column_span": 1, "row_span": 1}
    row = {
        "table": [
            [{**cell, "value": "Year", "is_header": True}, {**cell, "value": "Title", "is_header": True}],
            [{**cell, "value": "1999", "is_header": False}, {**cell, "value": "Film", "is_header": False}],
        ],
        "highlighted_cells": [[1, 1]],
        "table_page_title": "Page",
        "table_section_title": "Works",
        "overlap_subset": "True",
        "sentence_annotations": {
            k: ["In 1999 the film."]
            for k in (
                "original_sentence",
                "sentence_after_deletion",
                "sentence_after_ambiguity",
                "final_sentence",
            )
        },
    }
    [s] = load_datapool("totto", split="val", data_dir=_write(tmp_path / "totto", "validation", [row]))
    assert s.prompt == (
        "<table> <cell> Film <col_header> Title </col_header> </cell> </table>"
        "<page_title> Page </page_title> <section_title> Works </section_title> "
        "<table> <cell> Film <col_header> Title </col_header> </cell> </table>"
    )
    assert s.references == ("In 1999 the film.",) and s.metadata["raw_table"]["overlap_subset"] is True
    from llmgym.text_metrics import MetricSpec, compute_metrics

    bleu = compute_metrics(
        [MetricSpec("bleu_totto")], [s.prompt], ["In 1999 the film."], [s.references], [s.metadata]
    )
    assert (
        bleu["table_to_text/bleu_overall"].corpus == pytest.approx(1.0)
        and bleu["table_to_text/bleu_non_overlap"].corpus == 0.0
    )


def test_narrative_qa_crd3_and_dummy(tmp_path):
    nqa = tmp_path / "nqa"
    nqa.mkdir()
    (nqa / "dev.tsv").write_text("Who? \\n story\tAlice \nWho? \\n story\t bob\n")
    [s] = load_datapool("narrative_qa", split="val", data_dir=str(nqa))
    assert s.prompt == "who? \\n story" and s.references == ("alice", "bob")
    root = tmp_path / "CRD3-master"
    (root / "data" / "aligned data").mkdir(parents=True)
    (root / "data" / "cleaned data").mkdir(parents=True)
    (root / "data" / "aligned data" / "test_files").write_text("ep1\n")
    turns = [{"NAMES": [n], "UTTERANCES": [u]} for n, u in (("A", "hi"), ("B", "yo"), ("A", "go"))]
    (root / "data" / "cleaned data" / "ep1.json").write_text(json.dumps({"TURNS": turns}))
    [s] = load_datapool("crd3", split="test", data_dir=str(root))
    assert (s.prompt, s.references) == ("A: hi\nB: yo\nA: ", ("go",))
    assert [
        s.prompt for s in load_datapool("dummy_pool", split="train", prompt="<|endoftext|>", n_samples=3)
    ] == ["<|endoftext|>"] * 3


def test_no_local_copy_and_no_network_names_the_dataset(tmp_path):
    with pytest.raises(DatasetUnavailableError, match=r"'imdb'.*data_dir"):
        load_datapool("imdb", split="train")
    with pytest.raises(DatasetUnavailableError, match=r"no validation.jsonl"):
        load_datapool("commongen", split="val", data_dir=str(tmp_path))
    with pytest.raises(DatasetUnavailableError, match="narrative_qa"):
        load_datapool("narrative_qa", split="val")
