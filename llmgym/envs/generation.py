"""``llmgym/TextGen-v0``: text generation as an env (RL4LMs / RLHF style).

Each episode draws a prompt from a datapool (see :mod:`llmgym.envs.datapools`). In
``mode="completion"`` the action is the whole completion and the episode ends after that one step;
in ``mode="token"`` each step's action is one token's text, appended to the completion, and the
episode ends at ``eos_token`` or after ``max_tokens`` steps. Either way the reward, from a reward
of :mod:`llmgym.envs.rewards` (which sees the sample's metadata), comes on the last step, or on every
step for a dense reward; every string is a valid action, the empty one included (there is no
``info["valid_actions"]``).

Observation: a dict with ``"text"`` (prompt followed by the completion so far), ``"prompt"`` and
``"completion"``. ``info`` holds ``"references"``, ``"metadata"`` and, at the end, ``"completion"``.
``reset(options={"index": i})`` picks sample ``i`` instead of a random one (for evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.spaces import Dict

from llmgym.envs.core import ANSI_METADATA, TextEnv, TextSpace
from llmgym.envs.datapools import Sample, load_datapool
from llmgym.envs.reward_checks import check_reward, check_reward_clip
from llmgym.envs.rewards import Reward, get_reward
from llmgym.errors import ConfigError, InvalidActionError

__all__ = ["TextGenEnv"]

_MODES = ("completion", "token")


class TextGenEnv(TextEnv[dict[str, str]]):
    """Complete prompts from a datapool; a reward function scores the completion.

    Args:
        datapool: Anything :func:`~llmgym.envs.datapools.load_datapool` accepts (a registered name,
            a JSONL path, a list of prompts, a ``datasets.Dataset``).
        reward: A registered reward name, ``"module:function"``, a reward function or a
            :class:`~llmgym.envs.rewards.Reward`.
        reward_kwargs: Keyword arguments of the reward function (e.g. ``{"keywords": [...]}``).
        mode: ``"completion"`` (one step) or ``"token"`` (one token per step).
        max_tokens: Steps after which a token-mode episode ends.
        eos_token: Action that ends a token-mode episode (not appended), or ``None``.
        special_tokens: Texts of special tokens (T5's ``<pad>``...) left out of the completion that the
            reward scores and ``info["completion"]`` reports, as RL4LMs decodes its completions with
            ``skip_special_tokens=True``; the observation keeps them (what the model was fed).
        max_completion_chars: Longest accepted completion, in characters.
        datapool_kwargs: Passed to :func:`~llmgym.envs.datapools.load_datapool`.
        render_mode: ``"ansi"`` (:meth:`render` returns the prompt and the completion so far) or
            ``None``.
        reward_clip: ``None``: a reward function returning something other than a finite number of
            magnitude at most 1e9 raises :class:`~llmgym.errors.InputError` naming the function, the
            value, the prompt and the step; a bound: the value is clipped into
            ``[-reward_clip, reward_clip]`` (``nan`` to 0) with a warning
            (:mod:`llmgym.envs.reward_checks`).

    Raises:
        ConfigError: On an unknown mode, reward, datapool or render mode, a non-positive limit or a
            bad ``reward_clip``.
    """

    description = "Complete a prompt from a datapool; a reward function scores the completion."
    metadata = ANSI_METADATA

    def __init__(
        self,
        datapool: Any = "review_openings",
        reward: str | Callable[..., float] | Reward = "sentiment",
        reward_kwargs: Mapping[str, Any] | None = None,
        *,
        mode: str = "completion",
        max_tokens: int = 32,
        eos_token: str | None = None,
        special_tokens: Sequence[str] = (),
        max_completion_chars: int = 16384,
        datapool_kwargs: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        reward_clip: float | None = None,
    ) -> None:
        self._init_render_mode(render_mode)
        self.reward_clip = check_reward_clip(reward_clip)
        if mode not in _MODES:
            raise ConfigError(f"mode={mode!r} is invalid; expected one of {list(_MODES)}.")
        for name, value in (("max_tokens", max_tokens), ("max_completion_chars", max_completion_chars)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} is invalid; expected an int >= 1.")
        self.samples: list[Sample] = load_datapool(datapool, **dict(datapool_kwargs or {}))
        self.reward_fn = get_reward(reward, **dict(reward_kwargs or {}))
        self.reward_name = reward if isinstance(reward, str) else getattr(reward, "__name__", repr(reward))
        self.mode = mode
        self.max_tokens = max_tokens
        self.eos_token = eos_token
        if isinstance(special_tokens, str) or any(not isinstance(t, str) or not t for t in special_tokens):
            raise ConfigError(
                f"special_tokens={special_tokens!r} is invalid; expected a list of non-empty strings (e.g. ['<pad>'])."
            )
        self.special_tokens = tuple(special_tokens)
        self.max_completion_chars = max_completion_chars
        longest_prompt = max(len(s.prompt) for s in self.samples)
        self.action_space = TextSpace(max_completion_chars, strict=False)
        self.observation_space: gym.spaces.Space[Any] = Dict(
            {
                "text": TextSpace(longest_prompt + max_completion_chars, strict=False),
                "prompt": TextSpace(longest_prompt, strict=False),
                "completion": TextSpace(max_completion_chars, strict=False),
            }
        )
        self._index = 0
        self._sample = self.samples[0]
        self._completion = ""
        self._steps = 0

    @property
    def instructions(self) -> str:
        """What the policy is asked to do."""
        return "Continue the text."

    def parse_action(self, action: Any) -> str:  # type: ignore[override]
        """Check that the action is a string the completion can take.

        Args:
            action: The completion (``"completion"`` mode) or one token's text (``"token"`` mode).

        Returns:
            The action.

        Raises:
            InvalidActionError: If the action is not a string or makes the completion too long.
        """
        if not isinstance(action, str):
            raise InvalidActionError(
                f"action={action!r:.100} is not valid for TextGenEnv; expected the completion text (a str)."
            )
        if len(self._completion) + len(action) > self.max_completion_chars:
            raise InvalidActionError(
                f"action of {len(action)} characters makes the completion longer than "
                f"max_completion_chars={self.max_completion_chars}. Fix: generate fewer tokens or raise "
                "max_completion_chars."
            )
        return action

    def _obs(self) -> dict[str, str]:
        prompt = self._sample.prompt
        return {"text": prompt + self._completion, "prompt": prompt, "completion": self._completion}

    def _render_text(self) -> str:
        return self._obs()["text"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """Draw a prompt (or take ``options["index"]``). See :meth:`gymnasium.Env.reset`."""
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.samples)))
        elif not isinstance(index, int) or not 0 <= index < len(self.samples):
            raise ConfigError(
                f"options['index']={index!r} is out of range; expected an int in [0, {len(self.samples) - 1}]."
            )
        self._index = index
        self._sample = self.samples[index]
        self._completion = ""
        self._steps = 0
        return self._obs(), self._info()

    def _info(self) -> dict[str, Any]:
        return {"references": list(self._sample.references), "metadata": dict(self._sample.metadata)}

    def step(self, action: str) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        """Add the completion (or one token). See :meth:`gymnasium.Env.step`."""
        text = self.parse_action(action)
        self._steps += 1
        if self.mode == "token" and self.eos_token is not None and text == self.eos_token:
            done = True
        else:
            self._completion += text
            done = self.mode == "completion" or self._steps >= self.max_tokens
        info = self._info()
        scored = self._scored_completion()
        value = self.reward_fn(
            self._sample.prompt,
            scored,
            self._sample.references,
            metadata=self._sample.metadata,
            done=done,
        )
        reward = check_reward(
            value,
            source=f"reward function {self.reward_name!r} of TextGenEnv",
            step=f"step {self._steps} of the episode on prompt {self._index}",
            reward_clip=self.reward_clip,
            clip_setting="TextGenEnv(reward_clip=...), env.kwargs.reward_clip in a run config",
        )
        if done:
            info["completion"] = scored
        return self._obs(), reward, done, False, info

    def _scored_completion(self) -> str:
        """The completion without the special tokens' texts (what the reward and the metrics see)."""
        text = self._completion
        for token in self.special_tokens:
            text = text.replace(token, "")
        return text
