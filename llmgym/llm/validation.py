"""Checks of the arguments of the public LLM methods, with errors that say how to fix them."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from llmgym.config import ModelConfig
from llmgym.errors import ConfigError, InputError, MissingDependencyError

__all__ = [
    "as_model_config",
    "check_contexts",
    "check_candidates",
    "check_normalize",
    "check_minibatch_size",
    "check_token_ids",
    "check_generation_kwargs",
    "check_decoder_prefixes",
    "check_attention_implementation",
]

#: Attention implementations that need a package of their own: ``(module, how to install it)``.
_ATTENTION_PACKAGES = {
    "flash_attention_2": (
        "flash_attn",
        "pip install flash-attn --no-build-isolation (CUDA GPUs, built for your torch)",
    ),
}


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_contexts(contexts: Any, name: str = "contexts") -> list[str]:
    """Check that ``contexts`` is a list of strings.

    Args:
        contexts: The value passed by the caller.
        name: Parameter name used in the message.

    Returns:
        The contexts as a list.

    Raises:
        InputError: If it is a single string, not a sequence, or holds a non-string or a string
            with a lone surrogate (which no tokenizer can encode).
    """
    if isinstance(contexts, str):
        raise InputError(
            f"{name} must be a list of strings, got a single string {_preview(contexts)}; wrap it: [{name[:-1]}]."
        )
    if not isinstance(contexts, Sequence):
        raise InputError(
            f"{name} must be a list of strings, got {type(contexts).__name__}: {_preview(contexts)}."
        )
    for index, context in enumerate(contexts):
        if not isinstance(context, str):
            raise InputError(
                f"{name}[{index}] must be a string, got {type(context).__name__}: {_preview(context)}; "
                "pass text (format observations into prompts first)."
            )
        _check_encodable(context, f"{name}[{index}]")
    return list(contexts)


def _check_encodable(text: str, name: str) -> None:
    r"""Raise if ``text`` holds a lone surrogate (e.g. ``"\ud800"``), which is not valid Unicode text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{name} holds the lone surrogate {text[exc.start]!r} at character {exc.start}, which is not valid "
            "Unicode and cannot be tokenized. Fix: decode the source bytes with errors='replace', or drop "
            "the surrogates (text.encode('utf-8', 'ignore').decode())."
        ) from None


def check_candidates(candidates: Any, num_contexts: int) -> list[list[str]]:
    """Check that ``candidates`` holds one list of non-empty strings per context.

    Args:
        candidates: The value passed by the caller.
        num_contexts: Number of contexts it must match.

    Returns:
        The candidates as a list of lists.

    Raises:
        InputError: On a length mismatch, a bare string instead of a list, a non-string, a
            string with a lone surrogate or an empty candidate.
    """
    if isinstance(candidates, str) or not isinstance(candidates, Sequence):
        raise InputError(
            f"candidates must be a list with one list of strings per context, got {_preview(candidates)}."
        )
    if len(candidates) != num_contexts:
        raise InputError(
            f"candidates has {len(candidates)} entries but there are {num_contexts} contexts; "
            "give one list of candidate strings per context."
        )
    checked: list[list[str]] = []
    for i, group in enumerate(candidates):
        if isinstance(group, str) or not isinstance(group, Sequence):
            raise InputError(
                f"candidates[{i}] must be a list of strings, got {_preview(group)}; "
                f"for a single candidate write [[{_preview(group)}]]."
            )
        for j, candidate in enumerate(group):
            if not isinstance(candidate, str):
                raise InputError(
                    f"candidates[{i}][{j}] must be a string, got {type(candidate).__name__}: {_preview(candidate)}."
                )
            _check_encodable(candidate, f"candidates[{i}][{j}]")
            if candidate == "":
                raise InputError(
                    f"candidates[{i}][{j}] is an empty string, which has no tokens to score; remove it "
                    "or use add_eos=True with a non-empty candidate."
                )
        checked.append(list(group))
    return checked


def check_normalize(normalize: Any) -> str:
    """Check the ``normalize`` option of ``score``: ``"sum"`` or ``"mean"``."""
    if normalize not in ("sum", "mean"):
        raise InputError(
            f"normalize={normalize!r} is not supported; use 'sum' (log-prob) or 'mean' (per token)."
        )
    return str(normalize)


def check_minibatch_size(minibatch_size: Any) -> int:
    """Check that ``minibatch_size`` is a positive integer."""
    if isinstance(minibatch_size, bool) or not isinstance(minibatch_size, int) or minibatch_size < 1:
        raise InputError(
            f"minibatch_size={minibatch_size!r} must be a positive integer (sequences per forward)."
        )
    return minibatch_size


def check_token_ids(prompt_ids: Any, completion_ids: Any) -> tuple[list[list[int]], list[list[int]]]:
    """Check prompt and completion token ids of ``token_logprobs``.

    Args:
        prompt_ids: One list of token ids per sample.
        completion_ids: One non-empty list of token ids per sample.

    Returns:
        Both as lists of lists of ints.

    Raises:
        InputError: On a length mismatch, an empty prompt or completion, or a non-integer id.
    """
    for name, value in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids)):
        if not isinstance(value, Sequence) or any(not isinstance(v, Sequence) for v in value):
            raise InputError(f"{name} must be a list of lists of token ids, got {_preview(value)}.")
    if len(prompt_ids) != len(completion_ids):
        raise InputError(
            f"prompt_ids has {len(prompt_ids)} samples but completion_ids has {len(completion_ids)}; "
            "give one completion per prompt."
        )
    prompts = [[int(t) for t in p] for p in prompt_ids]
    completions = [[int(t) for t in c] for c in completion_ids]
    for index, (prompt, completion) in enumerate(zip(prompts, completions)):
        if not prompt or not completion:
            which = "prompt_ids" if not prompt else "completion_ids"
            raise InputError(
                f"{which}[{index}] is empty; every sample needs at least one prompt token "
                "(e.g. BOS) and one completion token."
            )
    return prompts, completions


