"""Supervised warm start: ``llmgym sft CONFIG --out FOLDER``.

A text-generation run (``llmgym/TextGen-v0``) draws prompts from a datapool whose samples may carry
reference completions. :func:`run_sft` trains the config's model on those references (LoRA through
PEFT when ``model.lora`` is set, else full fine-tuning), on the exact prompts the run's agent would
send (its own prompt rendering: system prompt, template, token ids), with the loss on the
completion tokens only, and writes a model folder (LoRA merged into the base) that an RL run starts
from with ``model.name=FOLDER``. RL4LMs starts 14 of its configs this way (``*_on_supervised``).

A causal LM trains with TRL's ``SFTTrainer`` on prompt + reference with the loss on the reference.
An encoder-decoder (T5, BART) trains with transformers' ``Seq2SeqTrainer``, as RL4LMs' supervised
seq2seq configs do: the prompt goes to the encoder, the reference + EOS are the decoder's labels.
TRL's ``SFTTrainer`` has no encoder-decoder path (it feeds one concatenated sequence and computes a
shifted causal loss), so it would let the encoder read the reference it is asked to generate.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from llmgym.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from llmgym.config import Config
    from llmgym.envs.datapools import Sample

__all__ = [
    "SFTSettings",
    "SFTExample",
    "SFTResult",
    "SFT_META",
    "fit_examples",
    "fit_seq2seq_examples",
    "sft_examples",
    "run_sft",
]

logger = logging.getLogger(__name__)

#: File written next to the weights: what was trained, on what, and the loss curve.
SFT_META = "llmgym_sft.json"


@dataclass(frozen=True)
class SFTSettings:
    """How long and how fast to fine-tune.

    Attributes:
        out: Folder the model is written to (must not exist, or be empty).
        max_steps: Optimizer steps.
        learning_rate: AdamW learning rate (constant).
        batch_size: Examples per step.
        seed: Seed of the shuffling and the LoRA initialisation; ``None`` uses ``train.seed``.
        max_length: Longest example (prompt + reference + EOS) in tokens: longer ones are cut to it
            (an example whose prompt alone fills it is dropped), with a message. ``None``: the model's
            window, and an example longer than it is a ``ConfigError``.
    """

    out: Path
    max_steps: int = 100
    learning_rate: float = 1e-4
    batch_size: int = 8
    seed: Optional[int] = None
    max_length: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "max_length"):
            value = getattr(self, name)
            if value is None and name == "max_length":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"sft {name}={value!r} is invalid; expected an int >= 1.")
        if not (isinstance(self.learning_rate, (int, float)) and math.isfinite(self.learning_rate)) or not (
            self.learning_rate > 0
        ):
            raise ConfigError(
                f"sft learning_rate={self.learning_rate!r} is invalid; expected a finite number > 0 (e.g. 1e-4)."
            )


@dataclass(frozen=True)
class SFTExample:
    """One tokenized training example: a prompt as the agent renders it, then a reference and EOS.

    Attributes:
        input_ids: Prompt ids followed by completion ids, ``[T]``.
        completion_mask: 0 on the prompt, 1 on the completion (the loss is taken there), ``[T]``.
    """

    input_ids: list[int]
    completion_mask: list[int]

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's ids (an encoder-decoder's encoder input)."""
        return self.input_ids[: len(self.input_ids) - sum(self.completion_mask)]

    @property
    def completion_ids(self) -> list[int]:
        """The reference's ids and EOS (an encoder-decoder's decoder labels)."""
        return self.input_ids[len(self.input_ids) - sum(self.completion_mask) :]


@dataclass(frozen=True)
class SFTResult:
    """What :func:`run_sft` did.

    Attributes:
        folder: The written model folder (``model.name`` of the RL run).
        losses: Training loss at every step, first to last.
        num_examples: (prompt, reference) pairs trained on.
        lora: Whether LoRA adapters were trained (and merged into the written weights).
        truncated: Examples cut to ``SFTSettings.max_length``.
        dropped: Examples left out because their prompt alone filled ``SFTSettings.max_length``.
    """

    folder: Path
    losses: list[float] = field(default_factory=list)
    num_examples: int = 0
    lora: bool = False
    truncated: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class _TokenizerOnly:
    """The part of an LLM an agent needs to render prompts (no model behind it).

    Attributes:
        tokenizer: The model's tokenizer.
        is_seq2seq: The model is an encoder-decoder (the token agent then keeps the first observation as
            the encoder prompt, cut on ``agent.prompt_truncation_side``).
    """

    tokenizer: Any
    is_seq2seq: bool = False


