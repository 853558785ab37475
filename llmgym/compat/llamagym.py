"""LlamaGym's API on llmgym: run LlamaGym scripts after changing only the imports.

Replace ``from llamagym import Agent`` and ``from trl import AutoModelForCausalLMWithValueHead``
with ``from llmgym.compat.llamagym import Agent, AutoModelForCausalLMWithValueHead``; the rest of
a script written for LlamaGym (https://github.com/KhoomeiK/LlamaGym) runs unchanged::

    class BlackjackAgent(Agent):
        def get_system_prompt(self) -> str: ...
        def format_observation(self, observation) -> str: ...
        def extract_action(self, response: str): ...

    model = AutoModelForCausalLMWithValueHead.from_pretrained("SmolLM2-135M-Instruct", peft_config=LoraConfig(r=16))
    agent = BlackjackAgent(model, tokenizer, "cpu", {"generate/top_p": 0.6}, {"batch_size": 8, "mini_batch_size": 8})
    action = agent.act(observation); agent.assign_reward(reward); stats = agent.terminate_episode()

How LlamaGym's conventions map onto llmgym (no TRL involved):

- ``model`` is this module's :class:`AutoModelForCausalLMWithValueHead`, TRL's (its
  ``pretrained_model`` is used), a transformers causal LM (PEFT-wrapped or not) or a model name
  or folder; the value head is llmgym's (:class:`~llmgym.llm.modules.ValueHead` with no hidden
  layer: a linear map of the last prompt token's hidden state, as TRL's head is).
- ``generate_config_dict`` (``generate/`` prefixes dropped, as LlamaGym does) goes to
  ``llmgym.LLM.generate``. With ``do_sample`` the temperature, ``top_k``, ``top_p``,
  ``repetition_penalty`` and ``min_new_tokens`` in force (the dict's, else the model's generation
  config, else transformers' defaults) are passed explicitly and make the
  :class:`~llmgym.llm.sampling.Sampling` that training scores responses under: the policy trained
  is the one sampled from. Other arguments that change the sampling distribution (``min_p``,
  ``no_repeat_ngram_size``...) raise a :class:`~llmgym.errors.ConfigError`.
- ``ppo_config_dict`` takes TRL's ``PPOConfig`` names (:class:`PPOConfig`); ``batch_size`` is
  the number of turns per update, as in LlamaGym. The update is llmgym's PPO, as TRL's
  ``PPOTrainer.step`` sees the batch: every (query, response, reward) is a one-step episode whose
  action is the whole response (its log-prob the sum of its tokens'), whose value is the query's
  and whose advantage is ``reward - value``, whitened over the batch. TRL's KL control is
  reproduced (``algorithm.kl``): ``-beta * (log pi - log pi_ref)`` of each response token is added
  to the turn's reward (summed over the response: the turn is one step), ``beta`` starting at
  ``init_kl_coef`` (TRL's 0.2) and adapted after each update by TRL's ``AdaptiveKLController``
  (``adap_kl_ctrl``, ``target`` 6 nats per response, ``horizon`` 10000 turns). The reference is the
  model with its LoRA adapter disabled, or a frozen copy of the initial weights (TRL's
  ``create_reference_model``) when the whole model trains. Not reproduced: TRL's per-token
  credit within a response.
- ``llm(messages)`` returns the generated text, special tokens skipped, stripped (LlamaGym splits
  the decoded prompt and response on ``[/INST]``, which gives the same text with Llama-2's chat
  template only). ``current_batch`` holds the exact prompt and response token ids generated (not
  a re-tokenization of the messages) and LlamaGym's per-turn rewards. LlamaGym's ``model_ref`` and
  ``ppo_trainer`` attributes do not exist: :meth:`Agent.step` stands for ``ppo_trainer.step``.
"""

from __future__ import annotations

import abc
import dataclasses
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from llmgym.agents.actions import Decision, TokenChoice
from llmgym.agents.learning import Episode
from llmgym.agents.policies import TokenPolicy
from llmgym.config import AlgorithmConfig, KLConfig, ModelConfig, PPOSection
from llmgym.envs.reward_checks import check_reward
from llmgym.errors import ConfigError, InputError, require
from llmgym.llm.modules import VALUE_KEY
from llmgym.llm.sampling import Sampling

