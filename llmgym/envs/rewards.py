"""Reward functions for text-generation tasks, and their registry (RL4LMs' reward ids included).

A reward function scores one completion: ``fn(prompt, completion, references, **kwargs) -> float``.
It may also declare keyword parameters ``metadata`` (the sample's :attr:`~llmgym.envs.datapools.Sample.metadata`)
and ``done`` (whether the episode ends at this step). Register it with :func:`register_reward`:

* ``batched=True``: the function scores lists instead, ``fn(prompts, completions, references,
  **kwargs) -> list[float]`` (RL4LMs' ``BatchedRewardFunction``: one classifier forward for many texts);
* ``dense=True``: in ``llmgym/TextGen-v0``'s token mode it is called on every step (with ``done``),
  not only at the end (RL4LMs calls every reward on every step; all of its own return 0 until done).

Refer to a reward by its registered name or as ``"package.module:function"`` (YAML configs too).
:func:`get_reward` resolves either into a :class:`Reward`.

Shipped, llmgym's: ``exact_match``, ``contains_reference``, ``keywords``, ``length_penalty``,
``sentiment`` (a small lexicon). RL4LMs' ids, same semantics (see ``docs/textgen.md``): ``bleu``,
``sacre_bleu``, ``chrf``, ``ter``, ``rouge``, ``rouge_combined``, ``rouge_l_max``, ``meteor``,
``bert_score``, ``bleurt``, ``learned_reward``, ``intent_accuracy``, ``common_gen_repeat_penalty``,
``common_gen_repeat_penalty_batched``, ``common_gen_preference_model``, ``increasing_numbers``,
``sentences_with_dates``, ``parent`` and ``spider`` (SPICE: raises
:class:`~llmgym.errors.MissingDependencyError`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llmgym.envs import text_scores
from llmgym.envs.registry import Registry
from llmgym.errors import ConfigError, InputError, MissingDependencyError
from llmgym.import_path import import_object

__all__ = [
    "RewardFn",
    "BatchedRewardFn",
    "Reward",
    "register_reward",
    "get_reward",
    "list_rewards",
]


class RewardFn(Protocol):
    """A reward function: ``fn(prompt, completion, references, **kwargs) -> float``."""

    def __call__(self, prompt: str, completion: str, references: Sequence[str], /, **kwargs: Any) -> float:
        """Score ``completion`` of ``prompt`` against ``references``."""
        ...


class BatchedRewardFn(Protocol):
    """A batched reward function: ``fn(prompts, completions, references, **kwargs) -> list[float]``."""

    def __call__(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        references: Sequence[Sequence[str]],
        /,
        **kwargs: Any,
    ) -> Sequence[float]:
        """Score ``completions[i]`` of ``prompts[i]`` against ``references[i]``, ``[B]``."""
        ...


@dataclass(frozen=True)
class _Entry:
    fn: Callable[..., Any]
    batched: bool
    dense: bool


_REWARDS: Registry[_Entry] = Registry(
    "reward",
    "Fix: pick one of these, give 'package.module:function', or register yours with llmgym.envs.register_reward.",
)


def register_reward(
    name: str,
    fn: Callable[..., Any] | None = None,
    *,
    batched: bool = False,
    dense: bool = False,
    overwrite: bool = False,
) -> Callable[..., Any]:
    """Register a reward function under ``name``.

    Use as ``register_reward("mine", fn)`` or as a decorator ``@register_reward("mine")``.

    Args:
        name: The name to refer to it by.
        fn: The function (see the module docstring for its signature); omitted for the decorator form.
        batched: Whether ``fn`` scores lists of prompts, completions and references at once.
        dense: Whether ``fn`` is called on every token step (with ``done``), not only at the end.
        overwrite: Whether to replace a function already registered under ``name``.

    Returns:
        ``fn`` itself, or the decorator when ``fn`` is omitted.

    Raises:
        ConfigError: If ``name`` is taken and ``overwrite`` is false.
    """
    return _REWARDS.register(name, fn, lambda func: _Entry(func, batched, dense), overwrite=overwrite)


def list_rewards() -> list[str]:
    """Return the registered reward names, sorted."""
    return _REWARDS.names()


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class Reward:
    """A resolved reward: its function, bound keyword arguments, and whether it is batched or dense.

    Call it on one sample (``reward(prompt, completion, references, metadata=..., done=...)``) or on
    many (:meth:`batch`); either way a batched function gets lists and a per-sample one gets one
    sample at a time. A reward that is not dense scores 0.0 until ``done``. Scores come back as the
    function returns them; ``llmgym/TextGen-v0`` checks each one (a finite number, ``reward_clip``).

    Args:
        fn: The reward function.
        kwargs: Keyword arguments bound to it.
        batched: Whether ``fn`` takes lists.
        dense: Whether ``fn`` is called before the end of an episode too.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        batched: bool = False,
        dense: bool = False,
    ) -> None:
        self.fn = fn
        self.kwargs = dict(kwargs or {})
        self.batched = batched
        self.dense = dense
        self._takes_metadata = _accepts(fn, "metadata")
        self._takes_done = _accepts(fn, "done")
        if dense and not self._takes_done:
            raise ConfigError(
                f"reward {getattr(fn, '__name__', fn)!r} is registered dense but takes no 'done' argument; expected "
                "fn(..., done: bool) so that it can tell the last step. Fix: add the parameter or register it dense=False."
            )

    def __call__(
        self,
        prompt: str,
        completion: str,
        references: Sequence[str],
        *,
        metadata: Mapping[str, Any] | None = None,
        done: bool = True,
    ) -> float:
        """Score one completion (0.0 before ``done`` unless the reward is dense)."""
        return self.batch([prompt], [completion], [references], [metadata or {}], [done])[0]

    def batch(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        references: Sequence[Sequence[str]],
        metadata: Sequence[Mapping[str, Any]] | None = None,
        dones: Sequence[bool] | None = None,
    ) -> list[float]:
        """Score many completions at once, ``[B]`` (0.0 where not done, unless the reward is dense).

        Raises:
            InputError: If the lists differ in length or the function returns the wrong number of scores.
        """
        size = len(prompts)
        metas = list(metadata) if metadata is not None else [{}] * size
        done_flags = list(dones) if dones is not None else [True] * size
        if not len(completions) == len(references) == len(metas) == len(done_flags) == size:
            raise InputError(
                f"reward batch of {size} prompts got {len(completions)} completions, {len(references)} reference "
                f"lists, {len(metas)} metadata and {len(done_flags)} done flags; expected as many of each."
            )
        rows = [i for i in range(size) if self.dense or done_flags[i]]
        scores = [0.0] * size
        if not rows:
            return scores
        extra: dict[str, Any] = dict(self.kwargs)
        if self.batched:
            if self._takes_metadata:
                extra["metadata"] = [metas[i] for i in rows]
            if self._takes_done:
                extra["done"] = [done_flags[i] for i in rows]
            values = list(
                self.fn(
                    [prompts[i] for i in rows],
                    [completions[i] for i in rows],
                    [list(references[i]) for i in rows],
                    **extra,
                )
            )
            if len(values) != len(rows):
                raise InputError(
                    f"batched reward {getattr(self.fn, '__name__', self.fn)!r} returned {len(values)} scores for "
                    f"{len(rows)} completions; expected one each."
                )
        else:
            values = []
            for i in rows:
                if self._takes_metadata:
                    extra["metadata"] = metas[i]
                if self._takes_done:
                    extra["done"] = done_flags[i]
                values.append(self.fn(prompts[i], completions[i], list(references[i]), **extra))
        for i, value in zip(rows, values):
            scores[i] = value  # as returned: the env checks it (llmgym.envs.reward_checks)
        return scores


