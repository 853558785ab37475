"""Text-generation scores on the libraries made for them; shared by rewards and evaluation metrics.

Every function takes a batch: ``predictions[i]`` is scored against ``references[i]`` (a list of
strings). Corpus-level scores (``*_corpus``) are computed over the whole batch as the metric
defines them (corpus BLEU pools n-gram counts; it is not a mean of sentence BLEUs); per-sample
scores return one float per prediction. Lexical scores use sacrebleu (BLEU, chrF, TER), rouge-score
(ROUGE), NLTK (METEOR; needs NLTK's WordNet data) and CIDEr-D as RL4LMs computes it; model-based
scores load a ``transformers`` checkpoint once per name (:func:`sequence_classifier`) or use
``bert-score``.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from llmgym.errors import ConfigError, InputError, MissingDependencyError, require

__all__ = [
    "bleu_corpus",
    "sacrebleu_corpus",
    "chrf_corpus",
    "ter_corpus",
    "rouge_scores",
    "rouge_l_max_scores",
    "meteor_scores",
    "cider_scores",
    "diversity",
    "word_tokenize",
    "bert_scores",
    "sequence_classifier",
    "classifier_probabilities",
    "classifier_predictions",
    "regression_scores",
    "seq2seq_label_probability",
    "require_optional",
    "parent_scores",
    "totto_parent_tables",
    "perplexity",
]

Refs = Sequence[Sequence[str]]


def _check(predictions: Sequence[str], references: Refs, name: str) -> None:
    if len(predictions) != len(references):
        raise InputError(
            f"{name}: {len(predictions)} predictions but {len(references)} reference lists; expected one list per "
            "prediction."
        )


def require_optional(module: str, package: str, feature: str) -> object:
    """Import a package that no llmgym extra installs, or raise :class:`MissingDependencyError` naming it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the package '{package}', which is not installed. Install it with: pip install {package}"
        ) from exc


def _sacrebleu() -> Any:
    return require("sacrebleu", "metrics", "BLEU, chrF and TER")


def _ref_streams(references: Refs) -> list[list[str]]:
    """Sacrebleu's layout: one stream per reference position, padded with ``""`` (ignored by it)."""
    width = max((len(refs) for refs in references), default=0)
    return [[refs[k] if k < len(refs) else "" for refs in references] for k in range(width)]


def bleu_corpus(predictions: Sequence[str], references: Refs) -> float:
    """Corpus BLEU-4 on whitespace tokens, no smoothing, in [0, 1] (RL4LMs' ``bleu``, HF ``bleu``).

    Computed by sacrebleu with ``tokenize="none"`` (the texts are split on blanks, as RL4LMs does
    before calling HF's ``bleu``); the brevity penalty takes the closest reference length.
    """
    _check(predictions, references, "bleu")
    if not predictions or not any(references):
        return 0.0
    result = _sacrebleu().corpus_bleu(
        [" ".join(p.split()) for p in predictions],
        [[" ".join(r.split()) for r in stream] for stream in _ref_streams(references)],
        tokenize="none",
        smooth_method="none",
        force=True,
    )
    return float(result.score) / 100.0


def sacrebleu_corpus(predictions: Sequence[str], references: Refs, **kwargs: Any) -> float:
    """Sacrebleu's corpus BLEU in [0, 1]; ``kwargs`` go to ``sacrebleu.corpus_bleu`` (RL4LMs' ``sacre_bleu``)."""
    _check(predictions, references, "sacre_bleu")
    if not predictions or not any(references):
        return 0.0
    return (
        float(_sacrebleu().corpus_bleu(list(predictions), _ref_streams(references), **kwargs).score) / 100.0
    )


def chrf_corpus(predictions: Sequence[str], references: Refs) -> float:
    """Sacrebleu's corpus chrF in [0, 1] (RL4LMs' ``chrf``)."""
    _check(predictions, references, "chrf")
    if not predictions or not any(references):
        return 0.0
    return float(_sacrebleu().corpus_chrf(list(predictions), _ref_streams(references)).score) / 100.0