def _textgen_samples(config: Config) -> tuple[list[Sample], str]:
    """The run's datapool samples and the env's instructions (its default system prompt)."""
    import gymnasium as gym

    from llmgym.envs.generation import TextGenEnv
    from llmgym.envs.registration import import_env_module, register_envs

    register_envs()
    env = gym.make(import_env_module(config.env.id), **dict(config.env.kwargs))
    try:
        inner = env.unwrapped
        if not isinstance(inner, TextGenEnv):
            raise ConfigError(
                f"llmgym sft trains on a datapool's references, and env.id={config.env.id!r} is not a text-generation "
                "env; use llmgym/TextGen-v0 with env.kwargs.datapool naming a pool with references."
            )
        return list(inner.samples), inner.instructions
    finally:
        env.close()


def sft_examples(
    config: Config, tokenizer: PreTrainedTokenizerBase, *, seq2seq: bool = False
) -> list[SFTExample]:
    """Tokenize every (prompt, reference) pair of the run's datapool as the run's agent would see it.

    The prompt is rendered by the agent of ``agent.type`` (its system prompt, template and history
    settings), so its ids are those the RL run feeds the model (an encoder-decoder's encoder ids).
    For a causal model without a chat template, a reference that does not start with a space gets
    one after a prompt that does not end with one (a continuation); an encoder-decoder's reference
    is the decoder's text on its own. EOS ends each completion, so the model learns where to stop.

    Args:
        config: The run config (``env`` must be a TextGen env; ``agent``).
        tokenizer: The model's tokenizer.
        seq2seq: The model is an encoder-decoder (T5, BART).

    Returns:
        One example per reference of every sample.

    Raises:
        ConfigError: The env is not a TextGen env, the agent is a scoring agent, or no sample has a reference.
    """
    from typing import cast

    from llmgym.llm.protocols import PolicyLLM
    from llmgym.run.build import build_agent

    if config.agent.type == "scoring":
        raise ConfigError(
            "llmgym sft trains a generating policy and agent.type=scoring picks among candidates; "
            "use agent.type=generative (or token)."
        )
    samples, instructions = _textgen_samples(config)
    pairs = [(sample, ref) for sample in samples for ref in sample.references]
    if not pairs:
        raise ConfigError(
            f"the datapool {config.env.kwargs.get('datapool', 'review_openings')!r} has no references to fine-tune on; "
            "give env.kwargs.datapool a pool whose samples have references (a JSONL file with a 'references' field, "
            "or one of RL4LMs' pools)."
        )
    agent = build_agent(config, cast(PolicyLLM, _TokenizerOnly(tokenizer, seq2seq)), 1, instructions)
    history = agent.make_history()
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("the tokenizer has no EOS token; llmgym sft ends every reference with it.")
    examples = []
    for sample, reference in pairs:
        history.reset()
        history.add_observation(agent.format_observation({"text": sample.prompt}))
        prompt = history.render()
        text = reference
        continuation = not seq2seq and not history.uses_chat_template
        if continuation and not prompt.text[-1:].isspace() and not text[:1].isspace():
            text = " " + text
        completion = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [int(eos)]
        examples.append(
            SFTExample(prompt.token_ids + completion, [0] * len(prompt.token_ids) + [1] * len(completion))
        )
    return examples


