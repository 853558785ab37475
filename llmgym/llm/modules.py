"""Custom module functions: user heads computed on the LLM's hidden states (Lamorel's API)."""

from __future__ import annotations

import abc
import zlib
from collections.abc import Sequence
from typing import Any

import torch

from llmgym.errors import InputError
from llmgym.llm.scoring import ForwardOutputs, Minibatch, reduce_token_scores

__all__ = [
    "ModuleFunction",
    "ValueHead",
    "LogitsHead",
    "ActionHead",
    "mlp",
    "SCORE_KEY",
    "VALUE_KEY",
    "POLICY_KEY",
]

#: The built-in output of ``LLM.forward``: the candidates' log-probs.
SCORE_KEY = "score"
#: The module-function key of the state-value head (:class:`ValueHead`) that actor-critic training reads.
VALUE_KEY = "value"
#: The module-function key of the candidate-action policy head (:class:`ActionHead`); scoring agents
#: and their updaters use its logits instead of the raw scores when the LLM has it.
POLICY_KEY = "policy"


class ModuleFunction(torch.nn.Module, abc.ABC):
    """A head run on the LLM's outputs in the same forward pass as scoring.

    Subclasses build their layers in :meth:`initialize`, which runs once the LLM is known, with
    ``self.llm_config`` (the transformers config) and ``self.hidden_size`` set, under a seed
    derived from ``ModelConfig.seed`` and the module's key, so every LLM server builds identical
    weights. :meth:`forward` returns either a tensor whose first dimension is the number of states
    ``S`` of the minibatch (``forward_outputs.context_hidden.shape[0]``) or a list with one entry
    per item of the minibatch.

    Attributes:
        llm_config: The transformers config of the LLM (set before ``initialize``).
        hidden_size: Width ``H`` of the LLM's hidden states (set before ``initialize``).
    """

    llm_config: Any
    hidden_size: int

    def bind(self, llm_config: Any, hidden_size: int, seed: int, key: str) -> None:
        """Give the module its LLM and build its layers deterministically.

        Args:
            llm_config: The transformers config of the LLM.
            hidden_size: Width of the LLM's hidden states.
            seed: ``ModelConfig.seed``.
            key: The module's name in ``module_functions`` (mixed into the seed).
        """
        self.llm_config = llm_config
        self.hidden_size = hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
            self.initialize()

    def initialize(self) -> None:  # noqa: B027 - optional hook: a parameter-free module needs none
        """Build the module's layers; ``self.llm_config`` and ``self.hidden_size`` are set."""

    @abc.abstractmethod
    def forward(
        self,
        forward_outputs: ForwardOutputs,
        minibatch: Minibatch,
        tokenized_contexts: Sequence[Sequence[int]],
        **kwargs: Any,
    ) -> torch.Tensor | list[Any]:
        """Compute the module's output for one minibatch.

        Args:
            forward_outputs: Hidden states and candidate log-probs of the minibatch.
            minibatch: Which items the pass computed and how they were laid out.
            tokenized_contexts: Token ids of each context of the minibatch.
            **kwargs: Extra keyword arguments given to ``LLM.forward``.

        Returns:
            A tensor ``[S, ...]`` (one row per state) or a list with one entry per item.
        """


