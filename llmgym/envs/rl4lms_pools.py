"""RL4LMs' datapools under their ids, with its splits, prompt formats and per-sample metadata.

Each pool takes ``split`` (``"train"``, ``"val"`` or ``"test"``) and RL4LMs' own arguments, and
loads its dataset with ``datasets``: from the Hugging Face hub (RL4LMs' dataset ids), or, with
``data_dir=``, from local files holding the hub dataset's rows, one file per hub split
(``train.jsonl``, ``validation.jsonl``, ``test.jsonl``; ``.json``, ``.csv`` and ``.parquet`` too).
NarrativeQA reads UnifiedQA's ``train.tsv`` / ``dev.tsv`` / ``test.tsv`` and CRD3 the extracted
``CRD3-master`` folder, both from ``data_dir``. The ``LLMGYM_DATA_DIR`` environment variable, when set,
is where ``<id>/`` folders are looked for when ``data_dir`` is not given.

Ids: ``dummy_pool``, ``imdb``, ``imdb_seq2seq``, ``commongen``, ``cnn_daily_mail``, ``totto``,
``narrative_qa``, ``wmt16``, ``wmt14_processed_en_de``, ``wmt16newsonly``, ``iwslt2017en_de``,
``crd3``, ``daily_dialog``.
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llmgym.envs.datapools import Sample, register_datapool
from llmgym.errors import ConfigError, InputError, require

__all__ = ["DatasetUnavailableError", "HUB_SPLITS"]

#: RL4LMs' split names -> the hub datasets' split names.
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class DatasetUnavailableError(ConfigError, FileNotFoundError):
    """A datapool's dataset is neither in local files nor reachable on the hub."""


def _check_split(split: str) -> str:
    if split not in HUB_SPLITS:
        raise ConfigError(f"split={split!r} is invalid; expected one of {list(HUB_SPLITS)}.")
    return HUB_SPLITS[split]


def _local_dir(pool: str, data_dir: str | None) -> Path | None:
    if data_dir is not None:
        return Path(data_dir)
    root = os.environ.get("LLMGYM_DATA_DIR")
    return Path(root) / pool if root else None


def _how_to_provide(pool: str, hub: str) -> str:
    return (
        f"Fix: with internet access, let datasets download '{hub}' (unset HF_DATASETS_OFFLINE); offline, save its "
        f"splits as train.jsonl / validation.jsonl / test.jsonl (the hub's columns) in a folder and pass "
        f"datapool_kwargs={{'data_dir': FOLDER}} (or put them in $LLMGYM_DATA_DIR/{pool}/)."
    )


def load_hub_split(pool: str, hub: str, config: str | None, hub_split: str, data_dir: str | None) -> Any:
    """One split of a hub dataset with ``datasets``: from ``data_dir`` when given, else the hub.

    Args:
        pool: The datapool id (for messages and ``$LLMGYM_DATA_DIR/<pool>``).
        hub: The hub dataset id.
        config: Its configuration name, or ``None``.
        hub_split: The hub split name.
        data_dir: A folder of local files, one per hub split.

    Raises:
        DatasetUnavailableError: If the local file is missing, or the hub cannot be reached.
    """
    datasets: Any = require("datasets", "datasets", f"The '{pool}' datapool")
    local = _local_dir(pool, data_dir)
    if local is not None:
        files = [local / f"{hub_split}{ext}" for ext in _FORMATS]
        found = next((f for f in files if f.is_file()), None)
        if found is None:
            raise DatasetUnavailableError(
                f"datapool {pool!r}: no {hub_split}.jsonl (or .json/.csv/.parquet) in {str(local)!r}. "
                + _how_to_provide(pool, hub)
            )
        return datasets.load_dataset(
            _FORMATS[found.suffix], data_files={hub_split: str(found)}, split=hub_split
        )
    try:
        return datasets.load_dataset(hub, config, split=hub_split)
    except Exception as exc:  # datasets raises ConnectionError, OSError or its own errors offline
        raise DatasetUnavailableError(
            f"datapool {pool!r} needs the dataset '{hub}'{f' ({config})' if config else ''}, which could not be "
            f"loaded ({type(exc).__name__}: {str(exc)[:200]}). " + _how_to_provide(pool, hub)
        ) from exc


@register_datapool("dummy_pool")
def dummy_pool(split: str = "train", prompt: str = "", n_samples: int = 100) -> list[Sample]:
    """``n_samples`` copies of one prompt, no references (RL4LMs' synthetic tasks)."""
    _check_split(split)
    return [Sample(prompt) for _ in range(n_samples)]