def fit_examples(
    examples: list[SFTExample], window: Optional[int], max_length: Optional[int]
) -> tuple[list[SFTExample], int, int]:
    """The examples within ``max_length`` tokens (cut to it), or within the model's window.

    Args:
        examples: The tokenized examples.
        window: The model's context window (positions), ``None`` when it has none.
        max_length: ``SFTSettings.max_length``: cut longer examples to it; ``None``: refuse examples over the window.

    Returns:
        The examples to train on, how many were cut, and how many were dropped (their prompt alone
        filled ``max_length``, leaving no token to learn).

    Raises:
        ConfigError: ``max_length`` exceeds the window; without ``max_length``, an example is longer than the
            window (naming its length, the window and the fix); or no example is left.
    """
    if max_length is not None and window is not None and max_length > window:
        raise ConfigError(
            f"sft --max-length {max_length} exceeds the model's context window of {window} positions. "
            f"Fix: pass --max-length {window} or less."
        )
    if max_length is None:
        over, longest = _over(examples, window, _causal_size) if window is not None else (0, 0)
        if over:
            raise ConfigError(
                f"llmgym sft: {over} of {len(examples)} examples are longer than the model's context window of {window} "
                f"positions (the longest has {longest} tokens: prompt, reference and EOS); the model cannot be trained "
                f"on them. Fix: pass --max-length {window} to cut them to the window (or shorten the prompts with "
                "agent.max_prompt_tokens, or the references)."
            )
        return examples, 0, 0
    kept, truncated, dropped = _cut_to(examples, max_length, _causal_size, _cut_causal)
    if not kept:
        raise ConfigError(
            f"llmgym sft: every prompt fills --max-length {max_length} on its own, so no reference token is left to "
            "train on. Fix: raise --max-length, or shorten the prompts (agent.max_prompt_tokens)."
        )
    return kept, truncated, dropped


def fit_seq2seq_examples(
    examples: list[SFTExample], limit: int, source: str, max_length: Optional[int]
) -> tuple[list[SFTExample], int, int]:
    """An encoder-decoder's examples within ``max_length`` tokens on each side, or within the model's limit.

    The prompt (the encoder's input) and the reference + EOS (the decoder's labels) are two sequences,
    each bounded on its own: ``max_length`` cuts a longer reference to it and leaves out an example
    whose prompt is longer (cutting the prompt would train on an input the RL run never feeds).

    Args:
        examples: The tokenized examples (:func:`sft_examples` with ``seq2seq=True``).
        limit: The most positions the model takes on either side (:func:`~llmgym.llm.tokenization.decoder_limit`).
        source: Where ``limit`` comes from, for messages.
        max_length: ``SFTSettings.max_length``; ``None``: refuse a side longer than ``limit``.

    Returns:
        The examples to train on, how many references were cut, and how many examples were dropped.

    Raises:
        ConfigError: ``max_length`` exceeds ``limit``; without ``max_length``, a prompt or a reference is longer
            than ``limit`` (naming how many, the longest, the limit and the fix); or no example is left.
    """
    if max_length is not None and max_length > limit:
        raise ConfigError(
            f"sft --max-length {max_length} exceeds the {limit} positions the model takes ({source}). "
            f"Fix: pass --max-length {limit} or less."
        )
    if max_length is None:
        over, longest = _over(examples, limit, _seq2seq_size)
        if over:
            raise ConfigError(
                f"llmgym sft: {over} of {len(examples)} examples have a prompt (encoder) or a reference and EOS "
                f"(decoder) longer than the {limit} positions the model takes ({source}); the longest has {longest} "
                f"tokens. Fix: pass --max-length {limit} to cut the references to it and leave out longer prompts "
                "(or shorten the prompts with agent.max_prompt_tokens, or the references)."
            )
        return examples, 0, 0
    kept, truncated, dropped = _cut_to(examples, max_length, _seq2seq_size, _cut_seq2seq)
    if not kept:
        raise ConfigError(
            f"llmgym sft: every prompt is longer than --max-length {max_length}, so no example is left to train on. "
            "Fix: raise --max-length, or shorten the prompts (agent.max_prompt_tokens)."
        )
    return kept, truncated, dropped


def _causal_size(example: SFTExample) -> int:
    """The positions a causal LM's example fills: prompt, reference and EOS."""
    return len(example.input_ids)


def _seq2seq_size(example: SFTExample) -> int:
    """The positions an encoder-decoder's example fills on its longer side (the prompt, or the reference + EOS)."""
    return max(len(example.prompt_ids), len(example.completion_ids))


def _cut_causal(example: SFTExample, max_length: int) -> Optional[SFTExample]:
    """The example's first ``max_length`` tokens; ``None`` when they hold no reference token to learn."""
    if sum(example.completion_mask[:max_length]) == 0:
        return None
    return SFTExample(example.input_ids[:max_length], example.completion_mask[:max_length])


def _cut_seq2seq(example: SFTExample, max_length: int) -> Optional[SFTExample]:
    """The example with its reference cut to ``max_length``; ``None`` when the prompt is longer (never cut)."""
    prompt, completion = example.prompt_ids, example.completion_ids[:max_length]
    if len(prompt) > max_length:
        return None
    return SFTExample(prompt + completion, [0] * len(prompt) + [1] * len(completion))