def ter_corpus(predictions: Sequence[str], references: Refs) -> float:
    """Sacrebleu's corpus TER divided by 100 (lower is better; RL4LMs' ``ter`` metric)."""
    _check(predictions, references, "ter")
    if not predictions or not any(references):
        return 0.0
    return float(_sacrebleu().corpus_ter(list(predictions), _ref_streams(references)).score) / 100.0


@functools.lru_cache(maxsize=8)
def _rouge_scorer(rouge_types: tuple[str, ...], use_stemmer: bool = True) -> Any:
    rouge_scorer: Any = require("rouge_score.rouge_scorer", "metrics", "ROUGE")
    return rouge_scorer.RougeScorer(list(rouge_types), use_stemmer=use_stemmer)


def rouge_scores(
    predictions: Sequence[str], references: Refs, rouge_type: str = "rougeL", *, use_single_ref: bool = True
) -> list[float]:
    """Per-sample ROUGE F-measure with stemming (rouge-score), against the first reference or the best one.

    Args:
        predictions: The generated texts.
        references: Their references.
        rouge_type: ``rouge1``, ``rouge2``, ``rougeL`` or ``rougeLsum``.
        use_single_ref: Score against the first reference only (RL4LMs' default) instead of the best.
    """
    _check(predictions, references, "rouge")
    scorer = _rouge_scorer((rouge_type,))
    scores = []
    for pred, refs in zip(predictions, references):
        refs = list(refs[:1]) if use_single_ref else list(refs)
        scores.append(max((float(scorer.score(r, pred)[rouge_type].fmeasure) for r in refs), default=0.0))
    return scores


def _limited(text: str, length_limit: int, length_limit_type: str) -> str:
    """py-rouge's truncation: the first ``length_limit`` words or bytes of a text."""
    if length_limit_type == "words":
        return " ".join(text.split()[:length_limit])
    return text.encode("utf-8")[:length_limit].decode("utf-8", errors="ignore")


def rouge_l_max_scores(
    predictions: Sequence[str],
    references: Refs,
    *,
    limit_length: bool = True,
    length_limit: int = 665,
    length_limit_type: str = "bytes",
    alpha: float = 0.5,
    stemming: bool = True,
    max_n: int | None = None,
    apply_avg: Any = True,
    apply_best: Any = False,
    weight_factor: float = 1.0,
    ensure_compatibility: Any = True,
) -> list[float]:
    """Per-sample ROUGE-L F, the best over the references, with py-rouge's arguments (RL4LMs' ``rouge_l_max``).

    RL4LMs builds py-rouge's ``Rouge(metrics=["rouge-l"], **args)`` and scores each reference alone.
    The arguments that change ROUGE-L are honoured with py-rouge's defaults: ``limit_length``,
    ``length_limit`` and ``length_limit_type`` (``"words"`` or ``"bytes"``) truncate the prediction and
    the reference, ``alpha`` weighs F as ``P * R / ((1 - alpha) * P + alpha * R)``, ``stemming``
    stems (Porter). The others are accepted and change nothing here: ``max_n`` picks ROUGE-N's n,
    ``weight_factor`` is ROUGE-W's, ``apply_avg``/``apply_best`` aggregate several references (RL4LMs
    passes one at a time), ``ensure_compatibility`` picks py-rouge's stemmer variant.
    LCS and tokens are rouge-score's (lower-cased alphanumeric words).

    Raises:
        ConfigError: If ``length_limit_type`` is not ``"words"`` or ``"bytes"``, or ``alpha`` is outside [0, 1].
    """
    _check(predictions, references, "rouge_l_max")
    if limit_length and length_limit_type not in ("words", "bytes"):
        raise ConfigError(
            f"rouge_l_max: length_limit_type={length_limit_type!r} is unknown; expected 'words' or 'bytes'."
        )
    if not 0.0 <= float(alpha) <= 1.0:
        raise ConfigError(f"rouge_l_max: alpha={alpha!r} is out of range; expected a number in [0, 1].")
    limit = bool(limit_length) and int(length_limit) > 0
    scorer = _rouge_scorer(("rougeL",), bool(stemming))
    scores = []
    for pred, refs in zip(predictions, references):
        if limit:
            pred = _limited(pred, int(length_limit), length_limit_type)
        best = 0.0
        for ref in refs:
            if limit:
                ref = _limited(ref, int(length_limit), length_limit_type)
            score = scorer.score(ref, pred)["rougeL"]
            p, r = float(score.precision), float(score.recall)
            if p > 0.0 and r > 0.0:
                best = max(best, p * r / ((1 - alpha) * p + alpha * r))
        scores.append(best)
    return scores


