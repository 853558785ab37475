"""Checks of rewards where they enter llmgym: env steps, reward functions, LlamaGym's ``assign_reward``.

A reward must be a real number (not a string, ``None`` or an array of several values), finite and
at most :data:`MAX_ABS_REWARD` in magnitude. The bound keeps every quantity training derives from
rewards finite in float32: returns sum up to thousands of rewards, and value losses and advantage
variances square them; with ``|r| <= 1e9`` a return of 10^5 steps squared is 10^28, far below
float32's 3.4e38, while a reward of 1e38 (finite in float32) overflows to ``inf`` at the first
squared term. A reward that breaks the rule raises :class:`~llmgym.errors.InputError` naming where
it came from, the value and the step, unless clipping was asked for (``env.reward_clip`` in a run
config, ``reward_clip=`` of :class:`~llmgym.envs.vector.TextVectorEnv` or of ``llmgym/TextGen-v0``):
then ``nan`` becomes ``0.0`` and other values are clipped into ``[-reward_clip, reward_clip]``,
with a warning.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Optional

from llmgym.errors import ConfigError, InputError

__all__ = ["MAX_ABS_REWARD", "check_reward", "check_reward_clip", "reward_number"]

#: Largest reward magnitude accepted (see the module docstring for why).
MAX_ABS_REWARD: float = 1e9


def check_reward_clip(reward_clip: Any, name: str = "reward_clip") -> Optional[float]:
    """Check a ``reward_clip`` setting: ``None`` (out-of-range rewards are errors) or a bound.

    Args:
        reward_clip: The value given.
        name: Its name in the message (e.g. ``"env.reward_clip"``).

    Returns:
        The bound as a float, or ``None``.

    Raises:
        ConfigError: Unless it is ``None`` or a number in ``(0, MAX_ABS_REWARD]``.
    """
    if reward_clip is None:
        return None
    number = (
        float(reward_clip)
        if isinstance(reward_clip, numbers.Real) and not isinstance(reward_clip, bool)
        else math.nan
    )
    if not 0 < number <= MAX_ABS_REWARD:
        raise ConfigError(
            f"{name}={reward_clip!r:.60} is invalid; expected null (non-finite or huge rewards are errors) or a "
            f"number in (0, {MAX_ABS_REWARD:g}] that rewards are clipped to."
        )
    return number


def reward_number(reward: Any, source: str, step: str) -> float:
    """Turn a reward into a float, refusing what is not one real number.

    Args:
        reward: The reward (a Python, NumPy or one-element torch number).
        source: Where it comes from, for the message.
        step: When, for the message.

    Returns:
        ``float(reward)`` (may be ``nan`` or ``inf``; see :func:`check_reward`).

    Raises:
        InputError: On a string, ``None``, a container or an array of several values.
    """
    if isinstance(reward, (str, bytes)) or not hasattr(reward, "__float__"):
        raise InputError(
            f"reward={reward!r:.80} of type {type(reward).__name__} from {source} at {step}: expected a real "
            "number. "
            "Fix: return float(score)."
        )
    try:
        return float(reward)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"reward={reward!r:.80} from {source} at {step} is not one real number ({exc}). Fix: return "
            "float(score)."
        ) from None


def check_reward(
    reward: Any,
    *,
    source: str,
    step: str,
    reward_clip: Optional[float] = None,
    warn: bool = True,
    clip_setting: Optional[str] = "env.reward_clip",
) -> float:
    """Check one reward: a real number, finite, with ``|reward| <= MAX_ABS_REWARD``.

    Args:
        reward: The reward as it came in.
        source: What gave it, e.g. ``"env 2 ('llmgym/TextGen-v0')"``.
        step: When, e.g. ``"step 216 (step 4 of its episode)"``.
        reward_clip: ``None``: a bad value raises; a bound (checked by :func:`check_reward_clip`):
            ``nan`` becomes ``0.0`` and other values are clipped into ``[-reward_clip, reward_clip]``,
            with a warning.
        warn: Whether a clipped value is reported with a warning (callers that record clips
            otherwise, e.g. in the step's info, warn once).
        clip_setting: The setting that opts in to clipping, suggested in the error (``None``: none).

    Returns:
        The reward as a float (clipped when ``reward_clip`` is set).

    Raises:
        InputError: On a value that is not a real number, or (without ``reward_clip``) one that
            is non-finite or larger than :data:`MAX_ABS_REWARD` in magnitude.
    """
    value = reward_number(reward, source, step)
    if reward_clip is None:
        if math.isfinite(value) and abs(value) <= MAX_ABS_REWARD:
            return value
        what = "not finite" if not math.isfinite(value) else f"larger than {MAX_ABS_REWARD:g} in magnitude"
        clip = f", or opt in to clipping it with a warning ({clip_setting}: <bound>)" if clip_setting else ""
        raise InputError(
            f"reward={value!r} from {source} at {step} is {what}, which would turn the policy's update into "
            f"nan. Fix: make the reward finite (and scale it down){clip}."
        )
    clipped = 0.0 if math.isnan(value) else min(max(value, -reward_clip), reward_clip)
    if warn and (clipped != value or math.isnan(value)):
        warnings.warn(
            f"reward={value!r} from {source} at {step} clipped to {clipped!r} (reward_clip={reward_clip:g}).",
            RuntimeWarning,
            stacklevel=2,
        )
    return clipped