def get_reward(reward: str | Callable[..., Any] | Reward, **kwargs: Any) -> Reward:
    """Resolve a reward name, ``"module:function"`` or callable into a :class:`Reward`.

    Args:
        reward: A registered name, ``"package.module:function"``, a per-sample reward function or a
            :class:`Reward`.
        **kwargs: Keyword arguments bound to the function (e.g. ``keywords=[...]``).

    Returns:
        The reward with ``kwargs`` bound.

    Raises:
        ConfigError: If the name is not registered (the message suggests close names) or cannot be
            imported.
    """
    if isinstance(reward, Reward):
        return Reward(reward.fn, {**reward.kwargs, **kwargs}, batched=reward.batched, dense=reward.dense)
    if callable(reward):
        return Reward(reward, kwargs)
    if reward in _REWARDS or ":" not in reward:
        entry = _REWARDS.get(reward)
        return Reward(entry.fn, kwargs, batched=entry.batched, dense=entry.dense)
    return Reward(import_object(reward, "reward"), kwargs)


def _shaped(
    score: float,
    shaping_fn: str | None,
    prompt: str,
    completion: str,
    references: Sequence[str],
    metadata: Mapping[str, Any] | None,
) -> float:
    """RL4LMs' ``shaping_fn``: another registered reward added to the score."""
    if shaping_fn is None:
        return score
    return score + get_reward(shaping_fn)(prompt, completion, references, metadata=metadata)