_WORD_TOKENIZER: Any = None


def _tokenize(text: str) -> list[str]:
    """NLTK's word tokenizer without its sentence splitter (which needs the punkt data)."""
    global _WORD_TOKENIZER
    if _WORD_TOKENIZER is None:
        tokenize: Any = require("nltk.tokenize", "metrics", "METEOR and the diversity metrics")
        _WORD_TOKENIZER = tokenize.NLTKWordTokenizer()
    tokens: list[str] = _WORD_TOKENIZER.tokenize(text)
    return tokens


def word_tokenize(text: str) -> list[str]:
    """Split a text into words and punctuation with NLTK's word tokenizer (no data download needed)."""
    return _tokenize(text)


def _wordnet() -> Any:
    corpus: Any = require("nltk.corpus", "metrics", "METEOR")
    try:
        corpus.wordnet.ensure_loaded()
    except LookupError as exc:
        raise MissingDependencyError(
            "METEOR needs NLTK's WordNet data, which is not installed. Fix: python -m nltk.downloader wordnet "
            "(or copy the nltk_data/corpora/wordnet folder to a directory listed in NLTK_DATA)."
        ) from exc
    return corpus.wordnet


def meteor_scores(predictions: Sequence[str], references: Refs, *, wordnet: Any = None) -> list[float]:
    """Per-sample METEOR (NLTK's, best over the references; HF ``meteor``'s corpus score is their mean).

    Args:
        predictions: The generated texts.
        references: Their references.
        wordnet: The synonym source (``nltk.corpus.wordnet`` by default).

    Raises:
        MissingDependencyError: When NLTK's WordNet data is not installed.
    """
    _check(predictions, references, "meteor")
    translate: Any = require("nltk.translate.meteor_score", "metrics", "METEOR")
    wn = wordnet if wordnet is not None else _wordnet()
    return [
        float(translate.meteor_score([_tokenize(r) for r in refs], _tokenize(pred), wordnet=wn))
        if refs
        else 0.0
        for pred, refs in zip(predictions, references)
    ]


def _ngrams(words: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i : i + n]) for k in range(1, n + 1) for i in range(len(words) - k + 1))


_CIDER_TOKEN = re.compile(r"\w+|[^\w\s]")