__all__ = ["Agent", "AutoModelForCausalLMWithValueHead", "PPOConfig", "generation_settings"]

#: LlamaGym's defaults when ``generate_config_dict`` / ``ppo_config_dict`` are ``None``.
DEFAULT_GENERATE_CONFIG: dict[str, Any] = {
    "max_new_tokens": 32,
    "do_sample": True,
    "top_p": 0.6,
    "top_k": 0,
    "temperature": 0.9,
}
DEFAULT_PPO_CONFIG: dict[str, Any] = {"batch_size": 16, "mini_batch_size": 16}

#: Largest float16 value: LlamaGym keeps rewards (``current_batch["rewards"]``) in float16.
_FLOAT16_MAX: float = float(torch.finfo(torch.float16).max)

#: ``PPOConfig`` fields that count turns or passes: integers >= 1.
_PPO_COUNTS = ("batch_size", "mini_batch_size", "ppo_epochs", "gradient_accumulation_steps")

#: What ``generate`` samples with when neither the call nor the model's generation config says.
_TRANSFORMERS_SAMPLING_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}

#: Generation arguments that change the sampling distribution, with the value that leaves it alone.
_DISTRIBUTION_ARGS: dict[str, Any] = {
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "top_h": None,
    "min_length": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
}

#: TRL ``PPOConfig`` keys about logging, trackers, the hub, devices or distributed sizes: no effect here.
_PPO_IGNORED = frozenset(
    {
        "exp_name",
        "log_with",
        "task_name",
        "model_name",
        "query_dataset",
        "reward_model",
        "remove_unused_columns",
        "tracker_kwargs",
        "accelerator_kwargs",
        "project_kwargs",
        "tracker_project_name",
        "push_to_hub_if_best_kwargs",
        "steps",
        "optimize_cuda_cache",
        "optimize_device_cache",
        "forward_batch_size",
        "backward_batch_size",
        "global_backward_batch_size",
        "global_batch_size",
        "world_size",
        "is_encoder_decoder",
        "is_peft_model",
        "compare_steps",
        "ratio_threshold",
    }
)

#: TRL ``PPOConfig`` keys with no llmgym equivalent, with the only value accepted (TRL's default).
_PPO_NEUTRAL: dict[str, Any] = {
    "whiten_rewards": False,
    "use_score_scaling": False,
    "use_score_norm": False,
    "score_clip": None,
}

#: TRL's ``kl_penalty`` values and llmgym's per-token KL estimators they are.
_KL_ESTIMATORS: dict[str, str] = {"kl": "k1", "mse": "k2"}

#: TRL's statistic names for llmgym's update statistics (others get a ``ppo/`` prefix).
_TRL_STAT_NAMES: dict[str, str] = {
    "loss": "ppo/loss/total",
    "policy_loss": "ppo/loss/policy",
    "value_loss": "ppo/loss/value",
    "entropy": "ppo/policy/entropy",
    "approx_kl": "ppo/policy/approxkl",
    "clip_fraction": "ppo/policy/clipfrac",
    "value_clip_fraction": "ppo/val/clipfrac",
    "kl_ref": "objective/kl",
    "kl_coef": "objective/kl_coef",
    "episode_return": "ppo/mean_scores",
}