def _imdb_rows(split: str, seed: int | None, data_dir: str | None, pool: str) -> Any:
    hub_split = "train" if split in ("train", "val") else "test"
    _check_split(split)
    dataset = load_hub_split(pool, "imdb", None, hub_split, data_dir).shuffle(seed=seed)
    if split == "test":
        return dataset.select(range(min(5000, len(dataset))))
    cut = int(len(dataset) * 0.8)
    return dataset.select(range(cut) if split == "train" else range(cut, len(dataset)))


@register_datapool("imdb")
def imdb(split: str = "train", seed: int = 42, data_dir: str | None = None) -> list[Sample]:
    """IMDB reviews; the prompt is the first half of the words, the reference the whole review.

    Train and val are RL4LMs' 80/20 cut of the shuffled hub train split, test the first 5000 of the
    shuffled test split.
    """
    rows = _imdb_rows(split, seed, data_dir, "imdb")
    out = []
    for text, label in zip(rows["text"], rows["label"]):
        words = text.split(" ")
        out.append(Sample(" ".join(words[: int(len(words) * 0.5)]), (text,), {"label": label}))
    return out


@register_datapool("imdb_seq2seq")
def imdb_seq2seq(
    split: str = "train", positive_ratio: float = 1.0, seed: int | None = None, data_dir: str | None = None
) -> list[Sample]:
    """IMDB halves: prompt the first half, reference the second; train keeps positive reviews only."""
    rows = _imdb_rows(split, seed, data_dir, "imdb_seq2seq")
    out = []
    for text, label in zip(rows["text"], rows["label"]):
        words = text.split(" ")
        cut = int(len(words) * 0.5)
        if split != "train" or label == 1:
            out.append(Sample(" ".join(words[:cut]), (" ".join(words[cut:]),), {"reference": text}))
    return out[: int(len(out) * positive_ratio)] if split == "train" else out


@register_datapool("commongen")
def commongen(
    split: str = "train",
    concept_separator_token: str = " ",
    concept_end_token: str = " ",
    prefix: str = "summarize: ",
    data_dir: str | None = None,
) -> list[Sample]:
    """CommonGen (GEM): prompt ``prefix + concepts + concept_end_token``; metadata ``concepts``."""
    rows = load_hub_split("commongen", "gem", "common_gen", _check_split(split), data_dir)
    out = []
    for item in rows:
        target = item["target"] or "empty reference"
        prompt = prefix + concept_separator_token.join(item["concepts"]) + concept_end_token
        out.append(Sample(prompt, (target,), {"concepts": list(item["concepts"])}))
    return out


@register_datapool("cnn_daily_mail")
def cnn_daily_mail(
    split: str = "train",
    prompt_suffix: str = "",
    prompt_prefix: str = "",
    truncate_article: int | None = None,
    max_size: int | None = None,
    data_dir: str | None = None,
) -> list[Sample]:
    """CNN/DailyMail 3.0.0: the article (first ``truncate_article`` words) between prefix and suffix."""
    rows = load_hub_split("cnn_daily_mail", "cnn_dailymail", "3.0.0", _check_split(split), data_dir)
    out = []
    for item in rows:
        article = item["article"]
        if truncate_article is not None:
            from llmgym.envs.text_scores import word_tokenize

            article = " ".join(word_tokenize(article)[:truncate_article])
        out.append(Sample(prompt_prefix + article + prompt_suffix, (item["highlights"],)))
        if max_size is not None and len(out) == max_size:
            break
    return out


def _translation_pool(
    pool: str,
    hub: str,
    config: str | None,
    split: str,
    source: str,
    target: str,
    prefix: str,
    suffix: str,
    data_dir: str | None,
) -> list[Sample]:
    rows = load_hub_split(pool, hub, config, _check_split(split), data_dir)
    return [Sample(prefix + r["translation"][source] + suffix, (r["translation"][target],)) for r in rows]


@register_datapool("wmt16")
def wmt16(
    split: str = "train",
    wmt_id: str = "wmt16",
    source_language: str = "en",
    target_language: str = "de",
    prompt_suffix: str = "",
    prompt_prefix: str = "",
    data_dir: str | None = None,
) -> list[Sample]:
    """WMT translation (``wmt_id``, the language pair in either order on the hub)."""
    pair = "-".join(sorted((source_language, target_language), key=lambda x: x != target_language))
    return _translation_pool(
        "wmt16", wmt_id, pair, split, source_language, target_language, prompt_prefix, prompt_suffix, data_dir
    )