def cider_scores(
    predictions: Sequence[str], references: Refs, *, n: int = 4, sigma: float = 6.0
) -> tuple[float, list[float]]:
    """CIDEr-D (RL4LMs' ``caption_metrics/cider.py``, from CommonGen's evaluation): corpus and per-sample.

    Document frequencies come from the references of the whole batch, so per-sample scores depend on
    the batch: compute it over a split. Texts are lowercased and split into words and punctuation
    (RL4LMs tokenizes with spaCy's ``en_core_web_sm``, not installable offline; the two agree on
    plain sentences).

    Returns:
        ``(corpus score, per-sample scores)``; the corpus score is the mean of the per-sample ones.
    """
    _check(predictions, references, "cider")
    if not predictions:
        return 0.0, []

    def cook(text: str) -> Counter[tuple[str, ...]]:
        return _ngrams(_CIDER_TOKEN.findall(text.lower()), n)

    tests = [cook(p) for p in predictions]
    crefs = [[cook(r) for r in refs] for refs in references]
    doc_freq: Counter[tuple[str, ...]] = Counter(
        g for refs in crefs for g in {g for ref in refs for g in ref}
    )
    log_n = math.log(float(len(crefs)))

    def vec(counts: Counter[tuple[str, ...]]) -> tuple[list[dict[tuple[str, ...], float]], list[float], int]:
        v: list[dict[tuple[str, ...], float]] = [{} for _ in range(n)]
        norm = [0.0] * n
        length = 0
        for gram, tf in counts.items():
            k = len(gram) - 1
            v[k][gram] = float(tf) * (log_n - math.log(max(1.0, doc_freq[gram])))
            norm[k] += v[k][gram] ** 2
            if k == 1:  # RL4LMs counts the bigrams as the length (kept for identical scores)
                length += tf
        return v, [math.sqrt(x) for x in norm], length

    scores = []
    for test, refs in zip(tests, crefs):
        v_hyp, n_hyp, l_hyp = vec(test)
        total = [0.0] * n
        for ref in refs:
            v_ref, n_ref, l_ref = vec(ref)
            delta = float(l_hyp - l_ref)
            for k in range(n):
                val = sum(min(w, v_ref[k].get(g, 0.0)) * v_ref[k].get(g, 0.0) for g, w in v_hyp[k].items())
                if n_hyp[k] != 0 and n_ref[k] != 0:
                    val /= n_hyp[k] * n_ref[k]
                total[k] += val * math.exp(-(delta**2) / (2 * sigma**2))
        scores.append(10.0 * (sum(total) / n) / max(len(refs), 1))
    return sum(scores) / len(scores), scores


def diversity(predictions: Sequence[str], *, window_size: int = 100) -> dict[str, float]:
    """Diversity of a set of texts (RL4LMs' ``diversity``, GEM-metrics' MSTTR and n-gram statistics).

    Returns:
        ``msttr-{window_size}`` (mean type-token ratio over windows of that many tokens), and for
        n = 1, 2, 3: ``distinct-n`` (distinct n-grams / n-grams), ``unique-n`` (n-grams seen once),
        ``vocab_size-n`` and ``entropy-n`` (bits), plus ``mean_pred_length`` (tokens).
    """
    tokens = [[t.lower() for t in _tokenize(p)] for p in predictions]
    flat = [t for toks in tokens for t in toks]
    windows = [flat[i : i + window_size] for i in range(0, len(flat) - window_size + 1, window_size)]
    out = {
        f"msttr-{window_size}": sum(len(set(w)) / len(w) for w in windows) / len(windows) if windows else 0.0
    }
    for n in (1, 2, 3):
        counts: Counter[tuple[str, ...]] = Counter(
            tuple(toks[i : i + n]) for toks in tokens for i in range(len(toks) - n + 1)
        )
        total = sum(counts.values())
        out[f"distinct-{n}"] = len(counts) / total if total else 0.0
        out[f"unique-{n}"] = float(sum(1 for c in counts.values() if c == 1))
        out[f"vocab_size-{n}"] = float(len(counts))
        out[f"entropy-{n}"] = (
            -sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0
        )
    out["mean_pred_length"] = len(flat) / len(tokens) if tokens else 0.0
    return out


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.lru_cache(maxsize=4)
def _bert_scorer(model_type: str | None, lang: str, num_layers: int | None, batch_size: int) -> Any:
    bert_score: Any = require("bert_score", "metrics", "BERTScore")
    return bert_score.BERTScorer(
        model_type=model_type, lang=lang, num_layers=num_layers, batch_size=batch_size, device=_device()
    )


