"""NLPO's mask policy: a frozen snapshot of the trainable weights whose top-p tokens bound the action space.

Natural Language Policy Optimization (Ramamurthy et al., 2022, RL4LMs) samples each token from
the current policy restricted to the smallest set of tokens whose probability under a *mask
policy* reaches ``top_p``; the mask policy is a copy of the policy, refreshed every few updates.
Here the copy is a :class:`MaskPolicy` next to the model (on every LLM server): a snapshot of the
model's trainable parameters (the LoRA adapter, or the fine-tuned weights), run through the
model with :func:`torch.func.functional_call`, so no second model is held and the frozen weights
are shared. :func:`top_p_mask` is the mask; generation applies it with
:class:`MaskLogitsProcessor` (:class:`IncrementalMask`; for encoder-decoders its mask follows the
decoder), and an
update recomputes it on the stored token ids (:meth:`MaskPolicy.keep_masks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor
from transformers.modeling_outputs import BaseModelOutput

from llmgym.errors import InputError
from llmgym.llm.adapters import cache_kwarg
from llmgym.llm.scoring import input_device

__all__ = [
    "IncrementalMask",
    "MaskLogitsProcessor",
    "MaskPolicy",
    "TokenMask",
    "check_mask_top_p",
    "check_mask_min_tokens",
    "top_p_mask",
]


def check_mask_top_p(top_p: float) -> float:
    """``top_p`` as a float in ``(0, 1]``.

    Raises:
        InputError: On a value outside ``(0, 1]`` (or not a number).
    """
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < float(top_p) <= 1.0:
        raise InputError(f"mask_top_p={top_p!r} must lie in (0, 1]; NLPO uses 0.9 (1 keeps every token).")
    return float(top_p)


def check_mask_min_tokens(min_tokens: int) -> int:
    """``min_tokens`` (NLPO's ``min_tokens_to_keep``) as an int >= 1.

    Raises:
        InputError: On a value below 1 (or not an int).
    """
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
        raise InputError(
            f"mask_min_tokens={min_tokens!r} must be an int >= 1 (RL4LMs' min_tokens_to_keep is 100; 1 keeps only "
            "the top-p set)."
        )
    return min_tokens


@dataclass(frozen=True)
class TokenMask:
    """NLPO's mask of one ``generate`` call: every token restricted to the mask policy's top-p set.

    Attributes:
        top_p: The set's mass, in ``(0, 1]`` (1: no mask).
        min_tokens: The mask policy's most likely tokens the set keeps whatever their mass (>= 1).

    Raises:
        InputError: On a value out of range.
    """

    top_p: float = 1.0
    min_tokens: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "top_p", check_mask_top_p(self.top_p))
        object.__setattr__(self, "min_tokens", check_mask_min_tokens(self.min_tokens))

    @property
    def active(self) -> bool:
        """Whether it restricts anything (``top_p < 1``)."""
        return self.top_p < 1.0


def top_p_mask(
    mask_logits: torch.Tensor,
    top_p: float,
    always_keep: Sequence[int] | torch.Tensor = (),
    min_tokens: int = 1,
) -> torch.Tensor:
    """The smallest set of most likely tokens whose mask-policy probability reaches ``top_p``.

    Tokens are sorted by probability (descending); a token is kept while the mass of the tokens
    before it is below ``top_p``, and the ``min_tokens`` most likely are kept whatever their mass
    (RL4LMs' ``min_tokens_to_keep``, 100 by default there). As RL4LMs, the ``always_keep`` ids
    (special tokens such as EOS) are kept whatever their probability.

    Args:
        mask_logits: ``[N, V]`` logits of the mask policy.
        top_p: Mass to reach, in ``(0, 1]`` (1 keeps every token).
        always_keep: Token ids kept in every row (a list, or a long tensor already on the device).
        min_tokens: The most likely tokens always kept (>= 1).

    Returns:
        ``[N, V]`` bool, True for the tokens kept.

    Raises:
        InputError: ``top_p`` outside ``(0, 1]``.
    """
    top_p = check_mask_top_p(top_p)
    probs = torch.softmax(mask_logits.float(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p
    keep_sorted[..., : max(1, min_tokens)] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    if isinstance(always_keep, torch.Tensor):
        keep[..., always_keep.to(keep.device, non_blocking=True)] = True
    elif always_keep:
        keep[..., torch.as_tensor(list(always_keep), dtype=torch.long, device=keep.device)] = True
    return keep


def _left_padded(
    sequences: Sequence[Sequence[int]], pad_token_id: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and ``position_ids`` ``[B, L]`` of left-padded sequences.

    Positions count from each sequence's first token, so padding does not shift them.
    """
    width = max(len(s) for s in sequences)
    ids = torch.tensor([[pad_token_id] * (width - len(s)) + list(s) for s in sequences], device=device)
    attention = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=device)
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
    }


