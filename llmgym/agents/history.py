"""Per-env conversation history rendered into prompts within a token budget.

A :class:`History` holds the (observation, action) turns of the current episode and the pending
observation the agent must act on. :meth:`History.render` turns the last ``max_turns`` turns plus the
pending observation into a prompt, with the tokenizer's chat template (system, then alternating
user / assistant messages, then the generation prompt) or a :class:`PlainTemplate`, dropping the
oldest turns first until it fits in ``max_prompt_tokens``. The returned :class:`Prompt` carries the
exact token ids, which equal ``tokenizer(prompt.text, add_special_tokens=...)["input_ids"]``, so
training can use what the model was fed. :meth:`History.check_prefix_stable` detects prompt drift:
a re-rendered history that no longer starts with the ids sent earlier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from llmgym.errors import ConfigError, InputError

if TYPE_CHECKING:
    from llmgym.config import AgentConfig

__all__ = ["History", "PlainTemplate", "Prompt"]


@dataclass(frozen=True)
class PlainTemplate:
    """Format strings of prompts rendered without a chat template.

    The prompt is ``system`` (when there is a system prompt), then ``turn`` for each kept past turn,
    then ``query`` for the pending observation, concatenated without separators.

    Attributes:
        system: Format of the system prompt, with the field ``{system}``.
        turn: Format of a past turn, with the fields ``{observation}`` and ``{action}``.
        query: Format of the pending observation, with the field ``{observation}``.
    """

    system: str = "{system}\n"
    turn: str = "{observation}\nAction: {action}\n"
    query: str = "{observation}\nAction:"

    def __post_init__(self) -> None:
        for name, fields in (
            ("system", ("system",)),
            ("turn", ("observation", "action")),
            ("query", ("observation",)),
        ):
            fmt = getattr(self, name)
            try:
                fmt.format(**{f: "" for f in fields})
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(
                    f"PlainTemplate.{name}={fmt!r} is not a valid format string with fields "
                    f"{['{' + f + '}' for f in fields]}: {exc!r}; escape literal braces as '{{' and '}}'."
                ) from exc


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt and the exact token ids sent to the model.

    Attributes:
        text: The prompt text.
        token_ids: ``tokenizer(text, add_special_tokens=History.add_special_tokens)["input_ids"]``.
        first_turn: Index (in the episode) of the oldest past turn kept in the prompt.
        num_turns: Number of past turns kept.
        observation_truncated: Whether the pending observation was cut on the left to fit the budget.
        decoder_ids: An encoder-decoder model's decoder prefix: the token ids generated earlier in
            the episode, continued after (:class:`~llmgym.agents.generative.TokenAgent`); the text
            and ``token_ids`` go to the encoder. Empty for causal models.
        episode_tokens: Tokens the agent generated earlier in the episode that ``min_new_tokens``
            counts (a token agent's decision index, one token per step); 0 where each generation
            starts anew.
    """

    text: str
    token_ids: list[int]
    first_turn: int
    num_turns: int
    observation_truncated: bool
    decoder_ids: tuple[int, ...] = ()
    episode_tokens: int = 0