def bert_scores(
    predictions: Sequence[str],
    references: Refs,
    *,
    language: str = "en",
    model_type: str | None = None,
    num_layers: int | None = None,
    batch_size: int = 64,
) -> list[float]:
    """Per-sample BERTScore F1 (bert-score; the best over a sample's references; 0.0 without any, or when empty).

    Args:
        predictions: The generated texts.
        references: Their references.
        language: Picks bert-score's default model for the language (RL4LMs' ``language``).
        model_type: A hub id or local path of the encoder instead (then ``num_layers`` is needed
            unless bert-score knows the model).
        num_layers: Which hidden layer's embeddings are compared.
        batch_size: Texts per forward pass.
    """
    _check(predictions, references, "bert_score")
    # ToTTo's test references are [""]: a sample with no non-empty reference, or an empty prediction
    # (bert-score's own rule), scores 0.0; bert-score cannot encode an empty text with fast tokenizers
    refs = [[r for r in sample if r.strip()] for sample in references]
    scored = [i for i, r in enumerate(refs) if r and predictions[i].strip()]
    scores = [0.0] * len(predictions)
    if not scored:
        return scores
    scorer = _bert_scorer(model_type, language, num_layers, batch_size)
    _, _, f1 = scorer.score([predictions[i] for i in scored], [refs[i] for i in scored])
    for i, value in zip(scored, f1):
        scores[i] = float(value)
    return scores


@functools.lru_cache(maxsize=4)
def sequence_classifier(model_name: str) -> tuple[Any, Any]:
    """Load a ``transformers`` sequence classifier and its tokenizer once per name (eval mode).

    Args:
        model_name: A hub id or a local directory.

    Returns:
        ``(model, tokenizer)``; the tokenizer truncates on the left (RL4LMs' setting).
    """
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_name)
    tokenizer.truncation_side = "left"
    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_name).to(_device()).eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _logits(model_name: str, texts: Sequence[str], pairs: Sequence[str] | None, batch_size: int) -> Any:
    import torch

    model, tokenizer = sequence_classifier(model_name)
    chunks = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        second = list(pairs[start : start + batch_size]) if pairs is not None else None
        encoded = tokenizer(batch, second, return_tensors="pt", truncation=True, padding=True).to(
            model.device
        )
        with torch.no_grad():
            chunks.append(model(**encoded).logits.float().cpu())
    return torch.cat(chunks) if chunks else torch.zeros(0, 1)


def classifier_probabilities(
    model_name: str, texts: Sequence[str], label_ix: int, *, batch_size: int = 32
) -> list[float]:
    """Probability of label ``label_ix`` for each text under a sequence classifier, ``[B]``."""
    import torch

    if not texts:
        return []
    probs = torch.softmax(_logits(model_name, texts, None, batch_size), dim=-1)
    if not 0 <= label_ix < probs.shape[-1]:
        raise InputError(
            f"label_ix={label_ix} is out of range for {model_name!r}, which has {probs.shape[-1]} labels."
        )
    return [float(p) for p in probs[:, label_ix]]


def classifier_predictions(model_name: str, texts: Sequence[str], *, batch_size: int = 32) -> list[int]:
    """The most probable label of each text under a sequence classifier, ``[B]``."""
    if not texts:
        return []
    return [int(i) for i in _logits(model_name, texts, None, batch_size).argmax(dim=-1)]


def regression_scores(
    model_name: str, references: Sequence[str], predictions: Sequence[str], *, batch_size: int = 32
) -> list[float]:
    """Scores of ``(reference, prediction)`` pairs by a one-output regression model (BLEURT), ``[B]``."""
    if not predictions:
        return []
    logits = _logits(model_name, references, predictions, batch_size)
    return [float(x) for x in logits[:, 0]]


@functools.lru_cache(maxsize=2)
def _seq2seq(model_name: str) -> tuple[Any, Any]:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_name)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(model_name).to(_device()).eval()
    return model, tokenizer