def _over(examples: list[SFTExample], limit: int, size: Callable[[SFTExample], int]) -> tuple[int, int]:
    """How many examples are longer than ``limit`` by ``size``, and the longest's size."""
    sizes = [size(example) for example in examples]
    return sum(n > limit for n in sizes), max(sizes)


def _cut_to(
    examples: list[SFTExample],
    max_length: int,
    size: Callable[[SFTExample], int],
    cut: Callable[[SFTExample, int], Optional[SFTExample]],
) -> tuple[list[SFTExample], int, int]:
    """The examples within ``max_length`` by ``size``, the longer ones ``cut``; with how many were cut and dropped."""
    kept: list[SFTExample] = []
    truncated = dropped = 0
    for example in examples:
        if size(example) <= max_length:
            kept.append(example)
        elif (short := cut(example, max_length)) is None:
            dropped += 1
        else:
            truncated += 1
            kept.append(short)
    return kept, truncated, dropped


@dataclass(frozen=True)
class _Seq2SeqCollator:
    """Pads a batch of (encoder ids, decoder labels) on the right: pad ids with an attention mask, labels with -100.

    The model builds its decoder inputs from the labels (shifted right after its decoder start token),
    so the labels must be right-padded whatever side the tokenizer pads prompts on.
    """

    pad_token_id: int

    def __call__(self, features: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        def pad(rows: list[list[int]], value: int) -> Any:
            width = max(len(r) for r in rows)
            return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)

        inputs = [f["input_ids"] for f in features]
        return {
            "input_ids": pad(inputs, self.pad_token_id),
            "attention_mask": pad([[1] * len(r) for r in inputs], 0),
            "labels": pad([f["labels"] for f in features], -100),
        }


