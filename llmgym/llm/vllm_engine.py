"""Generation with vLLM (``model.generation_engine: vllm``): vLLM samples, llmgym scores and trains.

A :class:`VLLMEngine` is a vLLM ``LLM`` in the LLM's own process (vLLM's engine core in-process,
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), loaded from a copy of the model llmgym trains. Prompts go
to it as llmgym's token ids (no re-tokenization) and come back as sampled token ids.

* **Weights.** After every update the trained weights reach the engine before it samples again:
  a LoRA model's adapter is written to a folder and given to vLLM as a new ``LoRARequest``
  (the frozen base is never copied again); a fully fine-tuned model's weights are copied into
  vLLM's in place with its ``reload_weights``, tensor by tensor, in memory. Then vLLM's prefix
  cache is emptied: it holds the KV states of prompts seen before, computed with the old weights,
  and vLLM would otherwise continue them with the new ones (every greedy token then differed from
  the trained model's after a full fine-tuning update).
* **Settings** (``model.vllm``): the KV cache's size, the GPU memory vLLM may hold (by default 90%
  of what is free when it starts, beside the trainer), sleep mode around the updates, eager mode
  and the longest sequence; see :func:`engine_arguments`.
* **Log-probs.** PPO's ratio divides the new policy's probability of a sampled token by the old
  one's, and the trained model must be the old policy: vLLM's kernels (paged attention, bf16
  matmuls in another order, CUDA graphs) give log-probs that differ from the trainer's by
  rounding, which would make the first minibatch's ratio differ from 1 and bias the clipping.
  So ``Generation.logprobs`` and ``raw_logprobs`` are recomputed by llmgym's own scorer
  (``token_logprobs``, without gradients, under the same sampling distribution), and vLLM's own
  log-probs are kept beside them in ``Generation.engine_logprobs`` to check the two engines agree
  (within 1e-4 in fp32 on CPU, ``tests/llm/test_vllm_engine.py``). The samples are drawn from the
  current weights (they are synced before every generation), so no importance correction is
  needed beyond that rounding.
* **Limits.** Causal models only; NLPO's mask policy (a second model consulted at every decoding
  step) needs the built-in engine; beam search and logits processors are refused.
"""

from __future__ import annotations

import math
import os
import random
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from llmgym.errors import ConfigError, GenerationError, InputError, require
from llmgym.llm.adapters import is_peft_model
from llmgym.llm.protocols import EngineHost
from llmgym.llm.sampling import Sampling
from llmgym.llm.scratch import ScratchFolder
from llmgym.llm.validation import check_generation_kwargs

if TYPE_CHECKING:
    from llmgym.config import VLLMConfig
    from llmgym.llm.generation import Generation
    from llmgym.llm.masking import TokenMask

__all__ = [
    "EngineRequest",
    "EngineSample",
    "VLLMEngine",
    "engine_arguments",
    "engine_generate",
    "engine_request",
    "gpu_memory_utilization",
]

#: The ``generate`` arguments the vLLM engine understands; anything else is refused, not ignored.
SUPPORTED_KWARGS = frozenset(
    {
        "max_new_tokens",
        "max_length",
        "min_new_tokens",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "num_return_sequences",
        "stop_strings",
        "eos_token_id",
        "pad_token_id",
        "num_beams",
    }
)

#: LoRA ranks vLLM accepts as ``max_lora_rank``.
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class EngineRequest:
    """What one ``generate`` call asks of the engine, read from transformers-style arguments.

    Attributes:
        max_new_tokens: Most tokens per sequence.
        min_new_tokens: Fewest tokens per sequence (EOS and stop strings ignored before).
        repeats: Sequences per prompt (``num_return_sequences``).
        sampling: The distribution sampled from; ``None``: greedy (the argmax at every step).
        stop_strings: Text that ends a sequence (kept in it, as the built-in engine keeps it).
        eos_token_ids: Ids that end a sequence (kept in it).
    """

    max_new_tokens: int
    min_new_tokens: int
    repeats: int
    sampling: Sampling | None
    stop_strings: tuple[str, ...]
    eos_token_ids: tuple[int, ...]


@dataclass(frozen=True)
class EngineSample:
    """One sequence vLLM sampled.

    Attributes:
        token_ids: The sampled ids, up to and including EOS or the token completing a stop string.
        logprobs: ``[T]`` vLLM's own log-probs of them under the sampling distribution, float32.
    """

    token_ids: list[int]
    logprobs: torch.Tensor