def seq2seq_label_probability(
    model_name: str, texts: Sequence[str], positive: str, negative: str, *, batch_size: int = 8
) -> list[float]:
    """``P(positive) / (P(positive) + P(negative))`` of a seq2seq model's first output token per text, ``[B]``.

    The first token of each label word is compared (RL4LMs' CommonGen preference model: "good" / "bad").
    """
    import torch

    model, tokenizer = _seq2seq(model_name)
    pos_id = tokenizer(positive).input_ids[0]
    neg_id = tokenizer(negative).input_ids[0]
    start = model.config.decoder_start_token_id
    out: list[float] = []
    # an empty text (a completion of special tokens only) is fed as EOS alone, as T5's tokenizer encodes it;
    # a tokenizer that adds no EOS would give the encoder no token at all
    empty = tokenizer.eos_token or tokenizer.pad_token or ""
    for i in range(0, len(texts), batch_size):
        encoded = tokenizer(
            [t if t.strip() else empty for t in texts[i : i + batch_size]],
            return_tensors="pt",
            truncation=True,
            padding=True,
        )
        encoded = encoded.to(model.device)
        decoder_ids = torch.full((encoded.input_ids.shape[0], 1), start, device=model.device)
        with torch.no_grad():
            logits = model(**encoded, decoder_input_ids=decoder_ids).logits[:, 0].float()
        pair = torch.softmax(logits[:, [pos_id, neg_id]], dim=-1)
        out.extend(float(p) for p in pair[:, 0].cpu())
    return out


def perplexity(model: Any, tokenizer: Any, texts: Sequence[str], *, stride: int = 512) -> float:
    """Perplexity of the texts joined by blank lines under a causal LM, with a sliding window (HF's recipe).

    Args:
        model: A ``transformers`` causal LM.
        tokenizer: Its tokenizer.
        texts: The texts (RL4LMs: the references of a split).
        stride: Tokens the window moves by.
    """
    import torch

    ids = tokenizer("\n\n".join(texts), return_tensors="pt").input_ids
    config = model.config
    max_length = int(
        getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 1024
    )
    device = next(model.parameters()).device
    nll_sum = torch.zeros((), dtype=torch.float64)
    end = 0
    for i in range(0, ids.size(1), stride):
        begin, end = max(i + stride - max_length, 0), min(i + stride, ids.size(1))
        target_len = end - i
        window = ids[:, begin:end].to(device)
        labels = window.clone()
        labels[:, :-target_len] = -100
        with torch.no_grad():
            nll_sum += model(window, labels=labels).loss.double().cpu() * target_len
    return float(torch.exp(nll_sum / max(end, 1)))


def _parent_tokens(text: str) -> list[str]:
    tokenizer: Any = require("sacrebleu.tokenizers.tokenizer_13a", "metrics", "PARENT")
    tokens: list[str] = tokenizer.Tokenizer13a()(text.strip().lower()).split()
    return tokens


def totto_parent_tables(
    raw_table: Mapping[str, Any],
) -> tuple[list[tuple[list[str], list[str]]], list[tuple[list[str], list[str]]]]:
    """ToTTo's PARENT tables of one example: the whole table (precision) and the highlighted cells (recall).

    Entries are ``(attribute, value)`` token lists: ``header``/``cell`` values, then the page and section
    titles (and the section text, for precision), as ToTTo's ``table_to_text_utils`` writes them.
    """

    def entry(attribute: str, value: str) -> tuple[list[str], list[str]]:
        return _parent_tokens(attribute), _parent_tokens(value.replace("|", "-").lower())

    def cells(items: Sequence[Mapping[str, Any]]) -> list[tuple[list[str], list[str]]]:
        return [
            entry("header" if c["is_header"] else "cell", c["value"].strip())
            for c in items
            if c["value"].strip()
        ]

    titles = [(k, raw_table.get(f"table_{k}")) for k in ("page_title", "section_title")]
    extra = [entry(k, v) for k, v in titles if v]
    table = raw_table["table"]
    precision = cells([c for row in table for c in row]) + extra
    if raw_table.get("table_section_text"):
        precision.append(entry("section_text", raw_table["table_section_text"]))
    recall = cells([table[r][c] for r, c in raw_table["highlighted_cells"]]) + extra
    return precision, recall


