"""RL4LMs' task YAML (``tokenizer``, ``reward_fn``, ``datapool``, ``env``, ``alg``, ``train_evaluation``) as an llmgym config.

RL4LMs trains on a token-level MDP: each generated token is a step, the reward comes at the end
(or on every step), ``n_steps`` and ``batch_size`` count token transitions. The conversion keeps
that: ``llmgym/TextGen-v0`` in ``mode="token"`` with the ``token`` agent, the same datapool,
reward, splits and metrics. Every RL4LMs key is mapped, or refused with a
:class:`~llmgym.errors.ConfigError` naming it. Keys llmgym honours only approximately (beam search
in evaluation, SB3's A2C RMSprop...) are refused unless ``approximate=True``, which maps them as documented and lists
each in :attr:`Conversion.approximations`. T5/BART (seq2seq) policies train as RL4LMs' do: the
prompt goes to the encoder, the generated tokens to the decoder (``model.model_type: seq2seq``;
the token agent's :class:`~llmgym.agents.generative.DecoderHistory`).

``llmgym train rl4lms_config.yml`` converts such a file strictly; ``llmgym convert CFG
[--approximate] [--model NAME]`` prints the llmgym YAML.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmgym.errors import ConfigError

__all__ = ["Conversion", "is_rl4lms_config", "convert_rl4lms_config"]

_TOP = ("tokenizer", "reward_fn", "datapool", "env", "alg", "train_evaluation")
# stable-baselines3's defaults, which RL4LMs' algorithms inherit
_SB3 = {
    "ppo": {
        "n_steps": 2048,
        "batch_size": 64,
        "n_epochs": 10,
        "learning_rate": 3e-4,
        "gae_lambda": 0.95,
        "normalize_advantage": True,
    },
    "a2c": {"n_steps": 5, "learning_rate": 7e-4, "gae_lambda": 1.0, "normalize_advantage": False},
    "trpo": {
        "n_steps": 2048,
        "batch_size": 128,
        "n_epochs": 10,
        "learning_rate": 1e-3,
        "gae_lambda": 0.95,
        "normalize_advantage": True,
    },
}
_SB3["nlpo"] = _SB3["ppo"]
_CAUSAL_POLICIES = {"causal_lm_actor_critic_policy", "maskable_causal_lm_actor_critic_policy"}
_SEQ2SEQ_POLICIES = {"seq2seq_lm_actor_critic_policy", "maskable_seq2seq_lm_actor_critic_policy"}


@dataclass
class Conversion:
    """An RL4LMs config converted.

    Attributes:
        config: The llmgym config as nested plain dicts (what a YAML file holds).
        approximations: One line per RL4LMs key mapped approximately (only with ``approximate=True``).
    """

    config: dict[str, Any]
    approximations: list[str] = field(default_factory=list)


def is_rl4lms_config(mapping: Mapping[str, Any]) -> bool:
    """Whether a loaded YAML mapping is an RL4LMs task config (its ``alg`` and ``reward_fn``/``datapool`` sections)."""
    keys = set(mapping)
    return "alg" in keys and bool(keys & {"reward_fn", "datapool"}) and keys <= set(_TOP)


# The RL4LMs values the conversion computes with, by kind; null stands for the default only in _NULLABLE.
_INT, _FLOAT, _BOOL = "an integer", "a finite number", "true or false"
_ABSENT = object()
_NULLABLE = {
    "alg.args.seed",
    "alg.args.max_grad_norm",
    "alg.args.clip_range_vf",
    "alg.args.target_kl",
    "alg.kl_div.target_kl",
    "alg.policy.args.generation_kwargs.top_k",
    "alg.policy.args.generation_kwargs.max_new_tokens",
    "alg.policy.args.generation_kwargs.min_length",
    "alg.policy.args.generation_kwargs.min_new_tokens",
    "train_evaluation.generation_kwargs.min_length",
    "train_evaluation.generation_kwargs.min_new_tokens",
    "train_evaluation.generation_kwargs.top_k",
    "train_evaluation.eval_every",
    "train_evaluation.save_every",
    "train_evaluation.eval_batch_size",
    "env.args.terminate_on_eos",
    "alg.args.normalize_advantage",
    "alg.args.use_rms_prop",
}
_TYPED_VALUES: dict[str, str] = {
    "env.n_envs": _INT,
    "env.args.max_episode_length": _INT,
    "env.args.max_prompt_length": _INT,
    "env.args.terminate_on_eos": _BOOL,
    **{f"alg.args.{key}": _INT for key in ("n_steps", "batch_size", "n_epochs", "seed")},
    **{
        f"alg.args.{key}": _FLOAT
        for key in (
            "learning_rate",
            "gamma",
            "gae_lambda",
            "ent_coef",
            "vf_coef",
            "max_grad_norm",
            "clip_range",
            "clip_range_vf",
            "target_kl",
        )
    },
    "alg.args.normalize_advantage": _BOOL,
    "alg.args.use_rms_prop": _BOOL,
    "alg.kl_div.coeff": _FLOAT,
    "alg.kl_div.target_kl": _FLOAT,
    "alg.policy.args.top_mask": _FLOAT,
    "alg.policy.args.target_update_iterations": _INT,
    "alg.policy.args.generation_kwargs.top_k": _INT,
    "alg.policy.args.generation_kwargs.temperature": _FLOAT,
    "alg.policy.args.generation_kwargs.max_new_tokens": _INT,
    "alg.policy.args.generation_kwargs.min_length": _INT,
    "alg.policy.args.generation_kwargs.min_new_tokens": _INT,
    "train_evaluation.generation_kwargs.min_length": _INT,
    "train_evaluation.generation_kwargs.min_new_tokens": _INT,
    "train_evaluation.n_iters": _INT,
    "train_evaluation.eval_every": _INT,
    "train_evaluation.save_every": _INT,
    "train_evaluation.eval_batch_size": _INT,
    "train_evaluation.generation_kwargs.num_beams": _INT,
    "train_evaluation.generation_kwargs.do_sample": _BOOL,
    "train_evaluation.generation_kwargs.top_k": _INT,
    "train_evaluation.generation_kwargs.temperature": _FLOAT,
    "train_evaluation.generation_kwargs.top_p": _FLOAT,
}


def _check_values(mapping: Mapping[str, Any]) -> None:
    """Refuse, by key, an RL4LMs value of the wrong kind before the conversion computes with it.

    Numbers may be written as strings (PyYAML reads ``1e-5`` as one), as RL4LMs takes them.

    Raises:
        ConfigError: Naming the key, the value and what was expected.
    """

    def bad(key: str, value: Any, expected: str) -> ConfigError:
        return ConfigError(
            f"RL4LMs config: {key}={value!r:.100} is invalid; expected {expected}. Fix: set {key} to {expected}."
        )

    for key, expected in _TYPED_VALUES.items():
        node: Any = mapping
        for part in key.split("."):  # a section that is not a mapping is refused by name when it is read
            node = node.get(part, _ABSENT) if isinstance(node, Mapping) else _ABSENT
        if node is None and key not in _NULLABLE:
            raise bad(key, node, f"{expected} (or no {key} at all, for RL4LMs' default)")
        if node is None or node is _ABSENT:
            continue
        if expected == _BOOL:
            if not isinstance(node, bool):
                raise bad(key, node, expected)
            continue
        try:
            number = float(node)
        except (TypeError, ValueError):
            raise bad(key, node, expected) from None
        if (
            isinstance(node, bool)
            or not math.isfinite(number)
            or (expected == _INT and not number.is_integer())
        ):
            raise bad(key, node, expected)
    for section in ("reward_fn", "datapool"):
        content = mapping.get(section)
        args = content.get("args") if isinstance(content, Mapping) else None
        if args is not None and not isinstance(args, Mapping):
            raise bad(f"{section}.args", args, "a mapping of keyword arguments")
    evaluation = mapping.get("train_evaluation")
    metrics = evaluation.get("metrics") if isinstance(evaluation, Mapping) else None
    if metrics is None:
        return
    item = "a list of {id: METRIC, args: {...}} mappings"
    if not isinstance(metrics, list):
        raise bad("train_evaluation.metrics", metrics, item)
    for i, metric in enumerate(metrics):
        if (
            not isinstance(metric, Mapping)
            or not isinstance(metric.get("id"), str)
            or not isinstance(metric.get("args") or {}, Mapping)
        ):
            raise bad(f"train_evaluation.metrics[{i}]", metric, "a mapping {id: METRIC, args: {...}}")


class _Reader:
    """Takes the keys of one RL4LMs section; what is left unread at the end is refused by name."""

    def __init__(self, section: Mapping[str, Any] | None, path: str) -> None:
        if section is not None and not isinstance(section, Mapping):
            raise ConfigError(f"RL4LMs config: {path} must be a mapping; got {section!r:.100}.")
        self.data = dict(section or {})
        self.path = path

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.pop(key, default)

    def sub(self, key: str) -> _Reader:
        return _Reader(self.data.pop(key, None), f"{self.path}.{key}")

    def done(self) -> None:
        if self.data:
            raise ConfigError(
                f"RL4LMs config: {', '.join(f'{self.path}.{k}' for k in self.data)} has no llmgym equivalent; "
                "remove it (docs/textgen.md lists the mapped keys)."
            )


def _eos_and_special_tokens(model_name: str) -> tuple[str, list[str]]:
    """The EOS token of the model's tokenizer, and its other special tokens (RL4LMs' decoding skips them)."""
    from llmgym.config import ModelConfig
    from llmgym.llm.models import load_tokenizer

    try:  # found where llmgym train looks: a folder, a GGUF, the default model's alias, the hub
        tokenizer = load_tokenizer(ModelConfig(name=model_name))
    except Exception as exc:  # offline, unknown name...
        raise ConfigError(
            f"RL4LMs config: env.args.terminate_on_eos needs the EOS token of tokenizer {model_name!r}, which could not "
            f"be loaded ({type(exc).__name__}). Fix: pass the model you train (llmgym train CFG model.name=NAME, or "
            "llmgym convert CFG --model NAME)."
        ) from exc
    if tokenizer.eos_token is None:
        raise ConfigError(
            f"RL4LMs config: tokenizer {model_name!r} has no eos_token; set env.args.terminate_on_eos: false."
        )
    eos = str(tokenizer.eos_token)
    special = [str(t) for t in getattr(tokenizer, "all_special_tokens", []) if t and str(t) != eos]
    return eos, special


#: The top-k that transformers' ``generate`` samples with when ``top_k`` is not given: the model config's
#: ``top_k``, 50 by default (``PretrainedConfig`` in RL4LMs' pinned transformers 4.x, ``GenerationConfig`` now).
HF_DEFAULT_TOP_K = 50


def _top_k(value: Any) -> int:
    """RL4LMs' sampling ``top_k``: as given (0: no cut), or transformers' default of 50 when absent."""
    return HF_DEFAULT_TOP_K if value is None else int(value)


def _min_new_tokens(min_length: Any, min_new_tokens: Any, seq2seq: bool) -> int:
    """``agent.min_new_tokens`` for RL4LMs' ``generation_kwargs.min_length`` and ``min_new_tokens``.

    RL4LMs bans EOS while ``generate``'s sequence is shorter than ``min_length``: for a causal policy it
    adds the (padded) prompt length first, so ``min_length`` counts new tokens; for a seq2seq policy it
    is the decoder's length, which starts with the decoder start token, so EOS is banned for the first
    ``min_length - 1`` generated tokens. ``min_new_tokens`` counts new tokens either way; with both,
    the longer ban holds (``generate`` applies both processors).
    """
    from_length = int(min_length or 0)
    if seq2seq:
        from_length = max(0, from_length - 1)
    return max(from_length, int(min_new_tokens or 0))


def _override(key: str, value: Any) -> str:
    """A shell-quoted ``key=value`` override whose value a config override reads back unchanged.

    A string value is written double-quoted (so ``"generate a sentence with: "`` stays a string with its
    trailing space, and ``" "`` stays a space); the whole argument is quoted for the shell.
    """
    import json
    import shlex

    text = json.dumps(value) if isinstance(value, str) else str(value)
    return shlex.quote(f"{key}={text}")


#: ``alg.training_args`` of RL4LMs' supervised configs that change nothing in what is trained.
_SFT_BOOKKEEPING = ("logging_steps", "save_total_limit", "output_dir")


def _supervised_refusal(mapping: Mapping[str, Any]) -> str:
    """What to run instead of an ``alg.id: supervised`` config: ``llmgym sft`` on its own datapool and settings."""
    pool = mapping.get("datapool") or {}
    training = dict((mapping.get("alg") or {}).get("training_args") or {})
    overrides = [_override("env.kwargs.datapool", pool.get("id"))] + [
        _override(f"env.kwargs.datapool_kwargs.{key}", value)
        for key, value in (pool.get("args") or {}).items()
    ]
    options = [f"--learning-rate {training.pop('learning_rate')}"] if "learning_rate" in training else []
    if "per_device_train_batch_size" in training:
        options.append(f"--batch-size {training.pop('per_device_train_batch_size')}")
    epochs = training.pop("num_train_epochs", None)
    if training.get("lr_scheduler_type") == "constant":
        training.pop("lr_scheduler_type")
    for key in _SFT_BOOKKEEPING:
        training.pop(key, None)
    unapplied = ", ".join(f"alg.training_args.{key}={value!r}" for key, value in training.items())
    return (
        "RL4LMs config: alg.id='supervised' is supervised fine-tuning, which llmgym runs with llmgym sft (the "
        "datapool's references as the completion, the loss on them only; a T5 or BART model trains as an "
        "encoder-decoder), not llmgym train. Fix: convert an RL config of the same task (e.g. the ppo config "
        "next to this one: llmgym convert CFG --approximate --output task.yaml), then run llmgym sft task.yaml "
        + " ".join(overrides + options)
        + " --out FOLDER --steps N (RL4LMs counts epochs"
        + (f", {epochs} here" if epochs is not None else "")
        + ": N = epochs x examples / batch size), and train RL from it with model.name=FOLDER (docs/trl.md). "
        "llmgym sft trains with a constant learning rate and no weight decay, and does not evaluate (evaluate "
        "the folder with llmgym eval)" + (f"; not applied: {unapplied}" if unapplied else "") + "."
    )


def convert_rl4lms_config(
    mapping: Mapping[str, Any], *, approximate: bool = False, model_name: str | None = None
) -> Conversion:
    """Convert an RL4LMs task config into an llmgym config.

    Args:
        mapping: The RL4LMs YAML, loaded.
        approximate: Map the keys llmgym honours only approximately (listed in the result) instead
            of refusing them.
        model_name: The model to train instead of the config's (tests, offline use); its tokenizer
            gives the EOS token.

    Returns:
        The llmgym config and the approximations made.

    Raises:
        ConfigError: Naming the first RL4LMs key that is unknown or unsupported (supervised
            training), a value of the wrong kind (``n_steps: abc``, ``metrics: meteor``), or every key mapped
            approximately when ``approximate`` is false.
    """
    _check_values(mapping)
    approx: list[str] = []

    def approximately(key: str, how: str) -> None:
        approx.append(f"{key}: {how}")

    root = _Reader(mapping, "config")
    tok, reward, pool, env, alg, ev = (root.sub(k) for k in _TOP)
    root.done()

    policy = alg.sub("policy")
    policy_id = policy.get("id", "causal_lm_actor_critic_policy")
    if policy_id not in _CAUSAL_POLICIES | _SEQ2SEQ_POLICIES:
        raise ConfigError(
            f"RL4LMs config: alg.policy.id={policy_id!r} is unknown; expected one of "
            f"{sorted(_CAUSAL_POLICIES | _SEQ2SEQ_POLICIES)}."
        )
    seq2seq = policy_id in _SEQ2SEQ_POLICIES
    algo = alg.get("id")
    if algo == "supervised":
        raise ConfigError(_supervised_refusal(mapping))
    if algo not in _SB3:
        raise ConfigError(f"RL4LMs config: alg.id={algo!r} is not supported; expected one of {sorted(_SB3)}.")
    pargs = policy.sub("args")
    model = model_name or pargs.get("model_name") or tok.get("model_name")
    tok_model = tok.get("model_name", model)
    if model_name is None and tok_model != model:
        raise ConfigError(
            f"RL4LMs config: tokenizer.model_name={tok_model!r} differs from alg.policy.args.model_name={model!r} "
            "(an *_on_supervised config: RL from a supervised checkpoint of that base model); llmgym uses the "
            "model's own tokenizer. Fix: name the checkpoint you start from, whose folder holds its tokenizer "
            "(llmgym train CFG model.name=FOLDER, or llmgym convert CFG --model FOLDER); to make one, run llmgym sft "
            "on the task (docs/textgen.md, Running an RL4LMs config)."
        )
    if tok.get("padding_side", "left") != "left":
        approximately("tokenizer.padding_side", "llmgym always pads prompts on the left")
    # RL4LMs' env and policy set the tokenizer's truncation side to prompt_truncation_side for every prompt
    # they encode, and truncate nothing else in RL: tokenizer.truncation_side changes nothing there
    tok.get("truncation_side")
    tok.get("pad_token_as_eos_token")  # llmgym sets pad = eos when the tokenizer has no pad token
    tok.done()

    env_args = env.sub("args")
    episode_length = int(env_args.get("max_episode_length", 100))
    prompt_length = int(env_args.get("max_prompt_length", 512))
    terminate_on_eos = bool(env_args.get("terminate_on_eos", False))
    truncation_side = str(env_args.get("prompt_truncation_side", "left"))  # the rollouts' prompts
    start = env_args.get(
        "context_start_token"
    )  # the decoder start of seq2seq policies; causal ones ignore it in RL4LMs too
    if seq2seq and start not in (None, 0):
        approximately(
            "env.args.context_start_token",
            "llmgym starts the decoder at the model's decoder_start_token_id (T5's is 0)",
        )
    env_args.done()
    n_envs = int(env.get("n_envs", 1))
    env.done()

    env_kwargs: dict[str, Any] = {
        "datapool": pool.get("id"),
        "datapool_kwargs": {**dict(pool.get("args") or {}), "split": "train"},
        "reward": reward.get("id"),
        "reward_kwargs": dict(reward.get("args") or {}),
        "mode": "token",
        "max_tokens": episode_length,
    }
    pool.done()
    reward.done()
    if terminate_on_eos:
        env_kwargs["eos_token"], env_kwargs["special_tokens"] = _eos_and_special_tokens(str(model))

    gen = pargs.sub("generation_kwargs")
    if gen.get("do_sample", True) is not True:
        approximately("alg.policy.args.generation_kwargs.do_sample", "llmgym always samples rollouts")
    # EOS banned before that many of the episode's tokens: the token agent's agent.min_new_tokens, exactly
    min_new_tokens = _min_new_tokens(gen.get("min_length"), gen.get("min_new_tokens"), seq2seq)
    top_k = _top_k(gen.get("top_k"))  # agent.top_k: rollouts and their re-scoring cut to the top k tokens
    temperature = float(gen.get("temperature", 1.0))
    max_new = gen.get("max_new_tokens")
    if max_new is not None and int(max_new) != episode_length:
        approximately(
            "alg.policy.args.generation_kwargs.max_new_tokens",
            f"episodes end after env.args.max_episode_length={episode_length} tokens",
        )
    if int(gen.get("num_beams", 1)) != 1:  # 1 in the BART and Blenderbot configs: sampling, no beams
        approximately("alg.policy.args.generation_kwargs.num_beams", "llmgym samples rollouts, without beams")
    gen.done()
    pargs.get("model_name")
    pargs.get("apply_model_parallel")  # llmgym places the model itself (model.device)
    # RL4LMs' env cuts the rollouts' prompts on env.args.prompt_truncation_side, its policy the evaluation's on
    # alg.policy.args.prompt_truncation_side; llmgym's seq2seq token agent cuts both on agent.prompt_truncation_side
    if str(pargs.get("prompt_truncation_side", "left")) != truncation_side:
        approximately(
            "alg.policy.args.prompt_truncation_side",
            f"evaluation prompts are cut as the rollouts' are, on the {truncation_side} (env.args.prompt_truncation_side)",
        )
    if truncation_side == "right" and not seq2seq:
        approximately(
            "env.args.prompt_truncation_side",
            "llmgym's causal token agent truncates prompts on the left (its prompt grows with what it generates)",
        )

    defaults = _SB3[algo]
    args = alg.sub("args")
    n_steps = int(args.get("n_steps", defaults["n_steps"]))
    algorithm: dict[str, Any] = {
        "name": algo,
        "rollout_steps": n_steps,
        "learning_rate": float(args.get("learning_rate", defaults["learning_rate"])),
        "gamma": float(args.get("gamma", 0.99)),
        "gae_lambda": float(args.get("gae_lambda", defaults["gae_lambda"])),
        "entropy_coef": float(args.get("ent_coef", 0.0)),
        "value_coef": float(args.get("vf_coef", 0.5)),
        "max_grad_norm": args.get("max_grad_norm", 0.5),
        "normalize_advantages": bool(args.get("normalize_advantage", defaults["normalize_advantage"])),
        # RL4LMs' critic is a second copy of the model whose value loss never reaches the policy: llmgym's
        # critic reads the policy's hidden states, detached so that its loss does not train the policy either
        "value_head": "detached",
    }
    if algo == "a2c":
        algorithm["minibatch_size"] = n_steps * n_envs
        if args.get("use_rms_prop", True):
            approximately("alg.args.use_rms_prop", "llmgym's A2C uses Adam (SB3's A2C defaults to RMSprop)")
    else:
        algorithm["minibatch_size"] = int(args.get("batch_size", defaults["batch_size"]))
        algorithm["epochs"] = int(args.get("n_epochs", defaults["n_epochs"]))
    if algo in ("ppo", "nlpo"):
        algorithm["ppo"] = {
            "clip_range": float(args.get("clip_range", 0.2)),
            "value_clip_range": args.get("clip_range_vf"),
            "target_kl": args.get("target_kl"),
        }
    args.get("verbose")  # llmgym logs every update (logging.progress)
    seed = args.get("seed")
    args.done()

    kl = alg.sub("kl_div")
    # RL4LMs adds -coeff * (log pi - log pi_ref) of each token to its reward; with target_kl its
    # controller multiplies coeff by 1 + 0.1 * clip(KL / target_kl - 1, -0.2, 0.2) once per rollout
    # of n_steps * n_envs tokens, KL per token: llmgym's adaptive controller with horizon 10 x that.
    algorithm["kl"] = {
        "coef": float(kl.get("coeff", 0.0)),
        "penalty": "reward",
        "estimator": "k1",
        "unit": "token",
    }
    target_kl = kl.get("target_kl")
    if target_kl is not None:
        algorithm["kl"].update(controller="adaptive", target=float(target_kl), horizon=10 * n_steps * n_envs)
    kl.done()
    # RL4LMs trains every weight against a frozen reference model: llmgym's frozen copy of the initial weights
    reference_copy = algorithm["kl"]["coef"] > 0
    if algo == "nlpo":
        algorithm["nlpo"] = {
            "mask_top_p": float(pargs.get("top_mask", 1.0)),
            "mask_update_interval": int(pargs.get("target_update_iterations", 20)),
        }
        if pargs.get("mask_type", "learned_top_p") != "learned_top_p":
            raise ConfigError(
                "RL4LMs config: alg.policy.args.mask_type must be 'learned_top_p' (llmgym's NLPO mask)."
            )
        # RL4LMs' maskable policies keep at least min_tokens_to_keep tokens (default 100)
        algorithm["nlpo"]["min_tokens_to_keep"] = int(pargs.get("min_tokens_to_keep", 100))
        # RL4LMs' maskable policies pass their mask's logits processor to every generate, evaluation included
        algorithm["nlpo"]["evaluate_masked"] = True
    pargs.done()
    policy.done()
    alg.done()

    per_iter = n_steps * n_envs
    n_iters = int(ev.get("n_iters", 1))
    eval_every = ev.get("eval_every")
    save_every = ev.get("save_every")
    metrics = [{"id": m["id"], "args": dict(m.get("args") or {})} for m in ev.get("metrics") or []]
    eval_width = ev.get("eval_batch_size")
    # RL4LMs' policy.generate(gen_kwargs=None) falls back to the rollouts' generation_kwargs: without its own,
    # the evaluation samples as the rollouts do (train.eval_split_decoding: sample, exactly)
    own_eval_kwargs = ev.data.get("generation_kwargs") is not None
    egen = ev.sub("generation_kwargs")
    eval_sampled = egen.get("do_sample", False) is True if own_eval_kwargs else True
    beams = int(egen.get("num_beams", 1))
    if beams != 1:
        approximately(
            "train_evaluation.generation_kwargs.num_beams",
            f"llmgym evaluates splits {'sampled' if eval_sampled else 'greedily'}, without beam search",
        )
    if egen.get("length_penalty") is not None:  # IWSLT: it acts only on beam search's scores
        approximately(
            "train_evaluation.generation_kwargs.length_penalty",
            "a beam-search score weight; llmgym's evaluation has no beams to weigh",
        )
    max_eval = egen.get("max_new_tokens")
    if max_eval is not None and int(max_eval) != episode_length:
        approximately(
            "train_evaluation.generation_kwargs.max_new_tokens",
            f"evaluation episodes end after env.args.max_episode_length={episode_length} tokens",
        )
    eval_min = (
        _min_new_tokens(egen.get("min_length"), egen.get("min_new_tokens"), seq2seq)
        if own_eval_kwargs
        else min_new_tokens
    )
    if eval_min != min_new_tokens:
        approximately(
            "train_evaluation.generation_kwargs.min_length",
            f"evaluation bans EOS before the rollouts' agent.min_new_tokens={min_new_tokens} tokens, not {eval_min}",
        )
    # sampled, the splits are drawn with the rollouts' agent settings; an absent key reads as the rollouts' mapping
    # reads it (temperature 1, top-k 50, no top-p cut); greedy decoding and beam search ignore these keys
    eval_temperature = float(egen.get("temperature", 1.0)) if own_eval_kwargs else temperature
    eval_top_k = _top_k(egen.get("top_k")) if own_eval_kwargs else top_k
    eval_top_p = float(egen.get("top_p", 1.0)) if own_eval_kwargs else 1.0
    if eval_sampled:
        for key, value, rollout in (
            ("temperature", eval_temperature, temperature),
            ("top_k", eval_top_k, top_k),
            ("top_p", eval_top_p, 1.0),
        ):
            if value != rollout:
                approximately(
                    f"train_evaluation.generation_kwargs.{key}",
                    f"llmgym samples the splits as the rollouts do, with {key}={rollout}, not {value}",
                )
    egen.done()
    ev.done()

    train: dict[str, Any] = {
        "total_env_steps": max(1, n_iters * per_iter),
        "eval_every": int(eval_every) * per_iter if eval_every else None,
        "checkpoint_every": int(save_every) * per_iter if save_every else None,
        "eval_splits": ["val", "test"],
        "eval_split_decoding": "sample" if eval_sampled else "greedy",
        "eval_metrics": metrics,
        "eval_episodes": n_envs,
    }
    if eval_width:
        train["eval_num_envs"] = int(eval_width)
    if seed is not None:
        train["seed"] = int(seed)
    model_section: dict[str, Any] = {"name": str(model), "lora": None, "reference_copy": reference_copy}
    if seq2seq:
        model_section["model_type"] = "seq2seq"
    config = {
        "model": model_section,
        "env": {"id": "llmgym/TextGen-v0", "num_envs": n_envs, "kwargs": env_kwargs},
        "agent": {
            "type": "token",
            "history_length": 0,
            "use_chat_template": False,
            "system_prompt": "",
            # a seq2seq decoder holds the generated tokens: the encoder gets the prompt alone
            "max_prompt_tokens": prompt_length if seq2seq else prompt_length + episode_length,
            "prompt_truncation_side": truncation_side,
            "temperature": temperature,
            "top_k": top_k,
            "min_new_tokens": min_new_tokens,
        },
        "algorithm": algorithm,
        "train": train,
    }
    warnings.warn(
        f"RL4LMs config: alg.policy.id={policy_id!r} trains a separate copy of the model as its critic; llmgym's "
        "critic is a value head on the policy's hidden states, detached (algorithm.value_head: detached) so that, "
        "as in RL4LMs, the value loss does not train the policy. Its features are the policy's, not its own.",
        UserWarning,
        stacklevel=2,
    )
    if approx and not approximate:
        raise ConfigError(
            "RL4LMs config: llmgym does not reproduce exactly "
            + "; ".join(approx)
            + ". Fix: remove these keys, or convert with approximate=True (llmgym convert CFG --approximate) to accept that."
        )
    return Conversion(config, approx)
