"""Prompt datapools for text-generation tasks, and their registry.

A datapool is a list of :class:`Sample` (a prompt and optional references). :func:`load_datapool`
builds one from a registered name, a list of prompts (strings, dicts or samples), a JSONL file, or
a Hugging Face ``datasets`` dataset object already in memory (nothing is downloaded). Register your
own with :func:`register_datapool` (a callable returning any of these).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgym.envs.registry import Registry
from llmgym.errors import InputError

__all__ = ["Sample", "register_datapool", "load_datapool", "list_datapools"]


@dataclass(frozen=True)
class Sample:
    """One prompt of a datapool.

    Attributes:
        prompt: The text the policy completes.
        references: Reference completions, for reference-based rewards (BLEU, ROUGE, match).
        metadata: Per-sample data rewards and metrics may read (RL4LMs' ``meta_data``: CommonGen's
            ``concepts``, DailyDialog's ``intent``, ToTTo's ``raw_table``...).
    """

    prompt: str
    references: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


_DATAPOOLS: Registry[Callable[..., Any]] = Registry(
    "datapool",
    "Nor is it an existing JSONL file. Fix: register it with llmgym.envs.register_datapool, give the path "
    "of an existing JSONL file, or pass a list of prompts.",
)


def register_datapool(
    name: str, factory: Callable[..., Any] | None = None, *, overwrite: bool = False
) -> Callable[..., Any]:
    """Register a datapool factory under ``name``.

    Use as ``register_datapool("mine", factory)`` or as a decorator ``@register_datapool("mine")``.
    The factory takes keyword arguments and returns anything :func:`load_datapool` accepts.

    Args:
        name: The name to refer to it by.
        factory: The factory; omitted for the decorator form.
        overwrite: Whether to replace a factory already registered under ``name``.

    Returns:
        ``factory`` itself, or the decorator when ``factory`` is omitted.

    Raises:
        ConfigError: If ``name`` is taken and ``overwrite`` is false.
    """
    return _DATAPOOLS.register(name, factory, lambda fn: fn, overwrite=overwrite)


def list_datapools() -> list[str]:
    """Return the registered datapool names, sorted."""
    return _DATAPOOLS.names()


def _sample(item: Any, prompt_key: str, reference_key: str, where: str) -> Sample:
    if isinstance(item, Sample):
        return item
    if isinstance(item, str):
        return Sample(item)
    if isinstance(item, Mapping) and isinstance(item.get(prompt_key), str):
        refs = item.get(reference_key, ())
        refs = (refs,) if isinstance(refs, str) else tuple(refs or ())
        if not all(isinstance(r, str) for r in refs):
            raise InputError(f"{where}: {reference_key!r}={refs!r} must be a string or a list of strings.")
        metadata = item.get("metadata", {})
        if not isinstance(metadata, Mapping):
            raise InputError(f"{where}: 'metadata'={metadata!r:.100} must be a dict.")
        return Sample(item[prompt_key], refs, dict(metadata))
    raise InputError(
        f"{where}: {item!r:.200} is not a prompt; expected a str, a Sample, or a dict with a str "
        f"{prompt_key!r} entry (and optionally {reference_key!r}). Fix: pass prompt_key=/reference_key= "
        "naming your fields."
    )


def _read_jsonl(path: Path, prompt_key: str, reference_key: str) -> list[Sample]:
    samples = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"{path}:{number} is not valid JSON ({exc.msg}); expected one object per line."
                ) from exc
            samples.append(_sample(item, prompt_key, reference_key, f"{path}:{number}"))
    return samples


def load_datapool(
    source: Any,
    *,
    prompt_key: str = "prompt",
    reference_key: str = "references",
    **kwargs: Any,
) -> list[Sample]:
    """Build a datapool.

    Args:
        source: A registered datapool name; ``"package.module:factory"`` (a factory, imported and
            called with ``kwargs``), or a factory itself; a path to a ``.jsonl`` file (one JSON object per line);
            a ``datasets.Dataset`` (or any iterable of rows); or a list of prompts as strings,
            :class:`Sample` or dicts.
        prompt_key: The field holding the prompt in dicts, JSONL lines and dataset rows.
        reference_key: The field holding the reference(s), a string or a list of strings. A dict's
            ``"metadata"`` entry (a dict), if any, becomes :attr:`Sample.metadata`.
        **kwargs: Passed to a registered datapool's factory (RL4LMs' pools take ``split=`` of
            ``"train"``, ``"val"``, ``"test"`` and their own arguments, see
            :mod:`llmgym.envs.rl4lms_pools`).

    Returns:
        The samples, at least one.

    Raises:
        ConfigError: If ``source`` names no registered datapool nor an existing file.
        InputError: If an item is not a prompt, or the pool is empty.
    """
    if isinstance(source, str) and ":" in source and not Path(source).exists():
        from llmgym.import_path import import_object

        source = import_object(source, "datapool")
    if callable(source):
        return load_datapool(source(**kwargs), prompt_key=prompt_key, reference_key=reference_key)
    if isinstance(source, (str, Path)):
        if isinstance(source, str) and source in _DATAPOOLS:
            factory = _DATAPOOLS.get(source)
            return load_datapool(factory(**kwargs), prompt_key=prompt_key, reference_key=reference_key)
        path = Path(source)
        if not path.is_file():
            raise _DATAPOOLS.unknown(str(source))
        samples = _read_jsonl(path, prompt_key, reference_key)
    elif isinstance(source, Iterable):
        samples = [
            _sample(item, prompt_key, reference_key, f"datapool item {i}") for i, item in enumerate(source)
        ]
    else:
        raise InputError(
            f"datapool={source!r:.200} is not a datapool; expected a name, a JSONL path, a datasets.Dataset "
            "or a list of prompts."
        )
    if not samples:
        raise InputError(f"datapool={source!r:.200} holds no prompt; expected at least one.")
    return samples


#: Positive continuations of each review opening: the references of ``review_openings``, written for
#: a supervised warm start (``llmgym sft``) before sentiment RL, as RL4LMs' IMDB runs start from a
#: supervised model. Fluent, varied and positive without repeating one word.
_REVIEW_CONTINUATIONS: dict[str, tuple[str, ...]] = {
    "This movie was": (
        "a delightful surprise from the first minute to the last, funny and warm.",
        "one of the best surprises of the year, and the cast is wonderful.",
    ),
    "I watched this film last night and": (
        "I am still thinking about its beautiful final scene.",
        "enjoyed every minute of it with my whole family.",
    ),
    "The acting in this picture is": (
        "superb, and the two leads share a charming, easy chemistry.",
        "excellent across the board, even in the smallest roles.",
    ),
    "Honestly, the plot": (
        "kept me guessing until the end, and the payoff was brilliant.",
        "is clever and moving, with a few twists I did not see coming.",
    ),
    "From the first scene, the director": (
        "shows a sure hand and a great eye for small details.",
        "builds a world that feels real, lovely and full of life.",
    ),
    "My friends told me this film": (
        "was good, and they were right: it is a pleasant, happy ride.",
        "would make me laugh, and it did: great fun, again and again.",
    ),
    "The soundtrack of this movie": (
        "is gorgeous and a perfect fit for every scene.",
        "is my favorite part, a lovely mix of old songs and new ones.",
    ),
    "I did not expect this sequel to be": (
        "better than the original, but it is fresh, funny and brilliant.",
        "so much fun, yet it is a fantastic adventure for all ages.",
    ),
    "The ending of the story": (
        "is perfect: hopeful, earned and quietly moving.",
        "left the whole theater smiling, a wonderful way to close.",
    ),
    "Compared to the book, the film": (
        "keeps the heart of the story and adds some great new scenes.",
        "is a faithful and beautiful adaptation that fans will enjoy.",
    ),
    "The special effects were": (
        "amazing, yet they never get in the way of the characters.",
        "stunning, and the action scenes are a real joy; I enjoyed them all.",
    ),
    "Two hours later, I felt": (
        "happy and inspired, and I want to see it again soon.",
        "like I had seen something special, a truly excellent film.",
    ),
}


@register_datapool("review_openings")
def review_openings() -> list[Sample]:
    """Openings of movie reviews for sentiment-steering tasks (as RL4LMs' IMDB text continuation).

    Each opening has two positive continuations as references, for a supervised warm start.
    """
    return [Sample(opening, continuations) for opening, continuations in _REVIEW_CONTINUATIONS.items()]