@register_datapool("wmt14_processed_en_de")
def wmt14_processed_en_de(
    split: str = "train", prompt_suffix: str = "", prompt_prefix: str = "", data_dir: str | None = None
) -> list[Sample]:
    """WMT14 en-de as preprocessed by stas/wmt14-en-de-pre-processed."""
    return _translation_pool(
        "wmt14_processed_en_de",
        "stas/wmt14-en-de-pre-processed",
        None,
        split,
        "en",
        "de",
        prompt_prefix,
        prompt_suffix,
        data_dir,
    )


@register_datapool("wmt16newsonly")
def wmt16newsonly(
    split: str = "train", prompt_suffix: str = "", prompt_prefix: str = "", data_dir: str | None = None
) -> list[Sample]:
    """en-de news: News Commentary for train, WMT16 for val and test (RL4LMs' ``wmt16newsonly``)."""
    hub = "news_commentary" if split == "train" else "wmt16"
    return _translation_pool(
        "wmt16newsonly", hub, "de-en", split, "en", "de", prompt_prefix, prompt_suffix, data_dir
    )


@register_datapool("iwslt2017en_de")
def iwslt2017en_de(
    split: str = "train", prompt_suffix: str = "", prompt_prefix: str = "", data_dir: str | None = None
) -> list[Sample]:
    """IWSLT 2017 en-de."""
    return _translation_pool(
        "iwslt2017en_de",
        "iwslt2017",
        "iwslt2017-de-en",
        split,
        "en",
        "de",
        prompt_prefix,
        prompt_suffix,
        data_dir,
    )


EOU_TOKEN = "<EOU>"


@register_datapool("daily_dialog")
def daily_dialog(split: str = "train", context_size: int = 5, data_dir: str | None = None) -> list[Sample]:
    """DailyDialog: the last ``context_size`` utterances joined by ``<EOU>``; metadata ``emotion`` and ``intent``."""
    rows = load_hub_split("daily_dialog", "daily_dialog", None, _check_split(split), data_dir)
    out = []
    for item in rows:
        contexts: list[str] = []
        for utterance, emotion, intent in zip(item["dialog"], item["emotion"], item["act"]):
            if len(contexts) >= context_size:
                prompt = EOU_TOKEN.join(contexts[-context_size:]) + " " + EOU_TOKEN
                out.append(
                    Sample(prompt, (utterance + EOU_TOKEN,), {"emotion": [emotion], "intent": [intent]})
                )
            contexts.append(utterance)
    return out


def _require_dir(pool: str, data_dir: str | None, what: str) -> Path:
    local = _local_dir(pool, data_dir)
    if local is None or not local.is_dir():
        raise DatasetUnavailableError(
            f"datapool {pool!r} reads {what} from a local folder; got data_dir={data_dir!r}. Fix: download it, then "
            f"pass datapool_kwargs={{'data_dir': FOLDER}} (or put it in $LLMGYM_DATA_DIR/{pool}/)."
        )
    return local


@register_datapool("narrative_qa")
def narrative_qa(split: str = "train", data_dir: str | None = None) -> list[Sample]:
    """NarrativeQA in UnifiedQA's format (``train.tsv``, ``dev.tsv``, ``test.tsv``: question and context, answer).

    Answers of one prompt are grouped as its references; texts are lowercased (answers stripped).
    Download: https://storage.googleapis.com/unifiedqa/data/narrativeqa/{train,dev,test}.tsv.
    """
    _check_split(split)
    folder = _require_dir("narrative_qa", data_dir, "UnifiedQA's narrativeqa/{train,dev,test}.tsv")
    path = folder / f"{ {'train': 'train', 'val': 'dev', 'test': 'test'}[split] }.tsv"
    answers: dict[str, list[str]] = defaultdict(list)
    with path.open(encoding="utf-8", newline="") as fh:
        for number, row in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if len(row) != 2:
                raise InputError(f"{path}:{number} has {len(row)} columns; expected 2 (prompt, answer).")
            answers[row[0]].append(row[1])
    return [
        Sample(prompt.lower(), tuple(a.lower().strip() for a in refs)) for prompt, refs in answers.items()
    ]