@dataclasses.dataclass
class PPOConfig:
    """TRL's ``PPOConfig`` fields that have an llmgym meaning, with TRL's defaults.

    Attributes:
        batch_size: Turns (query, response, reward) per update.
        mini_batch_size: Turns per gradient step.
        learning_rate: Learning rate of the model (or its adapters) and the value head.
        ppo_epochs: Passes over each batch.
        gradient_accumulation_steps: Chunks a minibatch's gradient is accumulated over.
        gamma: Discount; no effect on one-step episodes (TRL applies it within a response).
        lam: GAE lambda; no effect on one-step episodes.
        cliprange: PPO ratio clip.
        cliprange_value: Value clip around the old value.
        vf_coef: Weight of the value loss.
        init_kl_coef: Initial weight ``beta`` of the KL penalty in the reward (TRL's 0.2; 0: no KL).
        adap_kl_ctrl: Adapt ``beta`` with TRL's ``AdaptiveKLController`` (else it stays fixed).
        target: The adaptive controller's target KL, nats per response (TRL's 6).
        horizon: The adaptive controller's horizon, in turns (TRL's 10000).
        kl_penalty: TRL's per-token KL estimate: ``"kl"`` (``log pi - log pi_ref``, llmgym's ``k1``)
            or ``"mse"`` (half its square, ``k2``).
        max_grad_norm: Clip of the global gradient norm (``None``: off).
        early_stopping: Stop the epochs once the approximate KL exceeds ``target_kl``.
        target_kl: See ``early_stopping``.
        seed: Seed of the minibatch order.
    """

    batch_size: int = 256
    mini_batch_size: int = 1
    learning_rate: float = 1.41e-5
    ppo_epochs: int = 4
    gradient_accumulation_steps: int = 1
    gamma: float = 1.0
    lam: float = 0.95
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.1
    init_kl_coef: float = 0.2
    adap_kl_ctrl: bool = True
    target: float = 6.0
    horizon: int = 10000
    kl_penalty: str = "kl"
    max_grad_norm: Optional[float] = None
    early_stopping: bool = False
    target_kl: float = 1.0
    seed: int = 0

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> PPOConfig:
        """Build from LlamaGym's ``ppo_config_dict`` (TRL's keyword arguments).

        Raises:
            ConfigError: On an unknown key, a key whose value llmgym cannot honour (``kl_penalty``
                other than ``"kl"`` or ``"mse"``), or a ``batch_size``, ``mini_batch_size``,
                ``ppo_epochs`` or ``gradient_accumulation_steps`` that is not an integer >= 1.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        for key, neutral in _PPO_NEUTRAL.items():
            if key in config and config[key] != neutral:
                raise ConfigError(
                    f"ppo_config_dict[{key!r}]={config[key]!r} has no llmgym equivalent; remove it (or set {neutral!r})."
                )
        unknown = sorted(
            k for k in config if k not in fields and k not in _PPO_IGNORED and k not in _PPO_NEUTRAL
        )
        if unknown:
            raise ConfigError(f"ppo_config_dict has unsupported keys {unknown}; supported: {sorted(fields)}.")
        if config.get("kl_penalty", "kl") not in _KL_ESTIMATORS:
            raise ConfigError(
                f"ppo_config_dict['kl_penalty']={config['kl_penalty']!r} has no llmgym equivalent; use 'kl' (TRL's "
                "default, log pi - log pi_ref) or 'mse' (half its square)."
            )
        for key in _PPO_COUNTS:
            value = config.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ConfigError(
                    f"ppo_config_dict[{key!r}]={value!r:.60} is invalid; expected an integer >= 1."
                )
        return cls(**{k: v for k, v in config.items() if k in fields})

    def kl(self) -> KLConfig:
        """TRL's KL control as ``algorithm.kl``: a reward penalty per response, adaptive unless ``adap_kl_ctrl=False``."""
        adaptive = self.adap_kl_ctrl and self.init_kl_coef > 0  # TRL's controller keeps a zero weight at zero
        return KLConfig(
            coef=self.init_kl_coef,
            controller="adaptive" if adaptive else "fixed",
            target=self.target,
            horizon=self.horizon,
            unit="completion",
            penalty="reward",
            estimator=_KL_ESTIMATORS[self.kl_penalty],
        )

    def algorithm(self) -> AlgorithmConfig:
        """The llmgym ``algorithm`` section of these settings (no entropy bonus, as TRL)."""
        return AlgorithmConfig(
            name="ppo",
            learning_rate=self.learning_rate,
            head_learning_rate=self.learning_rate,
            epochs=self.ppo_epochs,
            minibatch_size=self.mini_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            gamma=self.gamma,
            gae_lambda=self.lam,
            normalize_advantages=True,
            ppo=PPOSection(
                clip_range=self.cliprange,
                value_clip_range=self.cliprange_value,
                target_kl=self.target_kl if self.early_stopping else None,
            ),
            value_coef=self.vf_coef,
            entropy_coef=0.0,
            kl=self.kl(),
            max_grad_norm=self.max_grad_norm,
        )