def _lcs_length(x: Sequence[str], y: Sequence[str]) -> int:
    previous = [0] * (len(y) + 1)
    for a in x:
        current = [0]
        for j, b in enumerate(y):
            current.append(previous[j] + 1 if a == b else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def _entailed(gram: tuple[str, ...], values: set[str]) -> float:
    """ToTTo's ``overlap_probability``: the share of the n-gram's tokens among the table's values."""
    return sum(tok in values for tok in gram) / len(gram)


def _mentioned(value: list[str], sentence: list[str]) -> float:
    """ToTTo's ``_mention_probability``: LCS of the entry's value and the sentence over the value's length."""
    return _lcs_length(value, sentence) / len(value) if value else 0.0


def parent_scores(
    predictions: Sequence[str],
    references: Refs,
    precision_tables: Sequence[Sequence[tuple[list[str], list[str]]]],
    recall_tables: Sequence[Sequence[tuple[list[str], list[str]]]],
    *,
    lambda_weight: float | None = None,
    smoothing: float = 0.00001,
    max_order: int = 4,
) -> tuple[float, float, float, list[float]]:
    """PARENT (Dhingra et al. 2019) as ToTTo's ``totto_parent_eval.py`` computes it (word-overlap entailment).

    Texts are lowercased and tokenized with sacrebleu's 13a tokenizer. The best reference of each
    sample (by F-score) is kept. ``lambda_weight=None`` weighs table recall per reference, as ToTTo does.

    Returns:
        ``(mean precision, mean recall, mean F-score, per-sample F-scores)``.
    """
    _check(predictions, references, "parent")
    precisions: list[float] = []
    recalls: list[float] = []
    f_scores: list[float] = []
    for text, refs, prec_table, rec_table in zip(predictions, references, precision_tables, recall_tables):
        prediction = _parent_tokens(text)
        values = {tok for _, value in prec_table for tok in value}
        best: tuple[float, float, float] | None = None
        for ref_text in refs:
            reference = _parent_tokens(ref_text)
            ngram_prec, ngram_rec = [], []
            for order in range(1, max_order + 1):
                pred_counts = Counter(
                    tuple(prediction[i - order : i]) for i in range(order, len(prediction) + 1)
                )
                ref_counts = Counter(
                    tuple(reference[i - order : i]) for i in range(order, len(reference) + 1)
                )
                num = den = 0.0
                for gram, count in pred_counts.items():
                    in_ref = min(1.0, ref_counts.get(gram, 0) / count)
                    den += count
                    num += count * (in_ref + (1.0 - in_ref) * _entailed(gram, values))
                ngram_prec.append(num / den if den else 0.0)
                num = den = 0.0
                for gram, count in ref_counts.items():
                    in_pred = min(1.0, pred_counts.get(gram, 0) / count)
                    weight = _entailed(gram, values)
                    den += count * weight
                    num += count * weight * in_pred
                ngram_rec.append(num / den if den else 1.0)
            table_rec = (
                sum(_mentioned(value, prediction) for _, value in rec_table) / len(rec_table)
                if rec_table
                else 0.0
            )
            for k in range(1, max_order):
                ngram_prec[k] = ngram_prec[k] or smoothing
                ngram_rec[k] = ngram_rec[k] or smoothing
            w = 1.0 / max_order
            c_prec = (
                0.0
                if any(p == 0.0 for p in ngram_prec)
                else math.exp(math.fsum(w * math.log(p) for p in ngram_prec))
            )
            ref_rec = (
                smoothing
                if any(r == 0.0 for r in ngram_rec)
                else math.exp(math.fsum(w * math.log(r) for r in ngram_rec))
            )
            table_rec = table_rec or smoothing
            if lambda_weight is None:
                mention = (
                    sum(_mentioned(value, reference) for _, value in rec_table) / len(rec_table)
                    if rec_table
                    else 0.0
                )
                lw = 1.0 - mention
            else:
                lw = lambda_weight
            c_rec = math.exp((1.0 - lw) * math.log(ref_rec) + lw * math.log(table_rec))
            c_f = 2.0 * c_prec * c_rec / (c_prec + c_rec + 1e-8)
            if best is None or c_f > best[2]:
                best = (c_prec, c_rec, c_f)
        p, r, f = best if best is not None else (0.0, 0.0, 0.0)
        precisions.append(p)
        recalls.append(r)
        f_scores.append(f)
    n = max(1, len(f_scores))
    return sum(precisions) / n, sum(recalls) / n, sum(f_scores) / n, f_scores