def _normalize(text: str, ignore_case: bool) -> str:
    text = " ".join(text.split())
    return text.lower() if ignore_case else text


# ---------------------------------------------------------------------------------- llmgym's own
@register_reward("exact_match")
def exact_match(
    prompt: str, completion: str, references: Sequence[str], *, ignore_case: bool = False
) -> float:
    """1.0 if the completion equals a reference (blanks normalised), else 0.0."""
    done = _normalize(completion, ignore_case)
    return float(any(done == _normalize(ref, ignore_case) for ref in references))


@register_reward("contains_reference")
def contains_reference(
    prompt: str, completion: str, references: Sequence[str], *, ignore_case: bool = True
) -> float:
    """1.0 if a reference (the target sequence) appears in the completion, else 0.0."""
    done = _normalize(completion, ignore_case)
    return float(any(_normalize(ref, ignore_case) in done for ref in references))


@register_reward("keywords")
def keywords(
    prompt: str, completion: str, references: Sequence[str], *, keywords: Sequence[str] | None = None
) -> float:
    """Fraction of the keywords (default: the references) found in the completion, case-insensitive."""
    wanted = list(keywords) if keywords is not None else list(references)
    if not wanted:
        return 0.0
    done = completion.lower()
    return sum(word.lower() in done for word in wanted) / len(wanted)


@register_reward("length_penalty")
def length_penalty(
    prompt: str, completion: str, references: Sequence[str], *, target_length: int = 20
) -> float:
    """``-|words - target_length| / target_length``: 0 at the target length, negative elsewhere."""
    if target_length < 1:
        raise ConfigError(f"target_length={target_length!r} is invalid; expected an int >= 1.")
    return -abs(len(completion.split()) - target_length) / target_length


_POSITIVE = frozenset(
    "good great excellent amazing wonderful fantastic love loved lovely best brilliant enjoy enjoyed "
    "beautiful perfect superb delightful happy fun favorite awesome nice pleasant charming moving".split()
)
_NEGATIVE = frozenset(
    "bad terrible awful horrible worst hate hated boring dull poor waste disappointing disappointed "
    "stupid ugly annoying sad mess weak lame mediocre painful pointless".split()
)
_WORD = re.compile(r"[a-z']+")


@register_reward("sentiment")
def sentiment(prompt: str, completion: str, references: Sequence[str]) -> float:
    """Lexicon sentiment in [-1, 1]: (positive - negative) / (positive + negative) words, 0 if none."""
    words = _WORD.findall(completion.lower())
    pos = sum(w in _POSITIVE for w in words)
    neg = sum(w in _NEGATIVE for w in words)
    return (pos - neg) / (pos + neg) if pos + neg else 0.0


# ---------------------------------------------------------------------------------- RL4LMs' lexical
@register_reward("bleu")
def bleu(prompt: str, completion: str, references: Sequence[str]) -> float:
    """BLEU-4 of the completion on whitespace tokens, unsmoothed, in [0, 1] (RL4LMs' ``bleu``)."""
    return text_scores.bleu_corpus([completion], [references])


@register_reward("sacre_bleu")
def sacre_bleu(
    prompt: str,
    completion: str,
    references: Sequence[str],
    *,
    tokenize: str | None = None,
    lowercase: bool = False,
    smooth_method: str = "exp",
    smooth_value: float | None = None,
    force: bool = False,
    use_effective_order: bool = False,
) -> float:
    """Sacrebleu's BLEU of the completion in [0, 1] (RL4LMs' ``sacre_bleu``).

    The arguments are those of HF's ``sacrebleu`` metric, which RL4LMs passes them to (e.g. its
    dialog and IWSLT configs' ``tokenize: intl``); ``tokenize=None`` is sacrebleu's default (``13a``).
    """
    args: dict[str, Any] = {
        "lowercase": lowercase,
        "smooth_method": smooth_method,
        "smooth_value": smooth_value,
        "force": force,
        "use_effective_order": use_effective_order,
    }
    if tokenize is not None:
        args["tokenize"] = tokenize
    return text_scores.sacrebleu_corpus([completion], [references], **args)


