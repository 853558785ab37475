"""Evaluation metrics for text generation over a whole split, and their registry (RL4LMs' metric ids).

A metric maps a split's prompts, generated texts, references and per-sample metadata to named
scores, each a :class:`MetricValue` (the corpus-level score, and per-sample scores where the metric
has them). Corpus scores are computed as each metric defines them (corpus BLEU pools n-gram counts
over the split; it is not a mean of sentence BLEUs). Not to be confused with :mod:`llmgym.metrics`,
the run-metrics logger.

A metric function: ``fn(prompts, completions, references, metadata, *, context, **kwargs) ->
dict[str, MetricValue]``. Register yours with :func:`register_metric`, refer to it by name or as
``"package.module:function"``; :func:`compute_metrics` runs a list of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmgym.envs import text_scores
from llmgym.envs.registry import Registry
from llmgym.envs.rewards import (
    SPICE_ERROR,
    increasing_numbers,
    intent_matches,
    sentences_with_dates,
    totto_parent,
)
from llmgym.errors import ConfigError, MissingDependencyError
from llmgym.import_path import import_object

__all__ = [
    "MetricValue",
    "MetricContext",
    "MetricSpec",
    "register_metric",
    "list_text_metrics",
    "get_metric",
    "compute_metrics",
]


@dataclass(frozen=True)
class MetricValue:
    """One named score of a split.

    Attributes:
        corpus: The split-level score.
        per_sample: One score per sample, where the metric defines them; else ``None``.
    """

    corpus: float
    per_sample: tuple[float, ...] | None = None


@dataclass(frozen=True)
class MetricContext:
    """What a metric may need beyond the texts.

    Attributes:
        split: The split's name (``"val"``, ``"test"``...).
        model: The policy's ``transformers`` model (RL4LMs' ``causal_perplexity`` scores with it), or ``None``.
    """

    split: str = ""
    model: Any = None


@dataclass(frozen=True)
class MetricSpec:
    """A metric named in a config: its id (or ``"module:function"``) and keyword arguments.

    Attributes:
        id: A registered metric id or ``"package.module:function"``.
        args: Keyword arguments of the metric.
    """

    id: str
    args: Mapping[str, Any] | None = None


MetricFn = Callable[..., Mapping[str, MetricValue]]
_METRICS: Registry[MetricFn] = Registry(
    "metric",
    "Fix: pick one, give 'package.module:function', or register yours with llmgym.text_metrics.register_metric.",
)


def register_metric(name: str, fn: MetricFn | None = None, *, overwrite: bool = False) -> Callable[..., Any]:
    """Register a metric function under ``name`` (a call or a decorator, as ``register_reward``).

    Args:
        name: The id to refer to it by.
        fn: ``fn(prompts, completions, references, metadata, *, context, **kwargs) -> {name: MetricValue}``.
        overwrite: Whether to replace a metric already registered under ``name``.

    Returns:
        ``fn`` itself, or the decorator when ``fn`` is omitted.

    Raises:
        ConfigError: If ``name`` is taken and ``overwrite`` is false.
    """
    return _METRICS.register(name, fn, lambda func: func, overwrite=overwrite)


def list_text_metrics() -> list[str]:
    """Return the registered metric ids, sorted."""
    return _METRICS.names()


def get_metric(metric: str | MetricFn) -> MetricFn:
    """Resolve a metric id, ``"module:function"`` or function.

    Raises:
        ConfigError: If the id is not registered (with close names) or cannot be imported.
    """
    if callable(metric):
        return metric
    if metric in _METRICS or ":" not in metric:
        return _METRICS.get(metric)
    fn: MetricFn = import_object(metric, "metric")
    return fn


def compute_metrics(
    specs: Sequence[MetricSpec],
    prompts: Sequence[str],
    completions: Sequence[str],
    references: Sequence[Sequence[str]],
    metadata: Sequence[Mapping[str, Any]] | None = None,
    *,
    context: MetricContext | None = None,
) -> dict[str, MetricValue]:
    """Compute every metric of ``specs`` over one split.

    Args:
        specs: The metrics and their arguments.
        prompts: The split's prompts, ``[N]``.
        completions: The generated texts, ``[N]``.
        references: The references of each sample, ``[N]``.
        metadata: Each sample's metadata, ``[N]`` (empty dicts if omitted).
        context: The split name and the policy model.

    Returns:
        Every named score, e.g. ``{"lexical/bleu": MetricValue(0.31)}`` (RL4LMs' names).
    """
    metas = list(metadata) if metadata is not None else [{} for _ in prompts]
    ctx = context or MetricContext()
    out: dict[str, MetricValue] = {}
    for spec in specs:
        fn = get_metric(spec.id)
        out.update(
            fn(
                list(prompts),
                list(completions),
                [list(r) for r in references],
                metas,
                context=ctx,
                **dict(spec.args or {}),
            )
        )
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _per_sample(name: str, values: Sequence[float]) -> dict[str, MetricValue]:
    return {name: MetricValue(_mean(values), tuple(float(v) for v in values))}


Texts = Sequence[str]
Refs = Sequence[Sequence[str]]
Metas = Sequence[Mapping[str, Any]]


def _pass_through_metric(
    function: str, doc: str, compute: Callable[[Texts, Texts, Refs, dict[str, Any]], dict[str, MetricValue]]
) -> MetricFn:
    """A metric named ``function`` whose keyword arguments go to a scorer: ``compute(prompts, completions, references, args)``."""

    def metric(
        prompts: Texts,
        completions: Texts,
        references: Refs,
        metadata: Metas,
        *,
        context: MetricContext,
        **args: Any,
    ) -> dict[str, MetricValue]:
        return compute(prompts, completions, references, args)

    metric.__name__ = metric.__qualname__ = function
    metric.__doc__ = doc
    return metric


def _corpus_metric(function: str, name: str, score: Callable[..., float], what: str) -> MetricFn:
    """The metric named ``function`` whose one score, ``name``, is ``score(completions, references, **args)``."""
    return _pass_through_metric(
        function,
        f"{what} (RL4LMs' ``{name}``).",
        lambda prompts, completions, references, args: {
            name: MetricValue(score(completions, references, **args))
        },
    )


#: Corpus BLEU-4 on whitespace tokens.
bleu = register_metric(
    "bleu",
    _corpus_metric("bleu", "lexical/bleu", text_scores.bleu_corpus, "Corpus BLEU-4 on whitespace tokens"),
)
#: Sacrebleu's corpus BLEU / 100 (``args``: sacrebleu's).
sacre_bleu = register_metric(
    "sacre_bleu",
    _corpus_metric(
        "sacre_bleu", "lexical/sacrebleu", text_scores.sacrebleu_corpus, "Sacrebleu's corpus BLEU / 100"
    ),
)
#: Sacrebleu's corpus chrF / 100.
chrf = register_metric(
    "chrf", _corpus_metric("chrf", "lexical/chrf", text_scores.chrf_corpus, "Sacrebleu's corpus chrF / 100")
)
#: Sacrebleu's corpus TER / 100, lower is better.
ter = register_metric(
    "ter",
    _corpus_metric(
        "ter", "lexical/ter", text_scores.ter_corpus, "Sacrebleu's corpus TER / 100, lower is better"
    ),
)


@register_metric("rouge")
def rouge(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    use_single_ref: bool = True,
) -> dict[str, MetricValue]:
    """ROUGE-1/2/L/Lsum F, mean over the split (RL4LMs' ``lexical/rouge_*``)."""
    return {
        f"lexical/rouge_{t}": MetricValue(
            _mean(text_scores.rouge_scores(completions, references, t, use_single_ref=use_single_ref))
        )
        for t in ("rouge1", "rouge2", "rougeL", "rougeLsum")
    }


#: Best ROUGE-L F over the references, per sample and mean.
rouge_l_max = register_metric(
    "rouge_l_max",
    _pass_through_metric(
        "rouge_l_max",
        "Best ROUGE-L F over the references, per sample and mean (RL4LMs' ``lexical/rouge_l_max``).\n\n"
        "``args`` are RL4LMs' py-rouge arguments (:func:`llmgym.envs.text_scores.rouge_l_max_scores`).",
        lambda prompts, completions, references, args: _per_sample(
            "lexical/rouge_l_max", text_scores.rouge_l_max_scores(completions, references, **args)
        ),
    ),
)


@register_metric("meteor")
def meteor(
    prompts: Texts, completions: Texts, references: Refs, metadata: Metas, *, context: MetricContext
) -> dict[str, MetricValue]:
    """Mean METEOR over the split (NLTK; needs its WordNet data; RL4LMs' ``lexical/meteor``)."""
    return {"lexical/meteor": MetricValue(_mean(text_scores.meteor_scores(completions, references)))}


@register_metric("cider")
def cider(
    prompts: Texts, completions: Texts, references: Refs, metadata: Metas, *, context: MetricContext
) -> dict[str, MetricValue]:
    """CIDEr-D over the split, idf from the split's references (RL4LMs' ``lexical/cider``)."""
    corpus, scores = text_scores.cider_scores(completions, references)
    return {"lexical/cider": MetricValue(corpus, tuple(scores))}


@register_metric("spice")
def spice(
    prompts: Texts, completions: Texts, references: Refs, metadata: Metas, *, context: MetricContext
) -> dict[str, MetricValue]:
    """RL4LMs' ``lexical/spice``: raises, SPICE needs Java and CoreNLP models.

    Raises:
        MissingDependencyError: Always.
    """
    raise MissingDependencyError(SPICE_ERROR)


@register_metric("diversity")
def diversity(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    window_size: int = 100,
) -> dict[str, MetricValue]:
    """MSTTR, distinct-n, unique-n, vocabulary size, n-gram entropy, mean length (RL4LMs' ``diversity_metrics/*``)."""
    stats = text_scores.diversity(completions, window_size=window_size)
    return {f"diversity_metrics/{k}": MetricValue(v) for k, v in stats.items()}


@register_metric("learned_reward")
def learned_reward(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    model_name: str,
    label_ix: int,
    batch_size: int = 32,
    include_prompt_for_eval: bool = True,
) -> dict[str, MetricValue]:
    """Classifier probability of ``label_ix`` per sample (RL4LMs' ``semantic/learned_automodel_metric``)."""
    texts = [(p if include_prompt_for_eval else "") + c for p, c in zip(prompts, completions)]
    scores = text_scores.classifier_probabilities(model_name, texts, label_ix, batch_size=batch_size)
    return _per_sample("semantic/learned_automodel_metric", scores)


@register_metric("bert_score")
def bert_score(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    language: str = "en",
    model_type: str | None = None,
    num_layers: int | None = None,
) -> dict[str, MetricValue]:
    """BERTScore F1 per sample and mean (bert-score; RL4LMs' ``semantic/bert_score``)."""
    scores = text_scores.bert_scores(
        completions, references, language=language, model_type=model_type, num_layers=num_layers
    )
    return _per_sample("semantic/bert_score", scores)


@register_metric("bleurt")
def bleurt(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    config_name: str | None = None,
) -> dict[str, MetricValue]:
    """BLEURT per sample (first reference) and mean (RL4LMs' ``semantic/bleurt``).

    ``config_name``: a PyTorch BLEURT checkpoint (default ``Elron/bleurt-base-512``).
    """
    model = config_name or "Elron/bleurt-base-512"
    scores = text_scores.regression_scores(model, [r[0] if r else "" for r in references], completions)
    return _per_sample("semantic/bleurt", scores)


@register_metric("intent_accuracy")
def intent_accuracy(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    model_name: str = "rajkumarrrk/roberta-daily-dialog-intent-classifier",
) -> dict[str, MetricValue]:
    """DailyDialog intent accuracy (RL4LMs' ``intent/accuracy``; ``model_name`` replaces its fixed classifier)."""
    return _per_sample("intent/accuracy", intent_matches(prompts, completions, metadata, model_name))


@register_metric("causal_perplexity")
def causal_perplexity(
    prompts: Texts,
    completions: Texts,
    references: Refs,
    metadata: Metas,
    *,
    context: MetricContext,
    tokenizer_id: str,
    stride: int = 512,
    model_type: str = "causal",
    use_text_from_meta_data: bool = False,
) -> dict[str, MetricValue]:
    """Perplexity of the split's references under the policy model (RL4LMs' ``fluency_metrics/perplexity``).

    Skipped on the train split, as RL4LMs does. The texts are ``metadata["reference"]`` with
    ``use_text_from_meta_data``, else every reference.

    Raises:
        ConfigError: If ``model_type`` is not ``"causal"`` or no model is given in the context.
    """
    if context.split == "train":
        return {}
    if model_type != "causal" or context.model is None:
        raise ConfigError(
            f"causal_perplexity needs a causal policy model (model_type={model_type!r}, model given: "
            f"{context.model is not None}); expected model_type='causal' and a causal LM policy."
        )
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_id)
    texts = (
        [m["reference"] for m in metadata]
        if use_text_from_meta_data
        else [r for refs in references for r in refs]
    )
    return {
        "fluency_metrics/perplexity": MetricValue(
            text_scores.perplexity(context.model, tokenizer, texts, stride=stride)
        )
    }


#: The ``increasing_numbers`` reward per sample (``args``: the reward's, e.g. ``min_tokens``).
increasing_numbers_metric = register_metric(
    "increasing_numbers",
    _pass_through_metric(
        "increasing_numbers_metric",
        "The ``increasing_numbers`` reward per sample (RL4LMs' ``synthetic/increasing_numbers_in_text``).",
        lambda prompts, completions, references, args: _per_sample(
            "synthetic/increasing_numbers_in_text",
            [increasing_numbers(p, c, r, **args) for p, c, r in zip(prompts, completions, references)],
        ),
    ),
)


@register_metric("dates")
def dates(
    prompts: Texts, completions: Texts, references: Refs, metadata: Metas, *, context: MetricContext
) -> dict[str, MetricValue]:
    """Whether each text holds a ``YYYY-MM-DD`` date (RL4LMs' ``synthetic/dates_in_text``)."""
    return _per_sample(
        "synthetic/dates_in_text",
        [sentences_with_dates(p, c, r) for p, c, r in zip(prompts, completions, references)],
    )


def _summac_metric(kind: str, name: str, what: str) -> MetricFn:
    """The metric of SummaC model ``kind`` (the ``summac`` package): each summary's consistency with its prompt."""

    def compute(
        prompts: Texts, completions: Texts, references: Refs, summac_args: dict[str, Any]
    ) -> dict[str, MetricValue]:
        module: Any = text_scores.require_optional("summac.model_summac", "summac", f"The '{kind}' metric")
        scorer = getattr(module, kind)(**summac_args)
        return _per_sample(name, [float(s) for s in scorer.score(list(prompts), list(completions))["scores"]])

    return _pass_through_metric(
        f"summac_{kind[len('SummaC') :].lower()}",
        f"{what} (the ``summac`` package; RL4LMs' ``{name}``); ``args`` build SummaC's ``{kind}``.",
        compute,
    )


#: SummaC-ZS consistency of each summary with its prompt.
summac_zs = register_metric(
    "summaCZS",
    _summac_metric(
        "SummaCZS", "consistency/summaczs", "SummaC-ZS consistency of each summary with its prompt"
    ),
)
#: SummaC-Conv consistency of each summary with its prompt.
summac_conv = register_metric(
    "summaCConv",
    _summac_metric(
        "SummaCConv", "consistency/summacconv", "SummaC-Conv consistency of each summary with its prompt"
    ),
)


@register_metric("bleu_totto")
def bleu_totto(
    prompts: Texts, completions: Texts, references: Refs, metadata: Metas, *, context: MetricContext
) -> dict[str, MetricValue]:
    """ToTTo's BLEU (sacrebleu) overall and on its overlap / non-overlap subsets (RL4LMs' ``table_to_text/bleu_*``).

    References and subsets come from ``metadata["raw_table"]`` (the totto datapool's).
    """
    groups: dict[str, tuple[list[str], list[list[str]]]] = {
        "overall": ([], []),
        "overlap": ([], []),
        "non_overlap": ([], []),
    }
    for completion, meta in zip(completions, metadata):
        table = meta["raw_table"]
        refs = [a["final_sentence"] for a in table["sentence_annotations"]]
        for group in ("overall", "overlap" if table["overlap_subset"] else "non_overlap"):
            groups[group][0].append(completion)
            groups[group][1].append(refs)
    return {
        f"table_to_text/bleu_{g}": MetricValue(text_scores.sacrebleu_corpus(p, r) if p else 0.0)
        for g, (p, r) in groups.items()
    }


@register_metric("parent_totto")
def parent_totto(
    prompts: Texts, completions: Texts, references: Refs, metadata: Metas, *, context: MetricContext
) -> dict[str, MetricValue]:
    """ToTTo's PARENT precision, recall and F overall and on its overlap / non-overlap subsets.

    RL4LMs' ``table_to_text/parent_*`` names; per-sample F-scores on ``parent_overall_f_score``.
    """
    out: dict[str, MetricValue] = {}
    overlap = [bool(m["raw_table"]["overlap_subset"]) for m in metadata]
    for name, keep in (
        ("parent_overall", [True] * len(overlap)),
        ("parent_overlap", overlap),
        ("parent_non_overlap", [not o for o in overlap]),
    ):
        rows = [i for i, k in enumerate(keep) if k]
        precision, recall, f_score, all_f = totto_parent(
            [completions[i] for i in rows], [metadata[i] for i in rows]
        )
        out[f"table_to_text/{name}/precision"] = MetricValue(precision)
        out[f"table_to_text/{name}/recall"] = MetricValue(recall)
        per_sample = tuple(all_f) if name == "parent_overall" else None
        out[f"table_to_text/{name}_f_score"] = MetricValue(f_score, per_sample)
    return out
