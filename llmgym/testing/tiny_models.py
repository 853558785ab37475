"""Tiny offline models and tokenizers for tests, built from a config in milliseconds.

Nothing here touches the network: the tokenizer is a byte-level BPE trained in memory on a small
fixed corpus (so every string is encodable and offsets are exact), and the models are
randomly initialised from a seed with transformers configs of a few thousand parameters.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "TINY_CORPUS",
    "tiny_tokenizer",
    "tiny_tool_tokenizer",
    "tiny_causal_lm",
    "tiny_seq2seq_lm",
    "save_tiny_model",
]

TINY_CORPUS: tuple[str, ...] = (
    "You see a red ball 2 steps left and 1 step forward.",
    "You see a wall 3 steps forward. You see a blue key 1 step right.",
    "You see a closed yellow door 2 steps forward. You carry a green box.",
    "Goal of the agent: go to the red ball. Possible actions: turn left, turn right, go forward, pick up, drop, toggle.",
    "Action: go forward. Action: turn left. Action: turn right. Action: pick up. Action: drop. Action: toggle.",
    "Say the word you see: apple banana cherry dog cat yes no hit stay stick.",
    "The capital of France is Paris. What is the capital of France?",
    "Your hand: 14. Dealer shows: 10. Usable ace: no. Do you hit or stay?",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
    "the quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "héllo wörld ünïcode ✓ — “quotes” 'single' (parens) [brackets] {braces} <tags> ok.",
    "system user assistant <|im_start|> <|im_end|>",
)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ("<pad>", "<|im_start|>", "<|im_end|>", "<unk>")


@functools.lru_cache(maxsize=4)
def _trained_tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(TINY_CORPUS) * 4, trainer=trainer)
    return tok.to_str()


def tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with a ChatML chat template, trained offline.

    Args:
        vocab_size: Target vocabulary size (the byte alphabet alone is 256 tokens).

    Returns:
        A fast tokenizer with ``eos_token="<|im_end|>"``, ``pad_token="<pad>"``, offsets support
        and left padding.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(_trained_tokenizer_json(vocab_size))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_tool_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """:func:`tiny_tokenizer` with Qwen2.5's tool-calling chat template (the one TRL ships and parses).

    TRL's ``GRPOTrainer(environment_factory=...)`` needs a chat template that renders tool calls and
    tool results, and a response parser for them, which TRL adds to known templates such as this one.
    """
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = tiny_tokenizer(vocab_size)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def tiny_causal_lm(
    arch: str = "llama",
    seed: int = 0,
    hidden_size: int = 32,
    num_layers: int = 2,
    vocab_size: int | None = None,
    tokenizer: Any | None = None,
    num_heads: int = 4,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A randomly initialised tiny decoder-only model and its tokenizer.

    Args:
        arch: ``"llama"`` or ``"gpt2"``.
        seed: Seed of the weight initialisation.
        hidden_size: Width of the model.
        num_layers: Number of transformer blocks.
        num_heads: Attention heads (a Llama model gets half as many key/value heads, at least
            one); the head size is ``hidden_size / num_heads`` (vLLM's CPU kernels need 32+).
        vocab_size: Vocabulary size; defaults to the tokenizer's.
        tokenizer: Tokenizer to pair with; defaults to :func:`tiny_tokenizer`.

    Returns:
        ``(model, tokenizer)``, the model in fp32 eval mode on CPU.
    """
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    from llmgym.errors import InputError

    tok = tokenizer if tokenizer is not None else tiny_tokenizer()
    vocab = vocab_size or len(tok)
    common: dict[str, Any] = {
        "vocab_size": vocab,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    if arch == "llama":
        config: Any = LlamaConfig(
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=max(1, num_heads // 2),
            max_position_embeddings=512,
            tie_word_embeddings=False,
            **common,
        )
    elif arch == "gpt2":
        config = GPT2Config(
            n_embd=hidden_size, n_layer=num_layers, n_head=num_heads, n_positions=512, **common
        )
    else:
        raise InputError(f"arch={arch!r} is not a tiny causal architecture; use 'llama' or 'gpt2'.")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.eval(), tok


def tiny_seq2seq_lm(
    seed: int = 0, d_model: int = 32, num_layers: int = 2
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A randomly initialised tiny T5 encoder-decoder and its tokenizer.

    Args:
        seed: Seed of the weight initialisation.
        d_model: Width of the model.
        num_layers: Number of encoder and of decoder blocks.

    Returns:
        ``(model, tokenizer)``, the model in fp32 eval mode on CPU.
    """
    import torch
    from transformers import AutoModelForSeq2SeqLM, T5Config

    tok = tiny_tokenizer()
    config = T5Config(  # type: ignore[call-arg]  # decoder_start_token_id goes to PretrainedConfig
        vocab_size=len(tok),
        d_model=d_model,
        d_kv=8,
        d_ff=d_model * 2,
        num_layers=num_layers,
        num_decoder_layers=num_layers,
        num_heads=4,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(config)
    return model.eval(), tok


def save_tiny_model(
    path: str | Path,
    kind: str = "llama",
    seed: int = 0,
    num_layers: int = 2,
    hidden_size: int = 32,
    num_heads: int = 4,
) -> Path:
    """Write a tiny model and its tokenizer to a folder loadable by ``llmgym.llm.load_model`` (and vLLM).

    Args:
        path: Destination folder (created).
        kind: ``"llama"``, ``"gpt2"`` or ``"t5"``.
        seed: Seed of the weight initialisation.
        num_layers: Transformer blocks (per stack for ``"t5"``).
        hidden_size: Width of a causal model (``hidden_size=64, num_heads=2``: 32-wide heads, which
            vLLM's CPU attention takes).
        num_heads: Attention heads of a causal model.

    Returns:
        The folder path.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    if kind == "t5":
        model, tok = tiny_seq2seq_lm(seed=seed, num_layers=num_layers)
    else:
        model, tok = tiny_causal_lm(
            arch=kind, seed=seed, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads
        )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def save_tiny_classifier(path: str | Path, num_labels: int = 2, seed: int = 0, hidden_size: int = 32) -> Path:
    """Write a tiny BERT sequence classifier and its tokenizer to a folder (for model-based rewards and metrics).

    ``AutoModelForSequenceClassification`` (``learned_reward``, ``intent_accuracy``; ``num_labels=1`` for a
    BLEURT-like regression model) and ``AutoModel`` (BERTScore's encoder) both load it.

    Args:
        path: Destination folder (created).
        num_labels: Classifier outputs.
        seed: Seed of the weight initialisation.
        hidden_size: Width of the model.

    Returns:
        The folder path.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig

    tok = tiny_tokenizer()
    tok.model_max_length = 512  # bert-score truncates to it
    config = BertConfig(  # type: ignore[call-arg]  # num_labels goes to PretrainedConfig
        vocab_size=len(tok),
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=hidden_size * 2,
        max_position_embeddings=512,
        num_labels=num_labels,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
