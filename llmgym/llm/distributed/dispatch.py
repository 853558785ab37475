"""The backend API over N LLM servers: split each batch, call the servers, gather the answers in order.

:class:`ShardedBackend` holds everything but the calls to the servers (Ray's, in
:mod:`.ray_backend`): ``score``, ``forward``, ``generate`` and ``token_logprobs`` split their batch
across the servers (balanced by token count, counted with a copy of server 0's tokenizer, see
:mod:`~llmgym.llm.distributed.balance`; or, as Lamorel does, in contiguous chunks of equal size)
and return the answers in the original order (sharded servers, ``distributed.sharding=fsdp``: every
server is called, an empty share included, since each call gathers the parameters with a
collective); ``update`` sends every server its share with
``_current_batch_ids`` (the indices of its share in the batch) plus the full keyword arguments, and
returns one result per server. A subclass supplies :meth:`ShardedBackend._request`, which runs one
call per server and raises ``BackendError`` on any failure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from llmgym.errors import BackendError, InputError
from llmgym.llm.distributed.balance import (
    LengthFn,
    character_lengths,
    context_costs,
    gather_in_order,
    share_kwargs,
    split_balanced,
    split_contiguous,
    token_lengths,
)
from llmgym.llm.protocols import CandidateSets, Contexts, HeadOutputs

__all__ = ["Calls", "ShardedBackend"]

#: One call per server rank: ``(method, args, kwargs)``.
Calls = dict[int, tuple[str, tuple[Any, ...], dict[str, Any]]]

#: Relative tolerance when comparing the servers' weight fingerprints after an update.
_FINGERPRINT_RTOL = 1e-5


class ShardedBackend(ABC):
    """The backend methods of ``LocalLLM`` served by ``num_servers`` LLM servers.

    Args:
        num_servers: Number of LLM servers.
        config: The model config the servers were built from.
        module_function_keys: Names of the heads every server carries.
        check_weights: Debug: after every update, compare the servers' weight fingerprints.
        balance_by_tokens: Give the servers shares of equal token counts (reordering the batch);
            ``False``: contiguous chunks of equal size (``numpy.array_split``'s, as Lamorel splits, so
            updaters that loop over minibatches of their share run the same number of steps).
        sharded: The servers shard the model (``distributed.sharding=fsdp``): every call goes to
            every server (an empty share included), and ``save`` and ``parameters_of`` are collectives.
    """

    def __init__(
        self,
        num_servers: int,
        config: Any,
        module_function_keys: Sequence[str],
        check_weights: bool,
        balance_by_tokens: bool = True,
        sharded: bool = False,
    ) -> None:
        self._num_servers = num_servers
        self._sharded = sharded
        self._balance_by_tokens = balance_by_tokens
        self._config = config
        self._module_function_keys = list(module_function_keys)
        self._check_weights = check_weights
        self._tokenizer: Any = None
        self._lengths: LengthFn | None = None

    @abstractmethod
    def _request(self, calls: Calls, collective: bool = False) -> dict[int, Any]:
        """Run one call per rank and return the results by rank (``collective``: the servers meet in a collective)."""

    # ----------------------------------------------------------------- backend API
    @property
    def num_servers(self) -> int:
        """Number of LLM servers."""
        return self._num_servers

    @property
    def config(self) -> Any:
        """The model config the servers were built from."""
        return self._config

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions (heads) every server carries."""
        return list(self._module_function_keys)

    @property
    def tokenizer(self) -> Any:
        """A copy of server 0's tokenizer (fetched once); ``None`` when its backend has none."""
        self._measure()
        return self._tokenizer

    @property
    def model(self) -> Any:
        """Not available: the model lives in the LLM servers.

        Raises:
            BackendError: Always, with the alternatives.
        """
        raise BackendError(
            "LLM.model is not available with several LLM servers: the model lives in the servers. Use "
            "score/forward/generate/update, or distributed.llm_processes=1 to get the in-process model."
        )

    def score(self, contexts: Contexts, candidates: CandidateSets, **kwargs: Any) -> list[Any]:
        """Score the candidates: one tensor of log-probabilities per context, in the order given."""
        _check_lengths("score", contexts, candidates)
        return self._split_call("score", contexts, candidates, (), kwargs)

    def forward(
        self, keys: Sequence[str], contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any
    ) -> HeadOutputs:
        """Run module functions: one dict of outputs per context, in the order given."""
        if candidates is not None:
            _check_lengths("forward", contexts, candidates)
        return self._split_call("forward", contexts, candidates, (list(keys),), kwargs)

    def generate(self, contexts: Contexts, **kwargs: Any) -> list[Any]:
        """Generate from each context; per context, per returned sequence, in the order given."""
        return self._split_call("generate", contexts, None, (), kwargs)

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> list[Any]:
        """Compute per-token log-probabilities of completions given prompts, in the order given."""
        _check_lengths("token_logprobs", prompt_ids, completion_ids, "completion_ids")
        shares = split_balanced(
            [len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)], self.num_servers
        )
        calls: Calls = {
            rank: (
                "token_logprobs",
                ([list(prompt_ids[i]) for i in idx], [list(completion_ids[i]) for i in idx]),
                share_kwargs(kwargs, idx),
            )
            for rank, idx in enumerate(shares)
            if idx or self._sharded
        }
        results = self._request(calls)
        return gather_in_order([shares[r] for r in calls], [results[r] for r in calls], len(prompt_ids))

    def update(self, contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any) -> list[Any]:
        """Run the Updater on every server with its share of the batch; one result per server, by rank.

        Every server is called, also one with an empty share (it must still join the gradient
        all-reduce, with weight 0). Each gets the full ``kwargs`` and ``_current_batch_ids``, the
        positions of its contexts in the batch, to pick its rows of per-sample data.

        Raises:
            BackendError: When a server fails, or (``check_weights``) the servers' weights differ
                after the update (an Updater that does not call ``self.llm.sync_gradients(n)``).
        """
        if candidates is not None:
            _check_lengths("update", contexts, candidates)
        if "_current_batch_ids" in kwargs:
            raise InputError(
                "update(): _current_batch_ids is set by the distributed backend; do not pass it."
            )
        shares = self._shares(contexts, candidates)
        calls: Calls = {
            rank: (
                "update",
                ([contexts[i] for i in idx], None if candidates is None else [candidates[i] for i in idx]),
                {**kwargs, "_current_batch_ids": idx},
            )
            for rank, idx in enumerate(shares)
        }
        results = self._request(calls, collective=True)
        if self._check_weights:
            self._compare_fingerprints()
        return [item for rank in range(self.num_servers) for item in results[rank]]

    def refresh_mask_policy(self) -> None:
        """Snapshot NLPO's mask policy on every server (their weights are equal, so are the snapshots)."""
        self._request(
            {rank: ("refresh_mask_policy", (), {}) for rank in range(self.num_servers)}, collective=True
        )

    def save(self, path: str) -> Any:
        """Save the trainable state from server 0 (all servers hold the same weights).

        The other servers empty their frozen-trunk caches, as server 0 does when it saves, so a run
        resumed from the checkpoint computes exactly what this one computes next. Sharded servers
        all save, each its shards (``torch.distributed.checkpoint``), into the folder server 0 writes.
        """
        if self._sharded:
            every: Calls = {rank: ("save", (str(path),), {}) for rank in range(self.num_servers)}
            return self._request(every, collective=True)[0]
        calls: Calls = {0: ("save", (str(path),), {})}
        calls.update({rank: ("clear_trunk_cache", (), {}) for rank in range(1, self.num_servers)})
        return self._request(calls)[0]

    def load(self, path: str) -> None:
        """Load trainable state on every server (the folder must be readable by every server's node)."""
        self._request({rank: ("load", (str(path),), {}) for rank in range(self.num_servers)}, collective=True)

    def trainable_parameters(self) -> list[Any]:
        """CPU copies of server 0's trainable parameters (they are not the servers' tensors)."""
        return self.parameters_of(0)

    def parameters_of(self, rank: int) -> list[Any]:
        """CPU copies of the trainable parameters of server ``rank`` (to check they agree).

        Sharded servers gather each parameter whole (every server takes part).
        """
        if not 0 <= rank < self.num_servers:
            raise InputError(
                f"parameters_of(rank={rank}): expected a server rank in [0, {self.num_servers})."
            )
        ranks = range(self.num_servers) if self._sharded else [rank]
        calls: Calls = {r: ("trainable_parameters", (), {}) for r in ranks}
        return list(self._request(calls, collective=self._sharded)[rank])

    # ----------------------------------------------------------------- dispatch
    def _split_call(
        self,
        method: str,
        contexts: Contexts,
        candidates: CandidateSets | None,
        leading: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> list[Any]:
        shares = self._shares(contexts, candidates)
        calls: Calls = {}
        for rank, idx in enumerate(shares):
            if not idx and not self._sharded:
                continue
            args: tuple[Any, ...] = (*leading, [contexts[i] for i in idx])
            if candidates is not None:
                args = (*args, [list(candidates[i]) for i in idx])
            calls[rank] = (method, args, share_kwargs(kwargs, idx))
        results = self._request(calls)
        return gather_in_order([shares[r] for r in calls], [results[r] for r in calls], len(contexts))

    def _shares(self, contexts: Contexts, candidates: CandidateSets | None) -> list[list[int]]:
        """Context indices of each server, balanced by token count (one server: no measuring)."""
        if self.num_servers == 1:
            return [list(range(len(contexts)))]
        if not self._balance_by_tokens:
            return split_contiguous(len(contexts), self.num_servers)
        return split_balanced(context_costs(contexts, candidates, self._measure()), self.num_servers)

    def _measure(self) -> LengthFn:
        """How dispatch measures texts: tokens with server 0's tokenizer (fetched once), else characters."""
        if self._lengths is None:
            self._tokenizer = self._request({0: ("tokenizer", (), {})})[0]
            self._lengths = character_lengths if self._tokenizer is None else token_lengths(self._tokenizer)
        return self._lengths

    def _compare_fingerprints(self) -> None:
        prints = self._request({rank: ("fingerprint", (), {}) for rank in range(self.num_servers)})
        first = prints[0]
        for rank in range(1, self.num_servers):
            if not all(
                abs(x - y) <= _FINGERPRINT_RTOL * max(1.0, abs(x), abs(y))
                for x, y in zip(first, prints[rank])
            ):
                raise BackendError(
                    f"the servers' trainable weights differ after update() (server 0 {first}, server {rank} "
                    f"{prints[rank]}); the Updater must call self.llm.sync_gradients(num_samples) after backward "
                    "and before its optimizer step."
                )


def _check_lengths(
    method: str, first: Sequence[Any], second: Sequence[Any], name: str = "candidates"
) -> None:
    if len(first) != len(second):
        raise InputError(
            f"{method}(): got {len(first)} contexts but {len(second)} {name}; pass one {name} entry per context."
        )
