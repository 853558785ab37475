"""GenerativeAgent (LlamaGym): free-text generation parsed into an action by ``extract_action``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Optional

from llmgym.agents.actions import Decision, TokenChoice
from llmgym.agents.base import BaseAgent
from llmgym.agents.history import History, PlainTemplate, Prompt
from llmgym.agents.policies import TokenPolicy, decoder_state_values
from llmgym.envs.core import normalize_action_text
from llmgym.errors import ConfigError, InvalidActionError
from llmgym.llm.protocols import PolicyLLM
from llmgym.llm.sampling import Sampling

__all__ = ["DecoderHistory", "GenerativeAgent", "TokenAgent", "TokenHistory", "Agent", "is_encoder_decoder"]


class GenerativeAgent(BaseAgent):
    """Generates a response per step and parses it with :meth:`extract_action`.

    The default :meth:`extract_action` maps the response onto the env's valid actions (exact
    match first, then the first valid action the response contains). When the parsed action is
    ``None`` (or not valid where valid actions are known), the ``agent.invalid_action`` policy
    applies: ``"penalty"`` takes :meth:`fallback_action` and adds ``agent.invalid_action_penalty``
    to that step's reward (counted in ``parse_failed``), ``"error"`` raises
    :class:`~llmgym.errors.InvalidActionError`. The response's sampled token ids and their
    log-probs under the distribution they were drawn from (:attr:`policy`, a
    :class:`~llmgym.agents.policies.TokenPolicy`) are kept for training; they are never re-tokenized.
    """

    #: The valid actions of the env whose response is being parsed (``None`` outside parsing).
    current_valid_actions: Optional[list[str]] = None

    def extract_action(self, response: str) -> Any:
        """Map the response onto a valid action when the env lists them; else the stripped text.

        In a free-text env (no ``info["valid_actions"]``, e.g. ``llmgym/TextGen-v0``) every string is
        an action, the empty one included: an empty generation is the action ``""``, judged by the
        env's reward, never a parse failure.
        """
        valid = self.current_valid_actions
        text = normalize_action_text(response)
        if valid is None:
            return response.strip()
        by_norm = {normalize_action_text(v): v for v in valid}
        if text in by_norm:
            return by_norm[text]
        hits = sorted((text.find(norm), v) for norm, v in by_norm.items() if norm and norm in text)
        return hits[0][1] if hits else None

    def fallback_action(self, candidates: Optional[list[str]]) -> Any:
        """Action taken when the response cannot be parsed. Default: the first valid action."""
        if not candidates:
            raise InvalidActionError(
                "the generated response could not be parsed and the env lists no valid actions to fall back "
                "on; override GenerativeAgent.fallback_action or set agent.invalid_action=error."
            )
        return candidates[0]

    def make_policy(self) -> TokenPolicy:
        """The agent's generation settings: its distribution (:meth:`sampling_config`), ``agent.max_new_tokens`` and ``agent.stop``."""
        return TokenPolicy(self.sampling_config(), self.config.max_new_tokens, stop=tuple(self.config.stop))

    def sampling_config(self) -> Sampling:
        """The distribution the agent's settings describe (temperature, top-k, top-p, repetition penalty, min_new_tokens)."""
        cfg = self.config
        return Sampling(
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            top_p=cfg.top_p,
            repetition_penalty=cfg.repetition_penalty,
            min_new_tokens=cfg.min_new_tokens,
        )

    def parse(self, response: str, options: Optional[list[str]]) -> tuple[Any, bool]:
        """Turn a response into ``(action, parse_failed)`` with the ``agent.invalid_action`` policy.

        Raises:
            InvalidActionError: When parsing fails and ``agent.invalid_action`` is ``"error"``.
        """
        self.current_valid_actions = options
        try:
            action = self.extract_action(response)
        finally:
            self.current_valid_actions = None
        failed = action is None or (options is not None and isinstance(action, str) and action not in options)
        if not failed:
            return action, False
        if self.config.invalid_action == "error":
            raise InvalidActionError(
                f"the response {response!r} could not be parsed into an action (valid: {options}); "
                "fix extract_action or set agent.invalid_action=penalty."
            )
        return self.fallback_action(options), True

    def _decide(
        self, prompts: Sequence[Prompt], candidates: Sequence[Optional[list[str]]], greedy: bool
    ) -> list[Decision]:
        """The policy's generations, each parsed into an env action (:meth:`parse`)."""
        decisions = super()._decide(prompts, candidates, greedy)
        parsed = []
        for decision, options in zip(decisions, candidates):
            action, failed = self.parse(decision.response, options)
            parsed.append(replace(decision, action=action, parse_failed=failed))
        return parsed


class TokenHistory(History):
    """A token-level episode of a causal model: each turn is one generated token.

    :meth:`render` says how many tokens the episode has generated so far
    (:attr:`~llmgym.agents.history.Prompt.episode_tokens`, its turns), which ``agent.min_new_tokens``
    counts: EOS is banned while it is below the minimum, as RL4LMs' ``min_length`` bans it.
    """

    def render(self) -> Prompt:
        """:meth:`History.render`, with the episode's token count."""
        return replace(super().render(), episode_tokens=len(self._turns))