def engine_request(
    generation_kwargs: dict[str, Any], generation_config: Any, max_new_tokens: int, eos_ids: set[int]
) -> EngineRequest:
    """Read ``generate``'s arguments for vLLM, unset sampling values taken from the model's generation config.

    Args:
        generation_kwargs: The transformers-style arguments of ``LLM.generate``.
        generation_config: The model's ``GenerationConfig`` (defaults of ``do_sample``, ``temperature``,
            ``top_k``, ``top_p``, as transformers' ``generate`` takes them).
        max_new_tokens: Most new tokens (``max_new_tokens`` or what ``max_length`` leaves).
        eos_ids: End-of-sequence ids.

    Returns:
        The request.

    Raises:
        InputError: An argument vLLM cannot honour here (beam search, logits processors, NLPO's
            ``mask_top_p``...), or a value out of range.
    """
    unknown = sorted(set(generation_kwargs) - SUPPORTED_KWARGS)
    if unknown:
        raise InputError(
            f"generate() got {unknown}, which model.generation_engine=vllm does not support (supported: "
            f"{sorted(SUPPORTED_KWARGS)}). Fix: drop them or set model.generation_engine=builtin."
        )
    if generation_kwargs.get("num_beams", 1) != 1:
        raise InputError(
            f"num_beams={generation_kwargs['num_beams']} is not supported: use num_beams=1 (sampling or greedy)."
        )
    check_generation_kwargs(generation_kwargs)

    def setting(name: str, default: Any) -> Any:
        value = generation_kwargs.get(name, getattr(generation_config, name, None))
        return default if value is None else value

    min_new_tokens = int(generation_kwargs.get("min_new_tokens") or 0)
    sampling = None
    if setting("do_sample", False):
        # min_new_tokens is in the distribution llmgym re-scores, so the recorded log-probs match the update's
        sampling = Sampling(
            temperature=setting("temperature", 1.0),
            top_k=setting("top_k", 0),
            top_p=setting("top_p", 1.0),
            min_new_tokens=min_new_tokens,
        )
    stops = generation_kwargs.get("stop_strings") or ()
    return EngineRequest(
        max_new_tokens=max_new_tokens,
        min_new_tokens=min_new_tokens,
        repeats=int(generation_kwargs.get("num_return_sequences") or 1),
        sampling=sampling,
        stop_strings=(stops,) if isinstance(stops, str) else tuple(stops),
        eos_token_ids=tuple(sorted(eos_ids)),
    )


@contextmanager
def _process_state_kept() -> Iterator[None]:
    """Restore what building a vLLM engine changes in the process: RNGs, matmul precision, ``torch.set_num_threads``.

    vLLM seeds Python's, NumPy's and torch's RNGs, sets the float32 matmul precision to "highest"
    (turning off the TF32 llmgym enables on GPUs), and on a CPU replaces ``torch.set_num_threads``
    by a no-op (to protect its thread pinning, which llmgym turns off).
    """
    import numpy as np

    python, numpy_state, cpu = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    set_num_threads, precision = torch.set_num_threads, torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_float32_matmul_precision(precision)
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]


