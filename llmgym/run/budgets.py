"""Start-of-run fit of the prompt budget to the model window, so no step runs past the window.

The agent cuts each prompt to ``agent.max_prompt_tokens``; the model then reads the prompt and,
after it, a candidate action (scoring agents) or the generated tokens (``agent.max_new_tokens``
for generative agents, 1 for token agents). When the budget plus that length is more than the
model's window, a run used to die at the first step whose prompt filled the budget (the shipped
``babyai_ppo_lora`` on a 512-token model: env step 216, "needs 513 tokens").
:func:`fit_prompt_budget` settles it at start: the budget is lowered to what fits, with a warning
naming the setting, or the run is refused when not even an empty prompt leaves room.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any, Optional

from llmgym.config import Config
from llmgym.errors import ConfigError

__all__ = ["fit_prompt_budget", "longest_action_tokens"]


def longest_action_tokens(tokenizer: Any, actions: Sequence[str]) -> tuple[int, str]:
    """The most tokens an action takes after a prompt, and that action.

    Each action is tokenized as a scoring agent scores it: after a space, without special tokens.

    Args:
        tokenizer: The model's tokenizer.
        actions: The action strings (non-empty).

    Returns:
        ``(tokens, action)`` of the longest one.
    """
    counts = tokenizer([" " + action.lstrip() for action in actions], add_special_tokens=False)["input_ids"]
    index = max(range(len(actions)), key=lambda i: len(counts[i]))
    return len(counts[index]), actions[index]


def _env_actions(envs: Any) -> Optional[list[str]]:
    """The fixed action set of the vector env's envs (``action_names`` of llmgym's ``TextEnv``), if any."""
    try:
        names = envs.get_attr("action_names")
    except AttributeError:
        return None
    actions = sorted({str(name) for group in names for name in (group or ())})
    return actions or None


def _action_length(config: Config, tokenizer: Any, envs: Any) -> Optional[tuple[int, str]]:
    """Tokens an action takes after the prompt, and its description; ``None`` when unknown at start."""
    agent = config.agent
    if agent.type == "token":
        return 1, "1 generated token"
    if agent.type == "generative":
        return agent.max_new_tokens, f"agent.max_new_tokens={agent.max_new_tokens} generated tokens"
    actions = _env_actions(envs)
    if actions is None:
        return None
    tokens, action = longest_action_tokens(tokenizer, actions)
    return tokens, f"the longest action {action!r} ({tokens} tokens)"


def fit_prompt_budget(
    config: Config, window: Optional[int], tokenizer: Any, envs: Any, seq2seq: bool = False
) -> Config:
    """The run config with ``agent.max_prompt_tokens`` lowered so that prompt plus action fit the window.

    Args:
        config: The run config (``agent.type``, ``agent.max_prompt_tokens``, ``agent.max_new_tokens``).
        window: The model's window in tokens; ``None`` (relative positions, or a model in server
            processes) leaves the budget as it is (every call still checks its own lengths).
        tokenizer: The model's tokenizer.
        envs: The run's :class:`~llmgym.envs.vector.TextVectorEnv`. Scoring agents: the longest of
            its envs' ``action_names`` (envs whose actions change from state to state, without
            ``action_names``, are checked at each step).
        seq2seq: Whether the model is an encoder-decoder: the prompt (encoder) and the action
            (decoder) then each need to fit the window on their own.

    Returns:
        ``config`` itself when it fits, else a copy whose ``agent.max_prompt_tokens`` is the
        largest that fits (a warning names both values).

    Raises:
        ConfigError: When the action alone fills the window.
    """
    budget = config.agent.max_prompt_tokens
    found = _action_length(config, tokenizer, envs) if window is not None else None
    if window is None or found is None:
        return config
    action_tokens, what = found
    fits = window if seq2seq else window - action_tokens
    if fits < 1 or action_tokens > window:
        raise ConfigError(
            f"{what} leave no room for a prompt in the model's window of {window} tokens. Fix: lower "
            "agent.max_new_tokens or use a model with a larger window."
        )
    if budget <= fits:
        return config
    warnings.warn(
        f"agent.max_prompt_tokens={budget} plus {what} is more than the model's window of {window} tokens; "
        f"prompts are cut to {fits} tokens instead. Set agent.max_prompt_tokens={fits} (or less) to silence this.",
        UserWarning,
        stacklevel=2,
    )
    agent = dataclasses.replace(config.agent, max_prompt_tokens=fits)
    return dataclasses.replace(config, agent=agent)