def _check_finite(losses: list[float], model: Any, settings: SFTSettings) -> None:
    """Refuse a fine-tuning whose loss or weights went NaN or infinite, before anything is written."""
    from llmgym.errors import NonFiniteError
    from llmgym.llm.finite import nonfinite_names

    step = next((i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    bad = nonfinite_names(model.named_parameters())
    if step is None and not bad:
        return
    what = (
        f"the loss became {losses[step - 1]} at step {step}" if step is not None else "the loss stayed finite"
    )
    weights = (
        f"{len(bad)} weight tensors hold NaN or inf (first: {bad[0]})" if bad else "the weights are finite"
    )
    raise NonFiniteError(
        f"llmgym sft: {what} and {weights}, with --learning-rate {settings.learning_rate:g}; nothing was written to "
        f"{settings.out}. Fix: lower --learning-rate (the default is 1e-4)."
    )


def _check_out(out: Path) -> None:
    if out.is_file() or (out.is_dir() and any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists and is not empty; give the name of a new folder.")


def _write_folder(out: Path, model: Any, tokenizer: Any, meta: dict[str, Any]) -> None:
    """Write weights, tokenizer and meta under a temporary name next to ``out``, then rename it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SFT_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        if out.is_dir():
            out.rmdir()  # empty (checked before training)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _seq2seq_trainer(model: Any, tokenizer: Any, examples: list[SFTExample], args: Any) -> Any:
    """A ``Seq2SeqTrainer`` (transformers') on (encoder prompt, decoder reference + EOS) pairs."""
    from datasets import Dataset
    from transformers import Seq2SeqTrainer

    if tokenizer.pad_token_id is None:
        raise ConfigError(
            "the tokenizer has no pad token; llmgym sft pads an encoder-decoder's prompts with it."
        )
    dataset = Dataset.from_list([{"input_ids": e.prompt_ids, "labels": e.completion_ids} for e in examples])
    return Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=_Seq2SeqCollator(int(tokenizer.pad_token_id)),
        processing_class=tokenizer,
    )


def run_sft(
    config: Config,
    settings: SFTSettings,
    *,
    model: Optional[PreTrainedModel] = None,
    tokenizer: Optional[PreTrainedTokenizerBase] = None,
) -> SFTResult:
    """Fine-tune the config's model on its datapool's references; write the model folder.

    A causal LM trains with TRL's ``SFTTrainer`` (the loss on the reference tokens after the prompt),
    an encoder-decoder with transformers' ``Seq2SeqTrainer`` (the prompt to the encoder, the reference
    and EOS as the decoder's labels); both with the same settings and the same checks.

    Args:
        config: The run config: ``model`` (with ``model.lora`` LoRA adapters are trained and merged,
            else every weight is trained), ``env`` (a TextGen env and its datapool), ``agent`` (the prompts).
        settings: Steps, learning rate, batch size and the output folder.
        model: A prebuilt causal or seq2seq LM to train in place of ``model.name`` (tests pass tiny models).
        tokenizer: Its tokenizer.

    Returns:
        The folder, the per-step losses and what was trained.

    Raises:
        ConfigError: ``settings.out`` is not empty, the model is 4-bit, the datapool has no references, or an
            example is longer than the model takes (:func:`fit_examples`, :func:`fit_seq2seq_examples`).
        NonFiniteError: The loss or the weights became NaN or infinite; nothing is written.
    """
    import torch
    from datasets import Dataset
    from transformers import Seq2SeqTrainingArguments
    from trl import SFTConfig, SFTTrainer

    from llmgym.llm.adapters import apply_lora
    from llmgym.llm.models import load_model
    from llmgym.llm.tokenization import decoder_limit, model_window

    out = Path(settings.out)
    _check_out(out)
    if config.model.load_in_4bit:
        raise ConfigError("llmgym sft writes merged full-precision weights; set model.load_in_4bit=false.")
    if model is None or tokenizer is None:
        model, tokenizer = load_model(config.model)
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    tokenized = sft_examples(config, tokenizer, seq2seq=seq2seq)
    if seq2seq:
        limit, source = decoder_limit(model.config, tokenizer)
        examples, truncated, dropped = fit_seq2seq_examples(tokenized, limit, source, settings.max_length)
    else:
        examples, truncated, dropped = fit_examples(
            tokenized, model_window(model.config), settings.max_length
        )
    if truncated or dropped:
        logger.warning(
            "llmgym sft: %d examples cut to --max-length %d tokens, %d left out (their prompt alone filled it)",
            truncated,
            settings.max_length,
            dropped,
        )
    seed = config.train.seed if settings.seed is None else settings.seed
    torch.manual_seed(seed)
    trained: Any = apply_lora(model, config.model.lora) if config.model.lora is not None else model
    device = next(model.parameters()).device
    common: dict[str, Any] = dict(
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        per_device_train_batch_size=min(settings.batch_size, len(examples)),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        data_seed=seed,
        use_cpu=device.type == "cpu",
        bf16=False,
        fp16=False,
        gradient_checkpointing=config.model.gradient_checkpointing,
    )
    with tempfile.TemporaryDirectory(prefix="llmgym-sft-") as scratch:
        if seq2seq:
            trainer = _seq2seq_trainer(
                trained, tokenizer, examples, Seq2SeqTrainingArguments(scratch, **common)
            )
        else:
            dataset = Dataset.from_list(
                [{"input_ids": e.input_ids, "completion_mask": e.completion_mask} for e in examples]
            )
            args = SFTConfig(
                scratch,
                completion_only_loss=True,
                max_length=max(len(e.input_ids) for e in examples),  # fit_examples bounded them
                **common,
            )
            trainer = SFTTrainer(model=trained, args=args, train_dataset=dataset, processing_class=tokenizer)
        trainer.train()
        losses = [float(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]
    _check_finite(losses, trained, settings)
    final = trained.merge_and_unload() if config.model.lora is not None else trained
    final.eval()
    meta = {
        "base_model": config.model.name,
        "env": config.env.id,
        "datapool": str(config.env.kwargs.get("datapool", "review_openings")),
        "examples": len(examples),
        "steps": settings.max_steps,
        "learning_rate": settings.learning_rate,
        "batch_size": settings.batch_size,
        "max_length": settings.max_length,
        "truncated": truncated,
        "dropped": dropped,
        "lora": config.model.lora is not None,
        "trainer": "Seq2SeqTrainer" if seq2seq else "SFTTrainer",
        "losses": losses,
    }
    _write_folder(out, final, tokenizer, meta)
    logger.info(
        "SFT loss %.4f -> %.4f over %d steps; model written to %s", losses[0], losses[-1], len(losses), out
    )
    return SFTResult(out, losses, len(examples), config.model.lora is not None, truncated, dropped)
