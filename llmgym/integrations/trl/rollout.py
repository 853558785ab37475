"""llmgym envs through TRL's ``GRPOTrainer(rollout_func=...)``: whole episodes, token ids in and out.

For models whose chat template TRL cannot parse for tool calls (or that have none), the episode is
played here instead: :class:`EnvRollout` renders the env's instructions and first observation with
llmgym's :class:`~llmgym.agents.history.PlainTemplate`, samples each action from the trainer's
model, steps the env with the action text and appends the next observation's tokens, until the
episode ends or ``max_turns`` actions. It returns one token sequence per episode: the model's
tokens with ``env_mask`` 1 and the observations' tokens with ``env_mask`` 0 (TRL leaves them out of
the loss), their sampling log-probs, and the episode return for :func:`env_return_reward`.

TRL hands ``rollout_func`` the prompts only, so the dataset comes from :meth:`EnvRollout.dataset`:
each prompt is the rendered start of one seeded episode, and the adapter finds the seed again from
the prompt, so every completion of a GRPO group starts from the same state.

Usage::

    rollout = EnvRollout("llmgym/EchoWord-v0")
    trainer = GRPOTrainer(model, reward_funcs=env_return_reward, args=GRPOConfig(...),
                          train_dataset=rollout.dataset(range(64)), rollout_func=rollout)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from llmgym.agents.history import PlainTemplate
from llmgym.errors import ConfigError, InputError, InvalidActionError
from llmgym.integrations.trl.environment import describe, make_env

if TYPE_CHECKING:
    import torch
    from datasets import Dataset

__all__ = ["EnvRollout", "Episode", "env_return_reward"]


@dataclass
class Episode:
    """One played episode as token ids.

    Attributes:
        prompt_ids: The rendered start (instructions and first observation), ``[P]``.
        completion_ids: Actions and later observations, ``[C]``.
        logprobs: Sampling log-prob of each completion token (0 on observation tokens), ``[C]``.
        env_mask: 1 on the model's tokens, 0 on the observations', ``[C]``.
        actions: The action texts sent to the env.
        env_return: The sum of the env's rewards.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    env_return: float = 0.0

    def extend(self, ids: Sequence[int], logprobs: Sequence[float], from_model: bool) -> None:
        """Append tokens: the model's (with their log-probs) or the env's (log-probs 0, mask 0)."""
        self.completion_ids.extend(ids)
        self.logprobs.extend(logprobs if from_model else [0.0] * len(ids))
        self.env_mask.extend([int(from_model)] * len(ids))


def env_return_reward(completions: Sequence[Any], env_return: Sequence[float], **kwargs: Any) -> list[float]:
    """TRL reward function: the episode return :class:`EnvRollout` measured for each completion."""
    return [float(r) for r in env_return]