@register_reward("chrf")
def chrf(prompt: str, completion: str, references: Sequence[str]) -> float:
    """Sacrebleu's chrF of the completion in [0, 1] (RL4LMs' ``chrf``)."""
    return text_scores.chrf_corpus([completion], [references])


@register_reward("ter")
def ter(prompt: str, completion: str, references: Sequence[str]) -> float:
    """``1 - TER/100`` of the completion (sacrebleu; higher is better, RL4LMs' ``ter``)."""
    return 1.0 - text_scores.ter_corpus([completion], [references])


@register_reward("rouge")
def rouge(
    prompt: str,
    completion: str,
    references: Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    rouge_type: str = "rougeL",
    use_single_ref: bool = True,
    shaping_fn: str | None = None,
) -> float:
    """ROUGE F-measure (``rouge_type``) against the first reference, or the best with ``use_single_ref=False``.

    ``shaping_fn`` names a reward added to it (RL4LMs' ``rouge``).
    """
    if not references:
        return 0.0
    score = text_scores.rouge_scores([completion], [references], rouge_type, use_single_ref=use_single_ref)[0]
    return _shaped(score, shaping_fn, prompt, completion, references, metadata)


@register_reward("rouge_combined")
def rouge_combined(
    prompt: str,
    completion: str,
    references: Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    shaping_fn: str | None = None,
) -> float:
    """Mean of ROUGE-1, ROUGE-2 and ROUGE-L F against the first reference (RL4LMs' ``rouge_combined``)."""
    if not references:
        return 0.0
    score = (
        sum(
            text_scores.rouge_scores([completion], [references], t)[0] for t in ("rouge1", "rouge2", "rougeL")
        )
        / 3
    )
    return _shaped(score, shaping_fn, prompt, completion, references, metadata)


@register_reward("rouge_l_max")
def rouge_l_max(
    prompt: str,
    completion: str,
    references: Sequence[str],
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
) -> float:
    """The best ROUGE-L F over the references (RL4LMs' ``rouge_l_max``).

    The arguments are py-rouge's, as NarrativeQA's configs give them; what each does is
    :func:`llmgym.envs.text_scores.rouge_l_max_scores`'s.
    """
    return text_scores.rouge_l_max_scores(
        [completion],
        [references],
        limit_length=limit_length,
        length_limit=length_limit,
        length_limit_type=length_limit_type,
        alpha=alpha,
        stemming=stemming,
        max_n=max_n,
        apply_avg=apply_avg,
        apply_best=apply_best,
        weight_factor=weight_factor,
        ensure_compatibility=ensure_compatibility,
    )[0]


@register_reward("meteor")
def meteor(
    prompt: str,
    completion: str,
    references: Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    shaping_fn: str | None = None,
) -> float:
    """METEOR of the completion (NLTK; needs its WordNet data), plus ``shaping_fn`` (RL4LMs' ``meteor``)."""
    score = text_scores.meteor_scores([completion], [references])[0]
    return _shaped(score, shaping_fn, prompt, completion, references, metadata)


_COMMONGEN_PREFIX = "generate a sentence with: "


@register_reward("common_gen_repeat_penalty")
def common_gen_repeat_penalty(prompt: str, completion: str, references: Sequence[str]) -> float:
    """-1 if the completion repeats CommonGen's prompt (its concepts or instruction words), else 0.

    The prompt must contain ``"generate a sentence with: "`` (RL4LMs' prompt prefix for this penalty).
    """
    if _COMMONGEN_PREFIX not in prompt:
        raise InputError(
            f"common_gen_repeat_penalty needs prompts containing {_COMMONGEN_PREFIX!r}; got {prompt!r:.100}. "
            "Fix: set the commongen datapool's prefix to 'generate a sentence with: '."
        )
    concepts = prompt.split(_COMMONGEN_PREFIX)[1][:-1].lower()
    text = completion.lower()
    repeated = concepts in text or _COMMONGEN_PREFIX in text or "generate" in text or "sentence" in text
    return -1.0 if repeated else 0.0