def generation_settings(
    config: Mapping[str, Any], generation_config: Any
) -> tuple[dict[str, Any], Optional[Sampling]]:
    """``llm.generate`` arguments and the sampling distribution of LlamaGym's ``generate_config_dict``.

    Args:
        config: The dict (keys may carry a ``generate/`` prefix, dropped as LlamaGym does).
        generation_config: The model's ``generation_config`` (its values fill what the dict omits).

    Returns:
        ``(kwargs, sampling)``: with ``do_sample`` the temperature, ``top_k``, ``top_p``,
        ``repetition_penalty`` and ``min_new_tokens`` in force are explicit in ``kwargs`` and
        ``sampling`` holds them; greedy decoding gives ``None``.

    Raises:
        ConfigError: When sampling with an argument that changes the distribution in a way
            training cannot score (``min_p``, ``no_repeat_ngram_size``...).
    """
    kwargs = {key.split("/")[-1]: value for key, value in config.items()}

    def in_force(name: str, default: Any) -> Any:
        value = kwargs.get(name, getattr(generation_config, name, None))
        return default if value is None else value

    if not in_force("do_sample", False):
        return {**kwargs, "do_sample": False}, None
    for name, neutral in _DISTRIBUTION_ARGS.items():
        value = in_force(name, neutral)
        if value != neutral:
            where = "generate_config_dict" if name in kwargs else "the model's generation_config"
            raise ConfigError(
                f"{name}={value!r} (from {where}) changes the sampling distribution in a way training cannot score; "
                f"set {name!r}: {neutral!r} in generate_config_dict (temperature, top_k, top_p, repetition_penalty "
                "and min_new_tokens are supported)."
            )
    sampling = Sampling(
        **{name: in_force(name, default) for name, default in _TRANSFORMERS_SAMPLING_DEFAULTS.items()},
        repetition_penalty=in_force("repetition_penalty", 1.0),
        min_new_tokens=in_force("min_new_tokens", 0),
    )
    return {**kwargs, **sampling.generation_kwargs()}, sampling


def _lora_config(peft_config: Any) -> Any:
    """A ``peft.LoraConfig`` from one or from a mapping of its arguments, for a causal LM.

    Raises:
        ConfigError: When its ``task_type`` is not a causal LM's.
    """
    from peft import LoraConfig

    config = LoraConfig(**peft_config) if isinstance(peft_config, Mapping) else peft_config
    task_type = getattr(config, "task_type", None)
    if task_type is not None and str(getattr(task_type, "value", task_type)) != "CAUSAL_LM":
        raise ConfigError(
            f"peft_config.task_type={task_type!r}, but LlamaGym agents are causal LMs; set task_type='CAUSAL_LM'."
        )
    return config


def _load_8bit(name: str, revision: Optional[str], trust_remote_code: bool) -> Any:
    """Load a causal LM in 8 bit on GPU 0 (bitsandbytes).

    Raises:
        ConfigError: Without a CUDA GPU.
        MissingDependencyError: Without bitsandbytes.
    """
    if not torch.cuda.is_available():
        raise ConfigError(
            "load_in_8bit=True needs a CUDA GPU (bitsandbytes 8-bit kernels) and none is available; set "
            "load_in_8bit=False (LoRA trains in full precision on CPU)."
        )
    require("bitsandbytes", "quantization", "load_in_8bit")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from llmgym.llm.models import resolve_model

    source = resolve_model(ModelConfig(name=name, revision=revision))
    extra = {"revision": revision} if revision is not None else {}
    return AutoModelForCausalLM.from_pretrained(
        source.location,
        quantization_config=BitsAndBytesConfig(load_in_8bit=True),
        device_map={"": 0},
        trust_remote_code=trust_remote_code,
        **extra,
    )