def _base_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The base model's weights under their transformers names (a PEFT model's adapters left out)."""
    if not is_peft_model(model):
        return dict(model.state_dict())
    state = model.get_base_model().state_dict()
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}


@contextmanager
def _saving_on_every_rank(model: Any) -> Iterator[None]:
    """Let ``save_pretrained`` write on this process although a ``torch.distributed`` group is up.

    Transformers writes a model only on the group's rank 0 (``should_save_on_this_rank``), but
    every LLM server builds its own engine from its own copy, on its own node.
    """
    model.should_save_on_this_rank = lambda is_main_process: True
    try:
        yield
    finally:
        del model.should_save_on_this_rank


def gpu_memory_utilization(settings: VLLMConfig, device: torch.device) -> float | None:
    """The fraction of the GPU's memory vLLM may hold: ``model.vllm.gpu_memory_utilization``, or 90% of the free fraction.

    vLLM refuses to start when less than that fraction of the GPU is free; the trainer's
    weights, already loaded beside it, count as used.

    Args:
        settings: The ``model.vllm`` section.
        device: The LLM's device.

    Returns:
        The fraction, or ``None`` off a CUDA device (vLLM's CPU backend sizes its memory itself).

    Raises:
        ConfigError: A set fraction over what is free.
    """
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    if settings.gpu_memory_utilization is None:
        return math.floor(900 * free / total) / 1000
    if settings.gpu_memory_utilization * total > free:
        raise ConfigError(
            f"model.vllm.gpu_memory_utilization={settings.gpu_memory_utilization:g} asks vLLM for "
            f"{settings.gpu_memory_utilization * total / 2**30:.1f} GiB of the GPU's {total / 2**30:.1f} GiB, but only "
            f"{free / 2**30:.1f} GiB are free when its engine starts (the trainer's weights count as used). Fix: set it "
            f"to at most {free / total:.2f}, or null to take 90% of what is free."
        )
    return settings.gpu_memory_utilization


def engine_arguments(host: EngineHost, model_folder: Path, lora_rank: int | None) -> dict[str, Any]:
    """The keyword arguments of vLLM's ``LLM`` for ``host``'s model, read from ``model.vllm``.

    Raises:
        ConfigError: ``max_model_len`` over the model's window, ``sleep_mode`` off a CUDA GPU, or a
            ``gpu_memory_utilization`` over what is free.
    """
    settings = host.config.vllm
    on_gpu = host.device.type == "cuda"
    if (
        settings.max_model_len is not None
        and host.window is not None
        and settings.max_model_len > host.window
    ):
        raise ConfigError(
            f"model.vllm.max_model_len={settings.max_model_len} is over the model's window of {host.window} tokens; "
            "lower it or set it to null (the window)."
        )
    if settings.sleep_mode and not on_gpu:
        raise ConfigError(
            f"model.vllm.sleep_mode=true needs a CUDA GPU (vLLM's sleep mode), not model.device={str(host.device)!r}; "
            "set it to false."
        )
    kwargs: dict[str, Any] = {
        "model": str(model_folder),
        "dtype": _dtype_name(host.compute_dtype),
        "seed": host.config.seed,
        "enforce_eager": settings.enforce_eager if settings.enforce_eager is not None else not on_gpu,
        "kv_cache_memory_bytes": settings.kv_cache_mb << 20,
        "logprobs_mode": "processed_logprobs",
        "disable_log_stats": True,
    }
    max_model_len = settings.max_model_len or host.window
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    utilization = gpu_memory_utilization(settings, host.device)
    if utilization is not None:
        kwargs["gpu_memory_utilization"] = utilization
    if settings.sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if lora_rank is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=lora_rank)
    return kwargs


class VLLMEngine:
    """A vLLM engine in this process, loaded with the model llmgym trains, that samples for it.

    A :class:`~llmgym.llm.protocols.GenerationEngine`. The base model is written once (safetensors
    and tokenizer) to a private temporary folder vLLM loads (:class:`~llmgym.llm.scratch.ScratchFolder`:
    removed by :meth:`close`, and by a reaper process on any other exit, SIGKILL included); the
    adapters written later go there too. The engine is built when the LLM is, so the LLM servers
    of the Ray backend build theirs in the same call (vLLM joins their ``torch.distributed`` group
    to make its own, a collective step).

    Args:
        host: The LLM it samples for (its model, optionally PEFT-wrapped with LoRA; its ``model.vllm``
            settings).

    Raises:
        MissingDependencyError: vLLM is not installed.
        ConfigError: The model is a seq2seq or 4-bit model, its LoRA rank is over what vLLM takes,
            or a ``model.vllm`` setting does not fit (:func:`engine_arguments`).
    """

    def __init__(self, host: EngineHost) -> None:
        model = host.model
        if host.is_seq2seq:
            raise ConfigError(
                "model.generation_engine=vllm samples causal LMs only; set model.generation_engine=builtin for seq2seq models."
            )
        if getattr(model, "is_loaded_in_4bit", False):
            raise ConfigError(
                "model.generation_engine=vllm cannot load a 4-bit (QLoRA) base; set model.load_in_4bit=false or model.generation_engine=builtin."
            )
        # The engine core runs in this process, so weights pass in memory and nothing is serialised;
        # on a CPU vLLM must not pin this process's threads (llmgym's forward passes share them).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        # vLLM reports usage statistics to its authors' server unless told not to: llmgym sends nothing anywhere.
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        vllm = require("vllm", "vllm", "model.generation_engine=vllm")
        self._host = host
        self._lora_rank = _lora_rank(model)
        self._full = self._lora_rank is None
        self._adapter: tuple[int, Path] | None = None
        self._asleep = False
        self._closed = False
        self._scratch = ScratchFolder("llmgym-vllm-")
        try:
            base = self._scratch.path / "model"
            target = model.get_base_model() if is_peft_model(model) else model
            with _saving_on_every_rank(target):
                target.save_pretrained(base, state_dict=_base_state_dict(model))
            host.tokenizer.save_pretrained(base)
            kwargs = engine_arguments(host, base, self._lora_rank)
            grouped = _distributed_initialized()
            with _process_state_kept():
                self._llm = vllm.LLM(**kwargs)  # type: ignore[attr-defined]
            # Alone in its process, vLLM made a torch.distributed group through a ``vllm_dist_*`` file in the temp folder.
            store_file = None if grouped else _group_store_file()
            if store_file is not None:
                self._scratch.adopt(store_file)
        except BaseException:
            self._scratch.remove()
            raise
        #: The weights version (:attr:`llmgym.llm.local.LocalLLM.weights_version`) vLLM holds; ``None``: not yet
        #: pushed (the LLM servers align their weights after building the engine, and a load changes them).
        self.synced_version: int | None = None

    @property
    def folder(self) -> Path:
        """The temporary folder of the model copy and adapters vLLM loads."""
        return self._scratch.path

    def generate(
        self, contexts: list[str], generation_kwargs: dict[str, Any], mask: TokenMask
    ) -> list[list[Generation]]:
        """Sample with vLLM, then score the samples with llmgym (:func:`engine_generate`).

        Raises:
            ConfigError: An active ``mask`` (NLPO's), which vLLM cannot run.
            InputError: As :func:`engine_request`.
        """
        if mask.active:
            raise ConfigError(
                "NLPO's mask policy is a second model consulted at every decoding step, which vLLM cannot run; "
                "set model.generation_engine=builtin with algorithm.name=nlpo."
            )
        with self._host.autocast():
            return engine_generate(self._host, self, contexts, generation_kwargs)

    def release(self) -> None:
        """Put vLLM to sleep while the weights change (``model.vllm.sleep_mode``), freeing its GPU memory.

        Its KV cache is dropped; so are its weights in full fine-tuning (new ones are pushed on
        waking), while a LoRA model's base is offloaded to the CPU and restored.
        """
        if not self._host.config.vllm.sleep_mode or self._asleep:
            return
        self._llm.sleep(level=2 if self._full else 1)
        self._asleep = True
        if self._full:
            self.synced_version = None

    def sync_weights(self, version: int) -> None:
        """Wake vLLM if asleep and give it the weights of ``version`` if it lacks them, then empty its prefix cache.

        vLLM's prefix cache keeps the KV states of the prompts it has seen, computed with the
        weights of then: after a full fine-tuning update they would make it sample the old model.
        """
        changed = False
        if self._asleep:
            self._llm.wake_up(tags=["weights"])
            if self._full:  # its weights were dropped: fill them before the KV cache comes back
                self._load_weights(self._host.model, version)
            self._llm.wake_up(tags=["kv_cache"])
            self._asleep = False
            changed = True
        if self.synced_version != version:
            self._load_weights(self._host.model, version)
            changed = True
        if changed and self._llm.reset_prefix_cache() is False:
            raise GenerationError(
                "vLLM did not empty its prefix cache after a weight update, so it would sample from the old weights; "
                "this is a bug (no request should be running between two generate calls)."
            )

    def _load_weights(self, model: Any, version: int) -> None:
        """Give vLLM the trained weights: the LoRA adapter as a new request, or every full weight in place.

        Args:
            model: The trained model (the one the engine was built from).
            version: The weights version they are, recorded in :attr:`synced_version`.
        """
        if self._lora_rank is not None:
            folder = self.folder / f"adapter-{version}"
            model.save_pretrained(folder)
            previous, self._adapter = self._adapter, (version + 1, folder)
            if previous is not None:
                self._llm.llm_engine.remove_lora(previous[0])
                shutil.rmtree(previous[1], ignore_errors=True)
        else:
            weights = [(name, tensor.detach()) for name, tensor in _base_state_dict(model).items()]
            self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.synced_version = version

    def sample(self, prompts: Sequence[Sequence[int]], request: EngineRequest) -> list[list[EngineSample]]:
        """Sample ``request.repeats`` sequences per prompt, each request seeded from torch's RNG.

        Args:
            prompts: Token ids of each prompt.
            request: What to sample (:func:`engine_request`).

        Returns:
            Per prompt, ``request.repeats`` samples.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        base_seed = int(torch.randint(0, 2**31 - 1, ()).item())
        sampling = request.sampling
        params = [
            SamplingParams(
                n=1,
                max_tokens=request.max_new_tokens,
                min_tokens=request.min_new_tokens,
                logprobs=0,
                temperature=0.0 if sampling is None else sampling.temperature,
                top_k=0 if sampling is None else sampling.top_k,
                top_p=1.0 if sampling is None else sampling.top_p,
                seed=base_seed + index,
                stop=list(request.stop_strings) or None,
                include_stop_str_in_output=True,
                stop_token_ids=list(request.eos_token_ids) or None,
            )
            for index in range(len(prompts) * request.repeats)
        ]
        inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts for _ in range(request.repeats)]
        lora = (
            None
            if self._adapter is None
            else LoRARequest(f"llmgym-{self._adapter[0]}", self._adapter[0], str(self._adapter[1]))
        )
        outputs = self._llm.generate(inputs, params, use_tqdm=False, lora_request=lora)
        samples = []
        for output in outputs:
            done = output.outputs[0]
            ids = list(done.token_ids)
            steps = done.logprobs or []
            samples.append(
                EngineSample(
                    ids, torch.tensor([step[t].logprob for step, t in zip(steps, ids)], dtype=torch.float32)
                )
            )
        return [samples[i : i + request.repeats] for i in range(0, len(samples), request.repeats)]

    def close(self) -> None:
        """Release vLLM's engine and remove the model and adapter copies."""
        if self._closed:
            return
        self._closed = True
        del self._llm
        try:
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        finally:
            self._scratch.remove()


def _distributed_initialized() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _group_store_file() -> str | None:
    """The file of the default ``torch.distributed`` group's ``FileStore``, if the group rendezvoused through one."""
    if not _distributed_initialized():
        return None
    import torch.distributed as dist

    store: Any = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    path = getattr(store, "path", None)
    return path if isinstance(path, str) else None


def _lora_rank(model: Any) -> int | None:
    """The ``max_lora_rank`` vLLM needs for a PEFT model's adapter (``None``: no adapter).

    Raises:
        ConfigError: The rank is over the largest vLLM takes.
    """
    if not is_peft_model(model):
        return None
    rank = max(int(c.r) for c in model.peft_config.values())
    for allowed in _VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ConfigError(
        f"model.lora.r={rank} is over vLLM's largest LoRA rank {_VLLM_LORA_RANKS[-1]}; lower it or set model.generation_engine=builtin."
    )


def engine_generate(
    llm: EngineHost, engine: VLLMEngine, contexts: Sequence[str], generation_kwargs: dict[str, Any]
) -> list[list[Generation]]:
    """Sample with vLLM, then score the samples with llmgym (see the module docstring).

    Args:
        llm: The local LLM whose model the engine holds (weights already pushed).
        engine: Its engine.
        contexts: ``B`` prompt strings (already validated).
        generation_kwargs: Transformers-style arguments (:data:`SUPPORTED_KWARGS`).

    Returns:
        Per context, ``num_return_sequences`` :class:`~llmgym.llm.generation.Generation` objects whose
        ``logprobs`` / ``raw_logprobs`` are llmgym's and ``engine_logprobs`` vLLM's.

    Raises:
        InputError: As :func:`engine_request`, or a prompt that would run past the model window.
    """
    from llmgym.llm.generation import Generation, check_prompts, eos_token_ids, new_token_budget

    encoder = llm.encoder
    prompts = encoder.encode_contexts(encoder.fit_contexts(contexts))
    new_tokens = new_token_budget(
        llm.model, generation_kwargs, max((len(p) for p in prompts), default=0), False
    )
    check_prompts(prompts, new_tokens, encoder.window, None)
    request = engine_request(
        generation_kwargs,
        llm.model.generation_config,
        new_tokens,
        eos_token_ids(llm.model, generation_kwargs),
    )
    samples = engine.sample(prompts, request)
    prompt_ids = [list(p) for p, group in zip(prompts, samples) for _ in group]
    token_ids = [s.token_ids for group in samples for s in group]
    processed = llm.token_logprobs(prompt_ids, token_ids, require_grad=False, sampling=request.sampling)
    plain = request.sampling is None or request.sampling.is_plain
    raw = processed if plain else llm.token_logprobs(prompt_ids, token_ids, require_grad=False)
    results: list[list[Generation]] = []
    row = 0
    for prompt, group in zip(prompts, samples):
        out = []
        for sample in group:
            out.append(
                Generation(
                    text=llm.tokenizer.decode(sample.token_ids, skip_special_tokens=True),
                    token_ids=sample.token_ids,
                    logprobs=processed[row]["logprobs"],
                    raw_logprobs=raw[row]["logprobs"],
                    prompt_ids=list(prompt),
                    engine_logprobs=sample.logprobs,
                )
            )
            row += 1
        results.append(out)
    return results