@dataclass
class EnvRollout:
    """A picklable ``rollout_func`` playing llmgym episodes with the trainer's model.

    Attributes:
        env_id: A registered id (``llmgym/EchoWord-v0``) or ``module:id``.
        env_kwargs: Keyword arguments of ``gymnasium.make``.
        max_episode_steps: Env time limit; ``None`` keeps the env's.
        max_turns: Most actions per episode (an unfinished episode keeps its return so far).
        max_new_tokens: Most tokens per action.
        temperature: Sampling temperature of the actions (the log-probs are those of this distribution).
        template: How the instructions (``system``), and each observation (``query``) are rendered; the
            observations after the first are preceded by a newline.
        instructions: Text before the first observation; ``None``: the env's instructions.
    """

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_episode_steps: Optional[int] = None
    max_turns: int = 8
    max_new_tokens: int = 16
    temperature: float = 1.0
    template: PlainTemplate = field(default_factory=PlainTemplate)
    instructions: Optional[str] = None
    _seeds: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"EnvRollout {name}={value!r} is invalid; expected an int >= 1.")
        if not self.temperature > 0:
            raise ConfigError(
                f"EnvRollout temperature={self.temperature!r} is invalid; expected a number > 0."
            )

    def _start(self, env: Any, seed: int) -> tuple[str, Any]:
        from llmgym.envs.core import observation_text

        obs, info = env.reset(seed=seed)
        instructions = self.instructions
        if instructions is None:
            text = getattr(env.unwrapped, "instructions", None)
            instructions = text if isinstance(text, str) else ""
        system = self.template.system.format(system=instructions) if instructions else ""
        query = self.template.query.format(
            observation=describe(observation_text(obs), info.get("valid_actions"))
        )
        return system + query, obs

    def dataset(self, seeds: Iterable[int]) -> Dataset:
        """The training set: one row per distinct start, ``prompt`` (text) and ``seed`` columns.

        A seed whose rendered start equals an earlier seed's is skipped (the prompt is how the seed
        is found again), so the rows may be fewer than the seeds.

        Args:
            seeds: Reset seeds.

        Returns:
            A ``datasets.Dataset``.
        """
        from datasets import Dataset

        env = make_env(self.env_id, self.env_kwargs, self.max_episode_steps)
        try:
            for seed in seeds:
                prompt, _ = self._start(env, int(seed))
                self._seeds.setdefault(prompt, int(seed))
        finally:
            env.close()
        return Dataset.from_dict({"prompt": list(self._seeds), "seed": list(self._seeds.values())})

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play one episode per prompt with ``trainer``'s model (TRL's ``rollout_func(prompts, trainer)``).

        Args:
            prompts: Prompts of :meth:`dataset` rows (GRPO repeats each ``num_generations`` times).
            trainer: The ``GRPOTrainer`` (its model, tokenizer and accelerator).

        Returns:
            ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and ``env_return``, one entry per prompt.

        Raises:
            InputError: A prompt that :meth:`dataset` did not make.
        """
        import torch

        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        env = make_env(self.env_id, self.env_kwargs, self.max_episode_steps)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                episodes = [self._play(env, self._seed(prompt), model, tokenizer) for prompt in prompts]
        finally:
            model.train(was_training)
            env.close()
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "env_return": [e.env_return for e in episodes],
        }

    def _seed(self, prompt: Any) -> int:
        if not isinstance(prompt, str) or prompt not in self._seeds:
            raise InputError(
                f"rollout prompt {prompt!r:.120} was not made by this EnvRollout's dataset(); "
                "train on rollout.dataset(seeds) (the prompt is how an episode's seed is found)."
            )
        return self._seeds[prompt]

    def _play(self, env: Any, seed: int, model: Any, tokenizer: Any) -> Episode:
        """One episode: sample an action, step the env, append the next observation; repeat."""
        from llmgym.envs.core import observation_text

        prompt, _ = self._start(env, seed)
        episode = Episode(list(tokenizer(prompt)["input_ids"]))
        eos = tokenizer.eos_token_id
        for turn in range(self.max_turns):
            ids, logprobs = self._sample(
                model, episode.prompt_ids + episode.completion_ids, eos, tokenizer.pad_token_id
            )
            episode.extend(ids, logprobs, from_model=True)
            action = tokenizer.decode(ids, skip_special_tokens=True).strip()
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except InvalidActionError as exc:
                text = f"Invalid action: {exc}"
                done = False
            else:
                episode.actions.append(action)
                episode.env_return += float(reward)
                done = bool(terminated or truncated)
                text = describe(observation_text(obs), info.get("valid_actions"))
            if done or turn == self.max_turns - 1:
                break
            chunk = "\n" + self.template.query.format(observation=text)
            episode.extend(tokenizer(chunk, add_special_tokens=False)["input_ids"], [], from_model=False)
        return episode

    def _sample(
        self, model: Any, context: list[int], eos: Optional[int], pad: Optional[int]
    ) -> tuple[list[int], list[float]]:
        """Sample one action's tokens (up to EOS, included) and their log-probs at ``temperature``."""
        import torch

        device = next(model.parameters()).device
        input_ids = torch.tensor([context], device=device)
        output = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            temperature=self.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=eos,
            pad_token_id=pad if pad is not None else eos,
        )
        ids = output[0, len(context) :].tolist()
        if eos is not None and eos in ids:
            ids = ids[: ids.index(eos) + 1]
        return ids, self._logprobs(model, input_ids, ids)

    def _logprobs(self, model: Any, input_ids: torch.Tensor, ids: list[int]) -> list[float]:
        """``log p(ids[t] | context, ids[:t])`` at ``temperature``, ``[len(ids)]``."""
        import torch

        if not ids:
            return []
        new = torch.tensor([ids], device=input_ids.device)
        logits = model(input_ids=torch.cat([input_ids, new], dim=1)).logits[0, input_ids.shape[1] - 1 : -1]
        logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        return logp.gather(1, new[0].unsqueeze(1)).squeeze(1).tolist()