def _is_quantized(model: Any) -> bool:
    """Whether bitsandbytes holds the model's weights (they stay on their GPU)."""
    return bool(getattr(model, "is_loaded_in_8bit", False) or getattr(model, "is_loaded_in_4bit", False))


class AutoModelForCausalLMWithValueHead:
    """TRL's model class as LlamaGym builds it: a causal LM, with LoRA adapters when asked.

    The value head is added by :class:`Agent` (llmgym's :class:`~llmgym.llm.modules.ValueHead`).

    Args:
        pretrained_model: The transformers causal LM (a ``peft.PeftModel`` with adapters).

    Attributes:
        pretrained_model: The transformers model, as TRL names it.
    """

    def __init__(self, pretrained_model: Any) -> None:
        self.pretrained_model = pretrained_model

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: Any,
        *,
        peft_config: Any = None,
        load_in_8bit: bool = False,
        load_in_4bit: bool = False,
        token: Optional[str] = None,
        **kwargs: Any,
    ) -> AutoModelForCausalLMWithValueHead:
        """Load a causal LM (on CPU unless quantized) and add LoRA adapters, as TRL does.

        Args:
            pretrained_model_name_or_path: A model name, hub id or folder (anything
                ``llmgym.LLM`` loads), or a transformers causal LM.
            peft_config: A ``peft.LoraConfig`` (or a mapping of its arguments).
            load_in_8bit: Load the weights in 8 bit (bitsandbytes, CUDA only).
            load_in_4bit: Load the weights in 4 bit (bitsandbytes, CUDA only).
            token: Hub token; the hub reads it from ``HF_TOKEN``, so only that value is accepted.
            **kwargs: ``dtype`` (or ``torch_dtype``), ``revision``, ``trust_remote_code``.

        Raises:
            ConfigError: On quantization without CUDA, a token that is not ``HF_TOKEN``'s, an
                unsupported keyword argument or a non-causal LoRA task type.
        """
        unsupported = sorted(set(kwargs) - {"dtype", "torch_dtype", "revision", "trust_remote_code"})
        if unsupported:
            raise ConfigError(
                f"AutoModelForCausalLMWithValueHead.from_pretrained got unsupported arguments {unsupported}; "
                "supported: peft_config, load_in_8bit, load_in_4bit, token, dtype, revision, trust_remote_code."
            )
        if token is not None and token != os.environ.get("HF_TOKEN"):
            raise ConfigError(
                "token= differs from $HF_TOKEN, which the hub reads; export HF_TOKEN=<token> instead."
            )
        if load_in_8bit and load_in_4bit:
            raise ConfigError("load_in_8bit and load_in_4bit are both set; choose one.")
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype", "float32"))
        revision = kwargs.get("revision")
        trust = bool(kwargs.get("trust_remote_code", False))
        if isinstance(pretrained_model_name_or_path, torch.nn.Module):
            model = pretrained_model_name_or_path
        elif load_in_8bit:
            model = _load_8bit(str(pretrained_model_name_or_path), revision, trust)
        else:
            from llmgym.llm.models import load_model

            config = ModelConfig(
                name=str(pretrained_model_name_or_path),
                model_type="causal",
                device="cpu",
                revision=revision,
                dtype=str(dtype).removeprefix("torch."),
                trust_remote_code=trust,
                load_in_4bit=load_in_4bit,
            )
            model, _ = load_model(config)
        if peft_config is not None:
            from peft import get_peft_model, prepare_model_for_kbit_training

            if _is_quantized(model):
                model = prepare_model_for_kbit_training(model)
            model = get_peft_model(model, _lora_config(peft_config))
        return cls(model)

    def to(self, device: Any) -> AutoModelForCausalLMWithValueHead:
        """Move the model to ``device`` (quantized weights stay on their GPU); returns ``self``."""
        from llmgym.llm.models import resolve_device

        if not _is_quantized(self.pretrained_model):
            self.pretrained_model.to(resolve_device(str(device)))
        return self

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """``pretrained_model.generate``."""
        return self.pretrained_model.generate(*args, **kwargs)