def mlp(in_features: int, hidden_sizes: Sequence[int], out_features: int) -> torch.nn.Sequential:
    """Build a Tanh MLP ``in_features -> *hidden_sizes -> out_features``."""
    layers: list[torch.nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [torch.nn.Linear(width, size), torch.nn.Tanh()]
        width = size
    layers.append(torch.nn.Linear(width, out_features))
    return torch.nn.Sequential(*layers)


class _StateMLP(ModuleFunction):
    """An MLP on the last context token's hidden state: what :class:`ValueHead` and :class:`LogitsHead` share.

    Args:
        num_outputs: Width of the last layer.
        hidden_sizes: Widths of the hidden layers (empty: a linear head).
        detach_input: Stop the gradient at the hidden state (the head does not train the LLM).
    """

    def __init__(self, num_outputs: int, hidden_sizes: Sequence[int], detach_input: bool) -> None:
        super().__init__()
        self.num_outputs = num_outputs
        self.hidden_sizes = tuple(hidden_sizes)
        self.detach_input = detach_input

    def initialize(self) -> None:
        """Build the MLP ``H -> hidden_sizes -> num_outputs``."""
        self.net = mlp(self.hidden_size, self.hidden_sizes, self.num_outputs)

    def forward(
        self,
        forward_outputs: ForwardOutputs,
        minibatch: Minibatch,
        tokenized_contexts: Sequence[Sequence[int]],
        **kwargs: Any,
    ) -> torch.Tensor:
        """Outputs ``[S, num_outputs]`` of the states in ``forward_outputs.context_hidden [S, H]``."""
        hidden = forward_outputs.context_hidden.to(next(self.net.parameters()).dtype)
        if self.detach_input:
            hidden = hidden.detach()
        return self.net(hidden)


class ValueHead(_StateMLP):
    """State value: an MLP on the last context token's hidden state.

    Args:
        hidden_sizes: Widths of the hidden layers.
        detach_input: Stop the value loss's gradient at the hidden state, so the critic does not
            train the LLM (a critic on frozen features, sharing the forward pass).

    Returns (forward):
        ``[S]`` values, float32.
    """

    def __init__(self, hidden_sizes: Sequence[int] = (256,), detach_input: bool = False) -> None:
        super().__init__(1, hidden_sizes, detach_input)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Values ``[S]`` of the states (the MLP's one output, squeezed)."""
        values: torch.Tensor = super().forward(*args, **kwargs)
        return values.squeeze(-1)


class LogitsHead(_StateMLP):
    """Logits over a fixed set of outputs (e.g. discrete actions) from the last context token.

    Args:
        num_outputs: Number of logits ``A``.
        hidden_sizes: Widths of the hidden layers (empty: a linear head).

    Returns (forward):
        ``[S, A]`` logits, float32.
    """

    def __init__(self, num_outputs: int, hidden_sizes: Sequence[int] = ()) -> None:
        super().__init__(num_outputs, hidden_sizes, detach_input=False)


class ActionHead(ModuleFunction):
    """Policy logits over each item's candidate actions that start near uniform (GLAM-style head).

    The logit of candidate ``c`` in state ``s`` is

        ``prior_weight * score(c | s) + w . h(s, c)``

    where ``score`` is the LLM's log-prob of the candidate (summed or averaged over its tokens, as
    ``normalize`` says), ``h(s, c)`` the last hidden state of the candidate's tokens read after the
    context, ``w`` a linear map initialised to zero and ``prior_weight`` a learned scalar. With a
    small initial ``prior_weight`` the first policy is close to uniform whatever the LLM's prior
    (so every action is explored), its greedy choice is still the LLM's, and training moves
    probability through both the adapters (``h``) and the head.

    Args:
        prior_weight: Initial weight of the LLM's candidate log-probs (0: exactly uniform).
        normalize: ``"sum"`` or ``"mean"``: how candidate token log-probs make one score.

    Returns (forward):
        One float32 tensor ``[k_i]`` of logits per item (its ``k_i`` candidates).
    """

    def __init__(self, prior_weight: float = 0.1, normalize: str = "sum") -> None:
        super().__init__()
        if normalize not in ("sum", "mean"):
            raise InputError(f"ActionHead normalize={normalize!r} must be 'sum' or 'mean'.")
        self.initial_prior_weight = float(prior_weight)
        self.normalize = normalize

    def initialize(self) -> None:
        """A zero-initialised linear map ``H -> 1`` and the learned prior weight."""
        self.linear = torch.nn.Linear(self.hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.prior_weight = torch.nn.Parameter(torch.tensor(self.initial_prior_weight))

    def forward(
        self,
        forward_outputs: ForwardOutputs,
        minibatch: Minibatch,
        tokenized_contexts: Sequence[Sequence[int]],
        **kwargs: Any,
    ) -> list[torch.Tensor]:
        """Logits of every item's candidates, ``[k_i]`` each, from ``candidate_hidden [C, H]``."""
        if not any(minibatch.candidate_counts):
            raise InputError("ActionHead scores candidate actions: call LLM.forward with candidates.")
        scores = reduce_token_scores(
            forward_outputs.token_logprobs, forward_outputs.token_counts, self.normalize
        )
        hidden = forward_outputs.candidate_hidden.to(self.linear.weight.dtype)
        logits = self.prior_weight * scores.float() + self.linear(hidden).squeeze(-1)
        return list(logits.split(minibatch.candidate_counts))