class DecoderHistory(TokenHistory):
    """A token-level episode of an encoder-decoder model: the episode's first observation goes to the encoder, the tokens generated since to the decoder.

    :meth:`render` renders the first observation once (the prompt, as RL4LMs' seq2seq policies
    encode it) and returns it with :attr:`decoder_ids`, the ids the agent generated since, which
    :class:`TokenAgent` appends after each step; the later observations' text (prompt + completion
    so far) is never re-tokenized. Its ``episode_tokens`` is the decoder prefix's length.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prompt: Optional[Prompt] = None
        #: The token ids generated so far in the episode (the decoder prefix).
        self.decoder_ids: list[int] = []
        #: The encoder ids the LLM fed at the episode's first step (``None`` before it).
        self.encoder_ids: Optional[list[int]] = None

    def reset(self) -> None:
        """Forget the episode, its encoder prompt and its decoder prefix."""
        super().reset()
        self._prompt = None
        self.decoder_ids = []
        self.encoder_ids = None

    def render(self) -> Prompt:
        """The episode's encoder prompt with the decoder prefix (see the class docstring)."""
        if self._prompt is None:
            self._prompt = super().render()
        return replace(
            self._prompt, decoder_ids=tuple(self.decoder_ids), episode_tokens=len(self.decoder_ids)
        )


def is_encoder_decoder(llm: PolicyLLM) -> bool:
    """Whether an LLM (:class:`llmgym.LLM` or a backend) serves an encoder-decoder model.

    An in-process model says so itself (its config's ``is_encoder_decoder``); LLM servers are
    known by ``model.model_type: seq2seq``.
    """
    backend = getattr(llm, "backend", llm)
    detected = getattr(backend, "is_seq2seq", None)
    if detected is not None:
        return bool(detected)
    return getattr(getattr(backend, "config", None), "model_type", None) == "seq2seq"


class TokenAgent(GenerativeAgent):
    """Token-level agent for RLHF-style training: each generated token is one env action.

    Pair it with a token-level env such as ``llmgym/TextGen-v0`` with ``mode="token"`` and
    ``eos_token`` set to the tokenizer's EOS string. Each step samples exactly one token from the
    current prompt; the decision keeps the prompt ids fed and the sampled id, so PPO trains on the
    exact ids of every step (a per-token policy, per-token values and per-token KL). The env
    receives the token's text (the EOS string for EOS).

    With an encoder-decoder model (T5, BART) the prompt is the episode's first observation, fed to
    the encoder, and the tokens generated since are the decoder's prefix (:class:`DecoderHistory`),
    as RL4LMs' seq2seq policies do.
    """

    def make_history(self) -> History:
        """The prompt is the observation itself (the text so far), after the system prompt if any.

        A :class:`TokenHistory` (its prompts count the episode's tokens, for ``agent.min_new_tokens``); with an
        encoder-decoder model, a :class:`DecoderHistory`: the first observation and the tokens since, the first
        observation cut on ``agent.prompt_truncation_side`` when over ``agent.max_prompt_tokens``.

        Raises:
            ConfigError: ``agent.prompt_truncation_side=right`` with a causal model, whose prompt is the
                text so far: its end is what was just generated.
        """
        seq2seq = is_encoder_decoder(self.llm)
        right = self.config.prompt_truncation_side == "right"
        if right and not seq2seq:
            raise ConfigError(
                "agent.prompt_truncation_side=right cuts the end of an encoder-decoder's prompt; a causal token "
                "agent's prompt is the text so far, whose end is what it just generated. Fix: "
                "agent.prompt_truncation_side=left, or an encoder-decoder model."
            )
        kind = DecoderHistory if seq2seq else TokenHistory
        return kind(
            self.llm.tokenizer,
            system_prompt=self.config.system_prompt,
            max_turns=0,
            max_prompt_tokens=self.config.max_prompt_tokens,
            use_chat_template=False,
            template=PlainTemplate(query="{observation}"),
            overflow="truncate_right" if right else "truncate_left",
        )

    def _record_decision(self, history: History, decision: Decision) -> None:
        """:meth:`BaseAgent._record_decision`; an encoder-decoder's sampled ids also extend its env's decoder prefix."""
        super()._record_decision(history, decision)
        if isinstance(history, DecoderHistory) and isinstance(decision.choice, TokenChoice):
            history.decoder_ids.extend(decision.choice.token_ids)
            history.encoder_ids = list(decision.prompt_ids)

    def values_of(self, observations: dict[int, Any]) -> dict[int, float]:
        """:meth:`BaseAgent.values_of`; for an encoder-decoder episode under way, the decoder's state after its tokens so far."""
        started = {
            i: h
            for i in observations
            if isinstance(h := self.histories[i], DecoderHistory) and h.encoder_ids is not None
        }
        rest = {i: obs for i, obs in observations.items() if i not in started}
        values = super().values_of(rest) if rest else {}
        if started:
            encoder = [list(h.encoder_ids or []) for h in started.values()]
            values.update(
                zip(
                    started,
                    decoder_state_values(self.llm, encoder, [h.decoder_ids for h in started.values()]),
                )
            )
        return values

    def make_policy(self) -> TokenPolicy:
        """One token per action, its text with special tokens (EOS is sent to the env as its string)."""
        return TokenPolicy(self.sampling_config(), max_new_tokens=1, special_tokens=True)

    def extract_action(self, response: str) -> Any:
        """Every token is an action, sent as it is (spaces included)."""
        return response


#: LlamaGym's ``Agent``: subclass it and override ``get_system_prompt``, ``format_observation`` and
#: ``extract_action``; it generates text and parses it into actions.
Agent = GenerativeAgent