def _transformers_model(model: Any, tokenizer: Any, device: Any) -> tuple[Any, Any]:
    """The transformers model and tokenizer behind LlamaGym's ``model`` and ``tokenizer`` arguments.

    Raises:
        ConfigError: On a model that is not a causal LM or a tokenizer without a chat template.
    """
    from llmgym.llm.models import resolve_device

    if isinstance(model, (str, os.PathLike)):
        model = AutoModelForCausalLMWithValueHead.from_pretrained(model).pretrained_model
    elif hasattr(model, "pretrained_model"):  # this module's or TRL's wrapper: llmgym adds its own value head
        model = model.pretrained_model
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "generate"):
        raise ConfigError(
            f"model={type(model).__name__} is not a language model; pass a transformers causal LM, "
            "AutoModelForCausalLMWithValueHead.from_pretrained(...) or a model name."
        )
    if getattr(model.config, "is_encoder_decoder", False):
        raise ConfigError(
            "model is an encoder-decoder; LlamaGym agents chat with a causal (decoder-only) LM."
        )
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(
            f"tokenizer={type(tokenizer).__name__} has no chat template, which LlamaGym renders the conversation "
            "with; use an instruct/chat model's tokenizer or set tokenizer.chat_template."
        )
    if not _is_quantized(model):
        model.to(resolve_device(str(device)))
    return model, tokenizer