class History:
    """Observation / action history of one env, rendered into prompts within a token budget.

    Call :meth:`add_observation` with each new observation, :meth:`render` to get the prompt to act
    on, :meth:`add_action` with the action taken, and :meth:`reset` when the episode ends.

    Args:
        tokenizer: A Hugging Face tokenizer (callable returning ``input_ids``; ``apply_chat_template``
            when a chat template is used).
        system_prompt: System prompt, always kept; ``None`` or ``""`` for none.
        max_turns: Past (observation, action) turns kept (GLAM keeps 3; 0 keeps none); ``None`` keeps
            the whole episode.
        max_prompt_tokens: Token budget of a prompt; ``None`` for no budget.
        use_chat_template: Render with the tokenizer's chat template when it has one; otherwise (or
            when ``False``) use ``template``.
        template: The plain template; defaults to :class:`PlainTemplate`.
        overflow: What to do when the system prompt and the pending observation alone exceed the
            budget: ``"error"`` raises, ``"truncate_left"`` keeps the end of the observation,
            ``"truncate_right"`` its start.
        add_special_tokens: Passed to the tokenizer; ``None`` means ``False`` with a chat template
            (it writes its own special tokens) and ``True`` with the plain template.

    Raises:
        ConfigError: On a negative ``max_turns``, a non-positive ``max_prompt_tokens`` or an unknown
            ``overflow``.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        system_prompt: Optional[str] = None,
        max_turns: Optional[int] = 3,
        max_prompt_tokens: Optional[int] = None,
        use_chat_template: bool = True,
        template: Optional[PlainTemplate] = None,
        overflow: str = "error",
        add_special_tokens: Optional[bool] = None,
    ) -> None:
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 0
        ):
            raise ConfigError(
                f"max_turns={max_turns!r} must be an int >= 0 (0 keeps no past turn) or None (all)."
            )
        if max_prompt_tokens is not None and (
            isinstance(max_prompt_tokens, bool)
            or not isinstance(max_prompt_tokens, int)
            or max_prompt_tokens <= 0
        ):
            raise ConfigError(
                f"max_prompt_tokens={max_prompt_tokens!r} must be a positive int or None (no budget)."
            )
        if overflow not in ("error", "truncate_left", "truncate_right"):
            raise ConfigError(
                f"overflow={overflow!r} is not allowed; expected one of ['error', 'truncate_left', 'truncate_right']."
            )
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt or None
        self.max_turns = max_turns
        self.max_prompt_tokens = max_prompt_tokens
        self.uses_chat_template = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        self.template = template if template is not None else PlainTemplate()
        self.overflow = overflow
        self.add_special_tokens = (
            (not self.uses_chat_template) if add_special_tokens is None else add_special_tokens
        )
        self._turns: list[tuple[str, str]] = []
        self._pending: Optional[str] = None
        self._char_limit: Optional[int] = None
        self._char_limit_known = False

    @classmethod
    def from_config(
        cls, tokenizer: Any, config: AgentConfig, system_prompt: Optional[str] = None, overflow: str = "error"
    ) -> History:
        """Build a history from the ``agent`` config section.

        Args:
            tokenizer: The model's tokenizer.
            config: Uses ``history_length``, ``max_prompt_tokens``, ``use_chat_template`` and
                ``system_prompt``.
            system_prompt: Used when ``config.system_prompt`` is ``None`` (e.g. the agent's or env's default).
            overflow: ``"error"`` or ``"truncate_left"`` (see :class:`History`).

        Returns:
            A new, empty history.
        """
        return cls(
            tokenizer,
            system_prompt=config.system_prompt if config.system_prompt is not None else system_prompt,
            max_turns=config.history_length,
            max_prompt_tokens=config.max_prompt_tokens,
            use_chat_template=config.use_chat_template,
            overflow=overflow,
        )

    @property
    def turns(self) -> list[tuple[str, str]]:
        """The (observation, action) turns of the current episode, oldest first (a copy)."""
        return list(self._turns)

    @property
    def pending_observation(self) -> Optional[str]:
        """The observation awaiting an action, or ``None``."""
        return self._pending

    def reset(self) -> None:
        """Forget the episode: no turns, no pending observation."""
        self._turns = []
        self._pending = None

    def add_observation(self, observation: str) -> None:
        """Set the observation the agent must act on next.

        Args:
            observation: The formatted observation text.

        Raises:
            InputError: If ``observation`` is not a str, or an observation is already pending (call
                :meth:`add_action` first).
        """
        if not isinstance(observation, str):
            raise InputError(
                f"observation is a {type(observation).__name__}; pass the formatted observation text "
                "(Agent.format_observation returns it)."
            )
        if self._pending is not None:
            raise InputError(
                "add_observation() was called twice without add_action(); record the action taken on "
                "the pending observation first (or reset() at the end of an episode)."
            )
        self._pending = observation

    def add_action(self, action: str) -> None:
        """Record the action taken on the pending observation, closing the turn.

        Args:
            action: The action text as it should appear in later prompts.

        Raises:
            InputError: If ``action`` is not a str or no observation is pending.
        """
        if not isinstance(action, str):
            raise InputError(f"action is a {type(action).__name__}; pass the action text as a str.")
        if self._pending is None:
            raise InputError(
                "add_action() was called with no pending observation; call add_observation() first."
            )
        self._turns.append((self._pending, action))
        self._pending = None

    def encode(self, text: str) -> list[int]:
        """Tokenize a prompt exactly as :meth:`render` does.

        Args:
            text: Prompt text.

        Returns:
            Its token ids.
        """
        return list(self.tokenizer(text, add_special_tokens=self.add_special_tokens)["input_ids"])

    def _text(self, turns: Sequence[tuple[str, str]], observation: Optional[str]) -> str:
        if self.uses_chat_template:
            messages: list[dict[str, str]] = []
            if self.system_prompt is not None:
                messages.append({"role": "system", "content": self.system_prompt})
            for obs, action in turns:
                messages.append({"role": "user", "content": obs})
                messages.append({"role": "assistant", "content": action})
            if observation is not None:
                messages.append({"role": "user", "content": observation})
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=observation is not None
            )
            return str(text)
        parts = (
            [self.template.system.format(system=self.system_prompt)] if self.system_prompt is not None else []
        )
        parts.extend(self.template.turn.format(observation=obs, action=action) for obs, action in turns)
        if observation is not None:
            parts.append(self.template.query.format(observation=observation))
        return "".join(parts)

    def char_limit(self) -> Optional[int]:
        """Most characters of text that ``max_prompt_tokens`` tokens can hold, or ``None`` if unbounded.

        ``max_prompt_tokens`` times the longest token string of the tokenizer's vocabulary (a
        byte-level token's string has one character per byte, so it is never shorter than the text
        it encodes). Text beyond it cannot fit the budget, so :meth:`render` cuts it before
        tokenizing instead of tokenizing it whole (a tokenizer whose normalizer drops characters,
        such as runs of blanks, may have fit a little more: the cut still leaves a prompt that fits).
        """
        if not self._char_limit_known:
            self._char_limit_known = True
            get_vocab = getattr(self.tokenizer, "get_vocab", None)
            if self.max_prompt_tokens is not None and callable(get_vocab):
                longest = max((len(token) for token in get_vocab()), default=0)
                self._char_limit = self.max_prompt_tokens * longest if longest > 0 else None
        return self._char_limit

    def _first_turn_within(self, lowest: int, observation: str, limit: int) -> int:
        """The oldest turn from ``lowest`` on whose text, with the later turns and ``observation``, is within ``limit`` characters."""
        first, size = len(self._turns), len(observation)
        while first > lowest and size + sum(map(len, self._turns[first - 1])) <= limit:
            first -= 1
            size += sum(map(len, self._turns[first]))
        return first

    def _fits(self, ids: list[int]) -> bool:
        return self.max_prompt_tokens is None or len(ids) <= self.max_prompt_tokens

    def render(self) -> Prompt:
        """Render the pending observation and the most recent turns that fit in the budget.

        Returns:
            The :class:`Prompt`; its ``token_ids`` are at most ``max_prompt_tokens`` long.

        Raises:
            InputError: If no observation is pending, or (with ``overflow="error"``) the system prompt
                and the pending observation alone exceed ``max_prompt_tokens``, or (with
                ``"truncate_left"``) even an empty observation does not fit.
        """
        observation = self._pending
        if observation is None:
            raise InputError("render() needs a pending observation; call add_observation() first.")
        total = len(self._turns)
        lowest = 0 if self.max_turns is None else max(total - self.max_turns, 0)
        limit = self.char_limit()
        if limit is not None:  # text past the character bound cannot fit: never tokenize it
            if len(observation) > limit:
                return self._truncate_observation(observation, total)
            lowest = self._first_turn_within(lowest, observation, limit)
        text = self._text(self._turns[lowest:], observation)
        ids = self.encode(text)
        if self._fits(ids):
            return Prompt(text, ids, lowest, total - lowest, False)
        # Drop the oldest turns first: the smallest start index whose prompt fits.
        best = self._smallest_fitting(
            lowest + 1, total, lambda mid: self._text(self._turns[mid:], observation)
        )
        if best is not None:
            first, text, ids = best
            return Prompt(text, ids, first, total - first, False)
        return self._truncate_observation(observation, total)

    def _smallest_fitting(
        self, lo: int, hi: int, render: Callable[[int], str]
    ) -> Optional[tuple[int, str, list[int]]]:
        """Binary search of the smallest ``i`` in ``[lo, hi]`` whose ``render(i)`` fits the budget.

        ``render(i)`` must shrink as ``i`` grows. Returns ``(i, text, ids)``, or ``None`` if none fits.
        """
        best: Optional[tuple[int, str, list[int]]] = None
        while lo <= hi:
            mid = (lo + hi) // 2
            text = render(mid)
            ids = self.encode(text)
            if self._fits(ids):
                best = (mid, text, ids)
                hi = mid - 1
            else:
                lo = mid + 1
        return best

    def _truncate_observation(self, observation: str, total: int) -> Prompt:
        limit = self.char_limit()
        if self.overflow == "error":
            if limit is not None and len(observation) > limit:
                size = f"the current observation alone has {len(observation)} characters, more than the {limit} that"
            else:
                bare_ids = self.encode(self._text([], observation))
                size = (
                    f"the system prompt and the current observation alone take {len(bare_ids)} tokens, over"
                )
            raise InputError(
                f"{size} max_prompt_tokens={self.max_prompt_tokens} can hold; raise agent.max_prompt_tokens, shorten "
                "the system prompt or observation, or use overflow='truncate_left' (or 'truncate_right')."
            )
        empty_ids = self.encode(self._text([], ""))
        if not self._fits(empty_ids):
            raise InputError(
                f"the system prompt and template alone take {len(empty_ids)} tokens, over "
                f"max_prompt_tokens={self.max_prompt_tokens}; raise agent.max_prompt_tokens or shorten "
                "the system prompt."
            )
        # Keep the longest suffix (truncate_left) or prefix (truncate_right) of the observation that fits
        # (smallest cut), within the character bound.
        if self.overflow == "truncate_right":
            kept = observation if limit is None else observation[:limit]
            first_cut = 1 if len(kept) == len(observation) else 0
            found = self._smallest_fitting(
                first_cut, len(kept) - 1, lambda cut: self._text([], kept[: len(kept) - cut])
            )
        else:
            kept = observation if limit is None else observation[-limit:]
            first_cut = 1 if len(kept) == len(observation) else 0
            found = self._smallest_fitting(first_cut, len(kept) - 1, lambda cut: self._text([], kept[cut:]))
        _, text, ids = found if found is not None else (len(observation), self._text([], ""), empty_ids)
        return Prompt(text, ids, total, 0, True)

    def check_prefix_stable(self, previous: Prompt) -> bool:
        """Check that the current history still renders to ``previous.token_ids`` followed by more.

        The history is re-rendered from ``previous.first_turn`` (without the budget) up to now: the
        turns since then, and the pending observation if any. Without drift, the previously sent ids
        are a prefix of the re-rendered ids, so what the model saw is what the history says it saw.
        A chat template that rewrites earlier messages, or a tokenization that merges across the
        boundary between the old prompt and the new text, breaks this. A prompt whose observation was
        truncated never passes (the history keeps the full observation).

        Args:
            previous: A prompt returned by :meth:`render` earlier in the current episode.

        Returns:
            ``True`` if ``previous.token_ids`` is a prefix of the re-rendered ids.

        Raises:
            InputError: If ``previous`` does not come from the current episode (it covers more turns
                than the history holds).
        """
        if previous.first_turn + previous.num_turns > len(self._turns):
            raise InputError(
                f"previous covers turns up to {previous.first_turn + previous.num_turns} but the history has "
                f"{len(self._turns)} turns; pass a prompt rendered earlier in the current episode (before reset())."
            )
        ids = self.encode(self._text(self._turns[previous.first_turn :], self._pending))
        return ids[: len(previous.token_ids)] == list(previous.token_ids)