class MaskPolicy:
    """A frozen snapshot of a model's trainable parameters, evaluated through the model itself.

    Attributes:
        params: Parameter name -> detached copy, or ``None`` before the first :meth:`refresh`.
    """

    def __init__(self) -> None:
        self.params: dict[str, torch.Tensor] | None = None

    def refresh(self, model: Any) -> None:
        """Copy the model's current trainable parameters into the snapshot."""
        self.params = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        """The snapshot (saved in checkpoints), or ``None`` before the first refresh."""
        return self.params

    def load_state_dict(self, params: dict[str, torch.Tensor] | None, model: Any) -> None:
        """Restore a snapshot written by :meth:`state_dict`, each tensor on its parameter's device in ``model``."""
        if params is None:
            self.params = None
            return
        devices = {name: p.device for name, p in model.named_parameters()}
        fallback = next(iter(devices.values()))
        self.params = {name: t.to(devices.get(name, fallback)) for name, t in params.items()}

    def _snapshot(self) -> dict[str, torch.Tensor]:
        if self.params is None:
            raise InputError(
                "The mask policy has no snapshot yet; call llm.refresh_mask_policy() before sampling or scoring with "
                "mask_top_p < 1 (NLPO does it when it is given the agent: llmgym.NLPO(agent, envs, config), or "
                "nlpo.prepare(agent) for LlamaGym's loop)."
            )
        return self.params

    def last_logits(
        self, model: Any, sequences: Sequence[Sequence[int]], counts: Sequence[int], pad_token_id: int
    ) -> list[torch.Tensor]:
        """Mask-policy logits at the last ``counts[i]`` positions of each sequence (no gradient).

        Position ``j`` of a sequence predicts token ``j + 1``. The sequences are left-padded into
        one batch, with positions counted from each sequence's first token.

        Args:
            model: The (possibly PEFT-wrapped) causal LM the snapshot was taken from.
            sequences: ``B`` token-id lists, each non-empty.
            counts: ``B`` numbers of trailing positions wanted (``<= len(sequence)``).
            pad_token_id: Id written on the padding positions.

        Returns:
            ``B`` float32 tensors ``[counts[i], V]`` (``[0, 0]`` each when every count is 0).
        """
        params = self._snapshot()
        keep = max(counts, default=0)
        if keep == 0:
            return [torch.zeros(0, 0) for _ in sequences]
        device = input_device(model)
        inputs = {**_left_padded(sequences, pad_token_id, device), "use_cache": False, "logits_to_keep": keep}
        with torch.no_grad():
            logits = torch.func.functional_call(model, params, (), inputs).logits.float()
        return [logits[b, keep - c :] for b, c in enumerate(counts)]

    def decoder_logits(
        self,
        model: Any,
        prompts: Sequence[Sequence[int]],
        decoder_ids: Sequence[Sequence[int]],
        starts: Sequence[int],
        pad_token_id: int,
    ) -> list[torch.Tensor]:
        """Encoder-decoder models: mask-policy logits at decoder positions ``starts[i]`` to ``len(decoder_ids[i]) - 1``.

        Decoder position ``j`` (the start token, then ``decoder_ids[i][:-1]``) predicts
        ``decoder_ids[i][j]``. The encoder rows are left-padded, the decoder rows right-padded.

        Args:
            model: The (possibly PEFT-wrapped) seq2seq LM the snapshot was taken from.
            prompts: ``B`` encoder token-id lists, each non-empty.
            decoder_ids: ``B`` decoder token-id lists (prefix, then the tokens to mask).
            starts: ``B`` first positions wanted.
            pad_token_id: Id written on the padding positions.

        Returns:
            ``B`` float32 tensors ``[len(decoder_ids[i]) - starts[i], V]`` (``[0, 0]`` each when none is wanted).
        """
        params = self._snapshot()
        if all(len(d) <= s for d, s in zip(decoder_ids, starts)):
            return [torch.zeros(0, 0) for _ in prompts]
        device = input_device(model)
        encoder = _left_padded(prompts, pad_token_id, device)
        start_id = int(model.config.decoder_start_token_id)
        width = max(len(d) for d in decoder_ids)
        rows = [[start_id, *list(d)[:-1]] if d else [start_id] for d in decoder_ids]
        decoder = torch.tensor([r + [pad_token_id] * (width - len(r)) for r in rows], device=device)
        inputs = {
            "input_ids": encoder["input_ids"],
            "attention_mask": encoder["attention_mask"],
            "decoder_input_ids": decoder,
            "use_cache": False,
        }
        with torch.no_grad():
            logits = torch.func.functional_call(model, params, (), inputs).logits.float()
        return [logits[b, s : len(d)] for b, (d, s) in enumerate(zip(decoder_ids, starts))]

    def keep_masks(
        self,
        model: Any,
        prompts: Sequence[Sequence[int]],
        completions: Sequence[Sequence[int]],
        top_p: float,
        pad_token_id: int,
        always_keep: Sequence[int] = (),
        starts: Sequence[int] | None = None,
        min_tokens: int = 1,
    ) -> list[torch.Tensor]:
        """The mask of every completion token: the top-p tokens the snapshot allowed where it was sampled.

        Args:
            model: The causal or seq2seq LM the snapshot was taken from.
            prompts: ``B`` prompt token-id lists (a seq2seq model's encoder ids).
            completions: ``B`` completion token-id lists (a seq2seq model's decoder ids).
            top_p: The mask's mass (``algorithm.nlpo.mask_top_p``).
            pad_token_id: Id written on padding positions.
            always_keep: Token ids kept in every mask (special tokens).
            starts: Per completion, the first token masked: the tokens before it are a prefix the
                completion was generated after (a token-level agent's decoder prefix); ``None``: 0.
            min_tokens: The most likely tokens every mask keeps (``algorithm.nlpo.min_tokens_to_keep``).

        Returns:
            ``B`` bool tensors ``[T_i, V]`` for the ``T_i`` masked tokens of each completion, in
            order (``[0, 0]`` for none).
        """
        firsts = list(starts) if starts is not None else [0] * len(completions)
        if bool(getattr(model.config, "is_encoder_decoder", False)):
            logits = self.decoder_logits(model, prompts, completions, firsts, pad_token_id)
        else:
            sequences = [list(p) + list(c[:-1]) for p, c in zip(prompts, completions)]
            logits = self.last_logits(
                model, sequences, [len(c) - s for c, s in zip(completions, firsts)], pad_token_id
            )
        masks = []
        for lg, c, s in zip(logits, completions, firsts):
            tokens = list(c)[s:]
            if not tokens:
                masks.append(torch.zeros(0, 0, dtype=torch.bool))
                continue
            mask = top_p_mask(lg, top_p, always_keep, min_tokens)
            # A sampled token was inside the mask it was drawn from; recomputed in another batch (other
            # padding, no KV cache), a token at the top-p boundary can round out of it, which would make
            # its log-prob -inf. Keeping it is a no-op whenever the rounding agrees.
            mask[torch.arange(len(tokens)), torch.as_tensor(tokens, dtype=torch.long)] = True
            masks.append(mask)
        return masks