#: ``name -> (low, whether low itself is allowed, high, what is expected)`` of the real generation arguments.
_GENERATION_RANGES: dict[str, tuple[float, bool, float, str]] = {
    "temperature": (0.0, False, math.inf, "a finite number > 0"),
    "top_p": (0.0, False, 1.0, "a number in (0, 1]"),
    "mask_top_p": (0.0, False, 1.0, "a number in (0, 1]"),
    "min_p": (0.0, True, 1.0, "a number in [0, 1]"),
    "repetition_penalty": (0.0, False, math.inf, "a finite number > 0"),
}

#: ``name -> lowest value`` of the integer generation arguments.
_GENERATION_COUNTS: dict[str, int] = {
    "max_new_tokens": 1,
    "max_length": 1,
    "num_return_sequences": 1,
    "top_k": 0,
}


def check_generation_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Check the sampling arguments of ``generate`` that transformers would accept silently or fail on late.

    ``max_new_tokens``, ``max_length`` and ``num_return_sequences`` must be integers >= 1, ``top_k`` an integer
    >= 0 (0 disables it), ``temperature`` and ``repetition_penalty`` finite and > 0, ``top_p`` and
    NLPO's ``mask_top_p`` in ``(0, 1]``; ``None`` leaves an argument to the model's generation config.

    Args:
        kwargs: The generation arguments passed by the caller.

    Raises:
        InputError: Naming the argument, its value and the range expected.
    """
    for name, lowest in _GENERATION_COUNTS.items():
        value = kwargs.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lowest
        ):
            raise InputError(
                f"{name}={_preview(value)} is invalid; expected an integer >= {lowest}, or None for the default."
            )
    for name, (low, closed, high, what) in _GENERATION_RANGES.items():
        value = kwargs.get(name)
        if value is None:
            continue
        number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
        in_range = math.isfinite(number) and (low <= number if closed else low < number) and number <= high
        if not in_range:
            raise InputError(
                f"{name}={_preview(value)} is invalid; expected {what}, or None for the default."
            )


def as_model_config(config: ModelConfig | str | None) -> ModelConfig:
    """Turn ``None`` (default model), a model name or a ``ModelConfig`` into a ``ModelConfig``.

    Raises:
        ConfigError: For any other type.
    """
    if config is None:
        return ModelConfig()
    if isinstance(config, str):
        return ModelConfig(name=config)
    if isinstance(config, ModelConfig):
        return config
    raise ConfigError(
        f"config={type(config).__name__} is not a model config; pass a ModelConfig, a model name or path, or None."
    )


def check_decoder_prefixes(
    prefixes: Sequence[Sequence[int]] | None, count: int, config: Any
) -> list[list[int]]:
    """The decoder prefix of each of ``count`` samples as int lists (empty lists when ``None``).

    Args:
        prefixes: Per sample, the decoder ids fed before what is generated or scored, or ``None``.
        count: Number of samples (contexts).
        config: The model's config (``is_encoder_decoder``, ``decoder_start_token_id``).

    Raises:
        InputError: Prefixes for a causal LM, a count that differs from the samples', or a
            seq2seq config without ``decoder_start_token_id``.
    """
    if prefixes is None:
        return [[] for _ in range(count)]
    if not getattr(config, "is_encoder_decoder", False):
        raise InputError(
            "decoder_prefixes is for encoder-decoder models; a causal LM continues its context: put the tokens in it."
        )
    if len(prefixes) != count:
        raise InputError(
            f"decoder_prefixes has {len(prefixes)} entries for {count} samples; pass one per sample."
        )
    if any(len(prefix) for prefix in prefixes) and getattr(config, "decoder_start_token_id", None) is None:
        raise InputError(
            "the model config has no decoder_start_token_id; set it to continue a decoder prefix."
        )
    return [[int(t) for t in prefix] for prefix in prefixes]


def check_attention_implementation(config: ModelConfig) -> None:
    """Check that the package ``model.attn_implementation`` needs is installed, before any model loads.

    Fast: nothing is imported. Transformers would otherwise raise its own ``ImportError`` while
    loading the weights.

    Args:
        config: The model section.

    Raises:
        MissingDependencyError: The implementation's package is missing; the message says how to
            install it, or which implementation needs none.
    """
    import importlib.util

    needs = _ATTENTION_PACKAGES.get(config.attn_implementation)
    if needs is None or importlib.util.find_spec(needs[0]) is not None:
        return
    raise MissingDependencyError(
        f"model.attn_implementation={config.attn_implementation} needs the package '{needs[0]}', which is not "
        f"installed. Fix: {needs[1]}, or set model.attn_implementation=sdpa (PyTorch's fused kernels, no package)."
    )
