"""Reward functions for text-generation tasks, and their registry.

A reward function maps ``(prompt, completion, references, **kwargs)`` to a float. Register your
own with :func:`register_reward` (as a decorator or a call) and refer to it by name in
``llmgym/TextGen-v0``'s ``reward`` argument.

Shipped: ``exact_match``, ``contains_reference``, ``keywords``, ``length_penalty``,
``sentiment`` (a small lexicon score), ``bleu`` (sacrebleu) and ``rouge`` (rouge-score); the last
two need the ``metrics`` extra.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from llmgym.errors import ConfigError, require

__all__ = ["RewardFn", "register_reward", "get_reward", "list_rewards"]


class RewardFn(Protocol):
    """A reward function: ``fn(prompt, completion, references, **kwargs) -> float``."""

    def __call__(self, prompt: str, completion: str, references: Sequence[str], /, **kwargs: Any) -> float:
        """Score ``completion`` of ``prompt`` against ``references``."""
        ...


_REWARDS: dict[str, Callable[..., float]] = {}


def register_reward(
    name: str, fn: Callable[..., float] | None = None, *, overwrite: bool = False
) -> Callable[..., Any]:
    """Register a reward function under ``name``.

    Use as ``register_reward("mine", fn)`` or as a decorator ``@register_reward("mine")``.

    Args:
        name: The name to refer to it by.
        fn: ``fn(prompt, completion, references, **kwargs) -> float``; omitted for the decorator form.
        overwrite: Whether to replace a function already registered under ``name``.

    Returns:
        ``fn`` itself, or the decorator when ``fn`` is omitted.

    Raises:
        ConfigError: If ``name`` is taken and ``overwrite`` is false.
    """

    def decorator(func: Callable[..., float]) -> Callable[..., float]:
        if name in _REWARDS and not overwrite:
            raise ConfigError(
                f"reward name={name!r} is already registered; expected a new name. "
                "Fix: choose another name or pass overwrite=True."
            )
        _REWARDS[name] = func
        return func

    return decorator if fn is None else decorator(fn)


def list_rewards() -> list[str]:
    """Return the registered reward names, sorted."""
    return sorted(_REWARDS)


def get_reward(
    reward: str | Callable[..., float], **kwargs: Any
) -> Callable[[str, str, Sequence[str]], float]:
    """Resolve a reward name (or callable) into ``fn(prompt, completion, references) -> float``.

    Args:
        reward: A registered name or a reward function.
        **kwargs: Keyword arguments bound to the function (e.g. ``keywords=[...]``).

    Returns:
        The function with ``kwargs`` bound.

    Raises:
        ConfigError: If the name is not registered (the message suggests close names).
    """
    if callable(reward):
        fn = reward
    else:
        if reward not in _REWARDS:
            close = difflib.get_close_matches(str(reward), list(_REWARDS), n=3)
            hint = f" Did you mean {close}?" if close else ""
            raise ConfigError(
                f"reward={reward!r} is not a registered reward; expected one of {list_rewards()}.{hint} "
                "Fix: pick one of these or register yours with llmgym.envs.register_reward."
            )
        fn = _REWARDS[reward]
    return functools.partial(fn, **kwargs) if kwargs else fn


def _normalize(text: str, ignore_case: bool) -> str:
    text = " ".join(text.split())
    return text.lower() if ignore_case else text


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


@register_reward("bleu")
def bleu(prompt: str, completion: str, references: Sequence[str]) -> float:
    """Sentence BLEU of the completion against the references (sacrebleu), in [0, 1]."""
    sacrebleu: Any = require("sacrebleu", "metrics", "The 'bleu' reward")
    if not references:
        return 0.0
    return float(sacrebleu.sentence_bleu(completion, list(references)).score) / 100.0


@functools.lru_cache(maxsize=8)
def _rouge_scorer(rouge_type: str) -> Any:
    rouge_scorer: Any = require("rouge_score.rouge_scorer", "metrics", "The 'rouge' reward")
    return rouge_scorer.RougeScorer([rouge_type], use_stemmer=True)


@register_reward("rouge")
def rouge(prompt: str, completion: str, references: Sequence[str], *, rouge_type: str = "rougeL") -> float:
    """Best ROUGE F-measure (``rouge_type``, default ROUGE-L) over the references (rouge-score)."""
    if not references:
        return 0.0
    scorer = _rouge_scorer(rouge_type)
    return max(float(scorer.score(ref, completion)[rouge_type].fmeasure) for ref in references)