class IncrementalMask:
    """The mask-policy masks of one ``generate`` call, with the snapshot's own KV cache.

    ``generate`` extends every row by one token per step; recomputing the mask policy over each
    whole row at every step would cost a full forward per token. The first call runs the snapshot
    over the rows and keeps its KV cache; each later call whose rows are one token longer feeds
    only their newest tokens; any other shape starts over. A causal LM's rows are left-padded
    (prompt, then what was generated); an encoder-decoder's (``prompts`` given) are the decoder's
    (the start token, any decoder prefix, then what was generated), the prompts encoded once.
    Everything stays on the device: no host sync per decoding step (the rows are compared by
    shape, not content, so use one instance per ``generate`` call).

    Args:
        policy: The mask policy (its snapshot must exist).
        model: The LM the snapshot was taken from.
        top_p: The mask's mass.
        always_keep: Token ids kept in every mask (special tokens).
        pad_token_id: Id written on the padding positions.
        min_tokens: The most likely tokens every mask keeps.
        prompts: A seq2seq model's encoder token ids of ``generate``'s rows (one per row, sampled
            sequences repeated); ``None`` for a causal LM.
    """

    def __init__(
        self,
        policy: MaskPolicy,
        model: Any,
        top_p: float,
        always_keep: Sequence[int],
        pad_token_id: int,
        min_tokens: int = 1,
        prompts: Sequence[Sequence[int]] | None = None,
    ) -> None:
        self.policy = policy
        self.model = model
        self.top_p = check_mask_top_p(top_p)
        self.min_tokens = min_tokens
        self.always_keep = list(always_keep)
        self.pad_token_id = pad_token_id
        self.encoder = None if prompts is None else _left_padded(prompts, pad_token_id, input_device(model))
        self._shape: tuple[int, int] | None = None
        self._cache: Any = None
        self._attention: torch.Tensor | None = None
        self._positions: torch.Tensor | None = None
        self._encoded: Any = None
        self._always: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
        """``[R, V]`` bool: the tokens the mask policy keeps after each row of ``input_ids``.

        Args:
            input_ids: ``[R, T]`` rows (left-padded; a seq2seq model's decoder rows, not padded).
            pads: ``[R]`` left padding of each row (on ``input_ids``' device; unused for decoder rows).
        """
        params = self.policy._snapshot()
        input_ids = input_ids.to(input_device(self.model), non_blocking=True)
        rows, length = input_ids.shape
        extends = self._shape == (rows, length - 1)
        if self.encoder is None:
            inputs = self._causal_inputs(input_ids, pads, extends)
        else:
            inputs = self._decoder_inputs(input_ids, self.encoder, extends)
        with torch.no_grad():
            out = torch.func.functional_call(self.model, params, (), inputs)
        if self.encoder is None:
            self._attention, self._positions = inputs["attention_mask"], inputs["position_ids"]
        else:
            self._encoded = BaseModelOutput(last_hidden_state=out.encoder_last_hidden_state)
        self._cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        self._shape = (rows, length)
        logits = out.logits[:, -1].float()
        if self._always is None or self._always.device != logits.device:
            self._always = torch.tensor(self.always_keep, dtype=torch.long).to(
                logits.device, non_blocking=True
            )
        return top_p_mask(logits, self.top_p, self._always, self.min_tokens)

    def _causal_inputs(self, input_ids: torch.Tensor, pads: torch.Tensor, extends: bool) -> dict[str, Any]:
        """The model's inputs for left-padded rows: only the newest tokens when ``extends`` the last rows."""
        if extends and self._attention is not None and self._positions is not None:
            attention = torch.cat([self._attention, self._attention.new_ones(input_ids.shape[0], 1)], dim=1)
            positions = self._positions[:, -1:] + 1
            return {
                "input_ids": input_ids[:, -1:],
                "attention_mask": attention,
                "position_ids": positions,
                cache_kwarg(self.model): self._cache,
                "use_cache": True,
            }
        columns = torch.arange(input_ids.shape[1], device=input_ids.device)
        attention = (columns[None, :] >= pads.to(input_ids.device, non_blocking=True)[:, None]).long()
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        return {
            "input_ids": input_ids.masked_fill(attention == 0, self.pad_token_id),
            "attention_mask": attention,
            "position_ids": positions,
            "use_cache": True,
            "logits_to_keep": 1,
        }

    def _decoder_inputs(
        self, input_ids: torch.Tensor, encoder: dict[str, torch.Tensor], extends: bool
    ) -> dict[str, Any]:
        """The model's inputs for decoder rows: the prompts ``encoder``, encoded once, and the newest tokens when ``extends``."""
        inputs: dict[str, Any] = {"attention_mask": encoder["attention_mask"], "use_cache": True}
        if extends and self._encoded is not None:
            inputs.update(
                {
                    "encoder_outputs": self._encoded,
                    "decoder_input_ids": input_ids[:, -1:],
                    cache_kwarg(self.model): self._cache,
                }
            )
        else:
            inputs.update({"input_ids": encoder["input_ids"], "decoder_input_ids": input_ids})
        return inputs


class MaskLogitsProcessor(LogitsProcessor):
    """Sets the scores of the tokens outside the mask to ``-inf`` at every step of ``generate``.

    Transformers runs custom processors before its temperature, top-k and top-p warpers, so the
    sampled distribution is those warpers applied to the masked scores; :func:`~llmgym.llm.sampling.sampled_logprobs`
    recomputes it in that order. Nothing here copies to the host: no sync per decoding step.

    Args:
        keep: Given ``generate``'s ``input_ids [R, T]`` (left-padded: prompt, then what was
            generated) and each row's left padding ``[R]``, the ``[R, V]`` bool tokens that may come next.
        pads: Left padding of each of the ``R`` rows of ``generate``'s ``input_ids``.
    """

    def __init__(
        self, keep: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], pads: Sequence[int]
    ) -> None:
        self.keep = keep
        self.pads = list(pads)
        self._pads: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``scores [R, V]`` with the masked-out tokens at ``-inf``."""
        if self._pads is None or self._pads.device != input_ids.device:
            self._pads = torch.tensor(self.pads, dtype=torch.long).to(input_ids.device, non_blocking=True)
        keep = self.keep(input_ids, self._pads).to(scores.device, non_blocking=True)
        return scores.masked_fill(~keep, float("-inf"))