@register_reward("common_gen_repeat_penalty_batched", batched=True)
def common_gen_repeat_penalty_batched(
    prompts: Sequence[str], completions: Sequence[str], references: Sequence[Sequence[str]]
) -> list[float]:
    """The batched form of ``common_gen_repeat_penalty``."""
    return [common_gen_repeat_penalty(p, c, r) for p, c, r in zip(prompts, completions, references)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@register_reward("increasing_numbers")
def increasing_numbers(
    prompt: str, completion: str, references: Sequence[str], *, min_tokens: int = 20
) -> float:
    """RL4LMs' synthetic task: the increasing run of numbers opening the completion, per word.

    The length of that run divided by ``max(words, min_tokens / 2)``.
    """
    words = completion.split()
    numbers = [float(w) for w in words if _is_number(w)]
    if not numbers:
        return 0.0
    run, previous = 1, numbers[0]
    for value in numbers[1:]:
        if value <= previous:
            break
        run, previous = run + 1, value
    return run / max(len(words), min_tokens / 2)


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@register_reward("sentences_with_dates")
def sentences_with_dates(prompt: str, completion: str, references: Sequence[str]) -> float:
    """1.0 if the completion holds a ``YYYY-MM-DD`` date, else 0.0 (RL4LMs' synthetic task)."""
    return 1.0 if _DATE.search(completion) else 0.0


# ---------------------------------------------------------------------------------- RL4LMs' model-based
@register_reward("learned_reward", batched=True)
def learned_reward(
    prompts: Sequence[str],
    completions: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    model_name: str,
    label_ix: int,
    include_prompt_for_eval: bool = True,
    batch_size: int = 32,
) -> list[float]:
    """Probability of label ``label_ix`` under a sequence classifier (RL4LMs' ``learned_reward``).

    The classifier reads the prompt followed by the completion (or the completion alone), truncated
    on the left; e.g. ``model_name="lvwerra/distilbert-imdb", label_ix=1`` for IMDB positive sentiment.
    """
    texts = [(p if include_prompt_for_eval else "") + c for p, c in zip(prompts, completions)]
    return text_scores.classifier_probabilities(model_name, texts, label_ix, batch_size=batch_size)


@register_reward("bert_score")
def bert_score(
    prompt: str,
    completion: str,
    references: Sequence[str],
    *,
    language: str = "en",
    model_type: str | None = None,
    num_layers: int | None = None,
) -> float:
    """BERTScore F1 of the completion, the best over the references (bert-score; RL4LMs' ``bert_score``)."""
    if not references:
        return 0.0
    return text_scores.bert_scores(
        [completion], [references], language=language, model_type=model_type, num_layers=num_layers
    )[0]


_BLEURT_DEFAULT = "Elron/bleurt-base-512"


@register_reward("bleurt")
def bleurt(
    prompt: str, completion: str, references: Sequence[str], *, checkpoint: str | None = None
) -> float:
    """BLEURT of the completion, the best over the references (RL4LMs' ``bleurt``).

    ``checkpoint`` is a PyTorch BLEURT regression model (default ``Elron/bleurt-base-512``, the
    transformers port of Google's BLEURT-base-512; any one-output sequence-classification model).
    """
    if not references:
        return 0.0
    model = checkpoint or _BLEURT_DEFAULT
    return max(text_scores.regression_scores(model, list(references), [completion] * len(references)))


_INTENT_CLASSIFIER = "rajkumarrrk/roberta-daily-dialog-intent-classifier"
EOU_TOKEN = "<EOU>"


def intent_matches(
    prompts: Sequence[str], completions: Sequence[str], metadata: Sequence[Mapping[str, Any]], model_name: str
) -> list[float]:
    """1.0 where DailyDialog's intent classifier gives the sample's intent (``metadata["intent"][0] - 1``).

    The classifier reads the prompt's last utterance (split on ``<EOU>``) followed by the completion.
    """
    texts = []
    for prompt, completion in zip(prompts, completions):
        history = [u for u in prompt.split(EOU_TOKEN) if u != ""]
        texts.append((history[-1] if history else "") + completion)
    try:
        targets = [int(meta["intent"][0]) - 1 for meta in metadata]
    except (KeyError, IndexError, TypeError) as exc:
        raise InputError(
            "intent_accuracy needs each sample's metadata['intent'] (DailyDialog's act labels, 1-4); use the "
            "daily_dialog datapool."
        ) from exc
    predicted = text_scores.classifier_predictions(model_name, texts)
    return [float(p == t) for p, t in zip(predicted, targets)]


@register_reward("intent_accuracy", batched=True)
def intent_accuracy(
    prompts: Sequence[str],
    completions: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    metadata: Sequence[Mapping[str, Any]],
    shape: bool = True,
    intent_coeff: float = 1.0,
    auto_coeff: float = 1.0,
    model_name: str = _INTENT_CLASSIFIER,
) -> list[float]:
    """DailyDialog intent match times ``intent_coeff``, plus METEOR times ``auto_coeff`` when ``shape``.

    RL4LMs' ``intent_accuracy``; ``model_name`` replaces RL4LMs' fixed intent classifier.
    """
    scores = [intent_coeff * s for s in intent_matches(prompts, completions, metadata, model_name)]
    if shape:
        meteor_scores = text_scores.meteor_scores(completions, references)
        scores = [s + auto_coeff * m for s, m in zip(scores, meteor_scores)]
    return scores


@register_reward("common_gen_preference_model", batched=True)
def common_gen_preference_model(
    prompts: Sequence[str],
    completions: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    metadata: Sequence[Mapping[str, Any]],
    model_name: str,
    batch_size: int = 8,
    concept_penalty_coeff: float = 0.0,
    meteor_coeff: float = 0.0,
    model_type: str | None = None,
    device: str | None = None,
) -> list[float]:
    """RL4LMs' CommonGen preference reward.

    ``P(good) / (1 + concept_penalty_coeff * missing concepts) + meteor_coeff * METEOR``.

    ``P(good)`` is the seq2seq preference model's first-token probability of ``"good"`` against
    ``"bad"``. RL4LMs downloads its T5-11B checkpoint from a URL (``model_type="11b"``); here
    ``model_name`` is that model converted to a transformers directory (or any seq2seq model trained
    the same way). ``model_type`` and ``device`` are RL4LMs' arguments, accepted and unused.
    """
    probs = text_scores.seq2seq_label_probability(
        model_name, list(completions), "good", "bad", batch_size=batch_size
    )
    scores = []
    for prob, completion, refs, meta in zip(probs, completions, references, metadata):
        missing = sum(concept not in completion.lower() for concept in meta.get("concepts", ()))
        score = prob / (1 + concept_penalty_coeff * missing)
        if meteor_coeff:
            score += meteor_coeff * text_scores.meteor_scores([completion], [refs])[0]
        scores.append(score)
    return scores


def totto_parent(
    completions: Sequence[str], metadata: Sequence[Mapping[str, Any]]
) -> tuple[float, float, float, list[float]]:
    """PARENT of ToTTo completions against their tables and references (``metadata["raw_table"]``).

    References are the annotators' final sentences padded to three with ``"<null>"``, as ToTTo's
    evaluation script does in its test mode (the one RL4LMs runs).
    """
    try:
        tables = [meta["raw_table"] for meta in metadata]
    except KeyError as exc:
        raise InputError("PARENT needs each sample's metadata['raw_table']; use the totto datapool.") from exc
    refs = []
    for table in tables:
        sentences = [a["final_sentence"] for a in table["sentence_annotations"]]
        refs.append(sentences + ["<null>"] * (3 - len(sentences)) if len(sentences) < 3 else sentences)
    pairs = [text_scores.totto_parent_tables(t) for t in tables]
    return text_scores.parent_scores(completions, refs, [p for p, _ in pairs], [r for _, r in pairs])


@register_reward("parent", batched=True)
def parent(
    prompts: Sequence[str],
    completions: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    metadata: Sequence[Mapping[str, Any]],
) -> list[float]:
    """PARENT F-score of each completion against its ToTTo table and references (RL4LMs' ``parent``)."""
    return totto_parent(completions, metadata)[3]


SPICE_ERROR = (
    "SPICE needs Java 8 and the Stanford CoreNLP models (about 1 GB, downloaded by RL4LMs' "
    "get_stanford_models.sh); llmgym does not ship it. Fix: use 'cider' alone, or register a SPICE metric of "
    "your own (llmgym.register_metric) that calls pycocoevalcap's Spice."
)


@register_reward("spider", batched=True)
def spider(
    prompts: Sequence[str],
    completions: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    spice_coeff: float,
    cider_coeff: float,
    shaping_fn: str | None = None,
) -> list[float]:
    """RL4LMs' SPIDEr (``spice_coeff * SPICE + cider_coeff * CIDEr``): raises, SPICE is not available.

    Raises:
        MissingDependencyError: Always (see :data:`SPICE_ERROR`).
    """
    raise MissingDependencyError(SPICE_ERROR)