@register_datapool("crd3")
def crd3(split: str = "train", max_context_size: int = 5, data_dir: str | None = None) -> list[Sample]:
    """CRD3 dialogue continuation: the last turns as ``NAME: utterances`` lines, then the next speaker's name.

    ``data_dir`` is the extracted https://github.com/RevanthRameshkumar/CRD3 archive (``CRD3-master``).
    """
    _check_split(split)
    root = _require_dir("crd3", data_dir, "the extracted CRD3-master archive")
    listing = root / "data" / "aligned data" / f"{split}_files"
    out = []
    for episode in listing.read_text(encoding="utf-8").splitlines():
        data = json.loads((root / "data" / "cleaned data" / f"{episode}.json").read_text(encoding="utf-8"))
        contexts: list[str] = []
        for turn in data["TURNS"]:
            name, utterances = turn["NAMES"][0], " ".join(turn["UTTERANCES"])
            if len(contexts) > 1:
                out.append(
                    Sample("\n".join(contexts[-max_context_size:]) + "\n" + name + ": ", (utterances,))
                )
            contexts.append(f"{name}: {utterances}")
    return out


def _adjusted(table: list[list[Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
    rows = []
    for row in table:
        start, cells = 0, []
        for cell in row:
            cells.append({**cell, "start": start, "end": start + int(cell["column_span"])})
            start += int(cell["column_span"])
        rows.append(cells)
    return rows


def _headers(adjusted: list[list[dict[str, Any]]], r: int, c: int) -> tuple[list[str], list[str]]:
    row_headers = [cell["value"] for cell in adjusted[r][:c] if cell["is_header"]]
    start, end = adjusted[r][c]["start"], adjusted[r][c]["end"]
    col_headers = [
        cell["value"]
        for row in adjusted[:r]
        for cell in row
        if cell["is_header"] and cell["start"] < end and cell["end"] > start
    ]
    return row_headers, col_headers


def _linearize(
    table: list[list[Mapping[str, Any]]], cells: list[list[int]], page: str | None, section: str | None
) -> str:
    """ToTTo's ``linearize_subtable`` of the highlighted cells with heuristic headers."""
    adjusted = _adjusted(table)
    text = ""
    if page:
        text += f"<page_title> {page} </page_title> "
    if section:
        text += f"<section_title> {section} </section_title> "
    text += "<table> "
    for r, c in cells:
        row_headers, col_headers = _headers(adjusted, r, c)
        item = f"<cell> {table[r][c]['value']} "
        item += "".join(f"<col_header> {h} </col_header> " for h in col_headers)
        item += "".join(f"<row_header> {h} </row_header> " for h in row_headers)
        text += item + "</cell> "
    return text + "</table>"


@register_datapool("totto")
def totto(
    split: str = "train", representation: str = "subtable", data_dir: str | None = None
) -> list[Sample]:
    """ToTTo table-to-text: the highlighted subtable linearised without, then with, the page and section titles.

    Metadata ``raw_table``: the row, with ``sentence_annotations`` as a list of dicts and
    ``overlap_subset`` a bool (what ToTTo's official BLEU and PARENT read). Test references are ``[""]``.
    """
    if representation != "subtable":
        raise ConfigError(f"representation={representation!r} is not supported; expected 'subtable'.")
    hub_split = _check_split(split)
    rows = load_hub_split("totto", "totto", None, hub_split, data_dir)
    out = []
    for item in rows:
        item = dict(item)
        annotations = item["sentence_annotations"]
        keys = ("original_sentence", "sentence_after_deletion", "sentence_after_ambiguity", "final_sentence")
        targets = list(annotations["final_sentence"])
        item["sentence_annotations"] = [{k: annotations[k][i] for k in keys} for i in range(len(targets))]
        item["overlap_subset"] = str(item["overlap_subset"]) == "True"
        cells = item["highlighted_cells"]
        prompt = _linearize(item["table"], cells, None, None) + _linearize(
            item["table"], cells, item["table_page_title"], item["table_section_title"]
        )
        out.append(Sample(prompt, tuple([""] if hub_split == "test" else targets), {"raw_table": item}))
    return out


#: Every RL4LMs datapool id registered here, with its factory.
RL4LMS_POOLS: dict[str, Callable[..., list[Sample]]] = {
    "dummy_pool": dummy_pool,
    "imdb": imdb,
    "commongen": commongen,
    "totto": totto,
    "cnn_daily_mail": cnn_daily_mail,
    "imdb_seq2seq": imdb_seq2seq,
    "narrative_qa": narrative_qa,
    "wmt16": wmt16,
    "wmt14_processed_en_de": wmt14_processed_en_de,
    "wmt16newsonly": wmt16newsonly,
    "iwslt2017en_de": iwslt2017en_de,
    "crd3": crd3,
    "daily_dialog": daily_dialog,
}