class Agent(abc.ABC):
    """LlamaGym's ``Agent``: subclass it with three hooks, then ``act``, ``assign_reward``, ``terminate_episode``.

    Args:
        model: The LLM (see the module docstring for what is accepted).
        tokenizer: Its tokenizer (or a name to load it from), with a chat template.
        device: Where the model runs (``"cpu"``, ``"cuda:0"``...).
        generate_config_dict: Generation arguments (LlamaGym's default: 32 new tokens, sampling at
            temperature 0.9, top_p 0.6, no top-k).
        ppo_config_dict: TRL ``PPOConfig`` arguments (LlamaGym's default: batch and minibatch of 16
            turns); see :class:`PPOConfig`.

    Attributes:
        model: The ``model`` argument (a loaded model when it was a name).
        tokenizer: The tokenizer.
        device: The ``device`` argument.
        generate_config_dict: The generation arguments as given.
        ppo_config: The :class:`PPOConfig`.
        policy: The :class:`llmgym.LLM` that generates and trains (llmgym's native API).
        sampling: The distribution responses are sampled from (``None`` when decoding greedily).
        current_batch: ``{"queries", "responses", "rewards"}``: prompt and response token ids
            (1-D tensors) and float16 rewards of the turns waiting for an update.
        current_episode_messages: The chat of the current episode, system prompt first.
        current_episode_rewards: Rewards given by :meth:`assign_reward` in the current episode.

    Raises:
        ConfigError: On an unusable model, tokenizer or config dict.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: Any,
        generate_config_dict: Optional[Mapping[str, Any]] = None,
        ppo_config_dict: Optional[Mapping[str, Any]] = None,
    ) -> None:
        from llmgym.algorithms.ppo import PPO
        from llmgym.llm.adapters import is_peft_model
        from llmgym.llm.client import LLM
        from llmgym.llm.modules import ValueHead

        if generate_config_dict is None:
            generate_config_dict = dict(DEFAULT_GENERATE_CONFIG)
        if ppo_config_dict is None:
            ppo_config_dict = dict(DEFAULT_PPO_CONFIG)
        hf_model, tokenizer = _transformers_model(model, tokenizer, device)
        self.model = hf_model if isinstance(model, (str, os.PathLike)) else model
        self.tokenizer = tokenizer
        self.device = device
        self.generate_config_dict = generate_config_dict
        self.ppo_config = PPOConfig.from_dict(ppo_config_dict)
        self._generation_kwargs, self.sampling = generation_settings(
            generate_config_dict, hf_model.generation_config
        )
        self._ppo = PPO(config=self.ppo_config.algorithm(), seed=self.ppo_config.seed)
        name = str(getattr(hf_model.config, "name_or_path", "") or type(hf_model).__name__)
        self.policy = LLM(
            # the KL reference: the adapter disabled, or TRL's create_reference_model (a frozen copy)
            ModelConfig(
                name=name, reference_copy=self.ppo_config.init_kl_coef > 0 and not is_peft_model(hf_model)
            ),
            {VALUE_KEY: ValueHead(hidden_sizes=())},
            self._ppo.updater(),
            model=hf_model,
            tokenizer=tokenizer,
        )
        self._last_ids: tuple[list[int], list[int]] = ([], [])
        self._episode_ids: list[tuple[list[int], list[int]]] = []
        self.current_batch: dict[str, list[Tensor]] = {"queries": [], "responses": [], "rewards": []}
        self.current_episode_messages: list[dict[str, str]] = [
            {"role": "system", "content": self.get_system_prompt()}
        ]
        self.current_episode_rewards: list[float] = []

    @abc.abstractmethod
    def get_system_prompt(self) -> str:
        """The system prompt of every episode."""

    @abc.abstractmethod
    def format_observation(self, observation: Any) -> str:
        """The user message for an observation."""

    @abc.abstractmethod
    def extract_action(self, response: str) -> Any:
        """The env action of the model's reply."""

    def llm(self, messages: list[dict[str, str]]) -> str:
        """The model's reply to a chat (rendered with the tokenizer's chat template)."""
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        generation = self.policy.generate([prompt], **self._generation_kwargs)[0][0]
        self._last_ids = (list(generation.prompt_ids), list(generation.token_ids))
        return generation.text.strip()

    def act(self, observation: Any) -> Any:
        """Reply to the observation and return the action; ``None`` when ``extract_action`` raises.

        As in LlamaGym, an unparsable reply is not added to the chat (nor trained on); a warning
        names the exception.
        """
        message = self.format_observation(observation)
        self.current_episode_messages += [{"role": "user", "content": message}]
        response = self.llm(self.current_episode_messages)
        try:
            action = self.extract_action(response)
        except Exception as exc:  # LlamaGym's contract: any parsing failure gives the action None
            warnings.warn(f"extract_action({response!r}) raised {exc!r}; act() returns None.", stacklevel=2)
            return None
        self.current_episode_messages += [{"role": "assistant", "content": response}]
        self._episode_ids.append(self._last_ids)
        return action

    def assign_reward(self, reward: float) -> None:
        """Record the reward of the last step.

        Raises:
            InputError: If the reward is not a real number, is not finite, or is too large for the
                float16 :attr:`current_batch` LlamaGym keeps rewards in (``|reward| > 65504``).
        """
        step = len(self.current_episode_rewards) + 1
        value = check_reward(
            reward,
            source=f"{type(self).__name__}.assign_reward",
            step=f"reward {step} of the episode",
            clip_setting=None,
        )
        if abs(value) > _FLOAT16_MAX:
            raise InputError(
                f"reward={value!r} from {type(self).__name__}.assign_reward at reward {step} of the episode is more than "
                f"{_FLOAT16_MAX:g} in magnitude: LlamaGym keeps rewards in float16, where it becomes inf. Fix: "
                "scale the reward down."
            )
        self.current_episode_rewards.append(value)

    def format_episode_for_ppo(
        self, messages: Sequence[Mapping[str, str]], rewards: Sequence[float]
    ) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The episode's turns as ``(queries, responses, rewards)``, rewards per turn as LlamaGym gives them.

        Queries and responses are the exact token ids of each answered turn. With sparse rewards
        (all zero but the last) every turn gets ``rewards[-1] / (len(messages) / 2)``; otherwise
        turn ``i`` gets ``rewards[i]``.

        Raises:
            InputError: When dense rewards are not one per answered turn, or turns have no reward.
        """
        queries = [torch.tensor(query) for query, _ in self._episode_ids]
        responses = [torch.tensor(response) for _, response in self._episode_ids]
        if not queries:
            return [], [], []
        if not rewards:
            raise InputError(
                "the episode has answered turns but no reward; call assign_reward(reward) after each step."
            )
        if all(reward == 0 for reward in rewards[:-1]):
            per_turn_reward = rewards[-1] / (len(messages) / 2)
            return queries, responses, [torch.tensor(per_turn_reward, dtype=torch.float16)] * len(queries)
        if len(rewards) != len(queries):
            raise InputError(
                f"the episode has {len(rewards)} rewards for {len(queries)} answered turns; with rewards on several "
                "steps call assign_reward once per act() whose action was parsed."
            )
        return queries, responses, [torch.tensor(reward, dtype=torch.float16) for reward in rewards]

    def terminate_episode(self, train: bool = True) -> dict[str, Any]:
        """End the episode; once ``ppo_config.batch_size`` turns are stored, train and return the statistics."""
        if train:
            queries, responses, rewards = self.format_episode_for_ppo(
                self.current_episode_messages, self.current_episode_rewards
            )
        self.current_episode_messages = [{"role": "system", "content": self.get_system_prompt()}]
        self.current_episode_rewards = []
        self._episode_ids = []
        if train:
            self.current_batch["queries"].extend(queries)
            self.current_batch["responses"].extend(responses)
            self.current_batch["rewards"].extend(rewards)
            if len(self.current_batch["queries"]) >= self.ppo_config.batch_size:
                return self.train_batch(
                    self.current_batch["queries"],
                    self.current_batch["responses"],
                    self.current_batch["rewards"],
                )
        return {}

    def train_batch(
        self, batch_queries: list[Tensor], batch_responses: list[Tensor], batch_rewards: list[Tensor]
    ) -> dict[str, Any]:
        """Train on the first ``batch_size`` turns; the rest waits in :attr:`current_batch`."""
        size = self.ppo_config.batch_size
        if len(batch_queries) > size:
            queries, responses, rewards = batch_queries[:size], batch_responses[:size], batch_rewards[:size]
            self.current_batch = {
                "queries": batch_queries[size:],
                "responses": batch_responses[size:],
                "rewards": batch_rewards[size:],
            }
        else:
            queries, responses, rewards = batch_queries, batch_responses, batch_rewards
            self.current_batch = {"queries": [], "responses": [], "rewards": []}
        train_stats = self.step(queries, responses, rewards)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return train_stats

    def step(
        self, queries: Sequence[Tensor], responses: Sequence[Tensor], rewards: Sequence[Tensor]
    ) -> dict[str, float]:
        """One PPO update on turns given as token ids and rewards (TRL's ``PPOTrainer.step``).

        Old log-probs (under :attr:`sampling`) and values are computed with the current weights,
        as TRL does. Returns TRL's statistic names where llmgym has the statistic.

        Raises:
            InputError: On a reward that is not a finite real number (checked before any forward).
        """
        reward_values = [
            check_reward(
                reward,
                source=f"{type(self).__name__}.step",
                step=f"turn {index} of the batch",
                clip_setting=None,
            )
            for index, reward in enumerate(rewards)
        ]
        prompt_ids = [[int(t) for t in q.reshape(-1)] for q in queries]
        action_ids = [[int(t) for t in r.reshape(-1)] for r in responses]
        olds = self.policy.token_logprobs(
            prompt_ids, action_ids, keys=[VALUE_KEY], require_grad=False, sampling=self.sampling
        )
        episodes = []
        for prompt, action, old, reward in zip(prompt_ids, action_ids, olds, reward_values):
            decision = Decision(
                prompt=self.tokenizer.decode(prompt),
                prompt_ids=prompt,
                action=None,
                response=self.tokenizer.decode(action),
                log_prob=float(old["logprobs"].sum()),
                value=float(old[VALUE_KEY].reshape(-1)[0]),
                choice=TokenChoice(action, old["logprobs"].tolist()),
            )
            episodes.append(Episode([decision], [reward]))
        stats = self._ppo.train_on_episodes(self.policy, TokenPolicy(self.sampling or Sampling()), episodes)
        scores = torch.tensor(reward_values)
        named = {_TRL_STAT_NAMES.get(key, f"ppo/{key}"): value for key, value in stats.items()}
        named["ppo/std_scores"] = float(scores.std()) if len(scores) > 1 else 0.0
        return named
