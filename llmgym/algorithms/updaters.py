"""PolicyUpdater: the server-side half of every on-policy algorithm, run next to the model.

The client (an :class:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm`) sends one epoch at a time
as an :class:`~llmgym.algorithms.batch.UpdateBatch`: the whole rollout's stored quantities, the
epoch's minibatches as index lists, the policy to recompute and the algorithm's objective. Each
server holds a share of the contexts (``_current_batch_ids``); for every minibatch it computes the
objective's mean loss over its own samples and calls ``llm.sync_gradients(n_own)``, a weighted
all-reduce, so the step equals one step on the full minibatch whatever the number of servers (a
server with no sample joins with weight 0). The updater knows no algorithm: it recomputes the
policy and runs the loss it is sent, so no LLM can be paired with the wrong half. An objective that
is not a loss for the optimizer (a
:class:`~llmgym.algorithms.protocols.NaturalGradientObjective`, TRPO's step) is handed an
:class:`UpdateContext` instead: this server's share, the policy's and the critic's parameters, the
sample-weighted all-reduce ``llm.all_reduce_mean`` and the minibatch loop. Whatever the kind of
action, the policy re-scores it: ``batch.policy.evaluate`` (:mod:`llmgym.agents.policies`), the
distribution the actions were drawn from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from llmgym.algorithms.batch import PolicyOutputs, SampleTargets, UpdateBatch
from llmgym.algorithms.protocols import NaturalGradientObjective
from llmgym.algorithms.user_classes import import_class
from llmgym.config import AlgorithmConfig
from llmgym.errors import InputError
from llmgym.llm.finite import all_finite
from llmgym.llm.modules import VALUE_KEY
from llmgym.llm.precision import LossScaling
from llmgym.llm.updater import Updater

__all__ = ["NONFINITE_WEIGHTS_KEY", "PolicyUpdater", "UpdateContext", "resolve_updater"]

#: The result key by which a server reports trainable weights that hold a NaN or an infinity after an update.
NONFINITE_WEIGHTS_KEY = "nonfinite_weights"

#: A chunk's loss and its detached statistics, from the policy's outputs and the stored targets.
LossFunction = Callable[[PolicyOutputs, SampleTargets], tuple[Tensor, dict[str, Tensor]]]


def _chunks(items: Sequence[int], parts: int) -> list[list[int]]:
    size = max(1, -(-len(items) // parts))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class PolicyUpdater(Updater):
    """Runs an algorithm's objective over the minibatches of an :class:`UpdateBatch`.

    Args:
        config: The ``algorithm`` section: its optimizer settings (``learning_rate``,
            ``head_learning_rate``, ``max_grad_norm``, ``gradient_accumulation_steps``); each
            update scales both learning rates by the batch's ``learning_rate_scale``.
    """

    def __init__(self, config: Optional[AlgorithmConfig] = None) -> None:
        self.config = config if config is not None else AlgorithmConfig()

    def setup(self) -> None:
        """Build AdamW with one learning rate for the LLM and one for the module functions."""
        head_params = {id(p) for p in self.llm.module_functions.parameters()}
        llm_params = [p for p in self.llm.trainable_parameters() if id(p) not in head_params]
        heads = [p for p in self.llm.module_functions.parameters() if p.requires_grad]
        groups: list[dict[str, Any]] = []
        if llm_params:
            groups.append({"params": llm_params, "lr": self.config.learning_rate})
        if heads:
            groups.append({"params": heads, "lr": self.config.head_learning_rate})
        if not groups:
            raise InputError("The LLM has no trainable parameter: add LoRA (model.lora) or a value head.")
        self.optimizer = torch.optim.AdamW(groups, eps=1e-5, weight_decay=0.0)
        self.base_learning_rates = [float(group["lr"]) for group in groups]
        self.params: list[torch.nn.Parameter] = [p for group in groups for p in group["params"]]
        #: fp16 loss scaling (skips steps with inf/NaN gradients); a no-op in bf16 and fp32.
        self.loss_scaling = LossScaling(
            getattr(self.llm, "compute_dtype", torch.float32), self.params[0].device
        )

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, and the fp16 loss scale when there is one."""
        state = super().state_dict()
        scaling = self.loss_scaling.state_dict()
        return {**state, "loss_scaling": scaling} if scaling else state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.loss_scaling.load_state_dict(state.get("loss_scaling", {}))

    # ------------------------------------------------------------------ the update
    def perform_update(
        self,
        contexts: Sequence[str],
        candidates: Optional[Sequence[Sequence[str]]],
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One epoch over ``kwargs["batch"]``, an :class:`~llmgym.algorithms.batch.UpdateBatch`.

        ``candidates`` (this server's share of ``batch.actions.candidate_sets``) are not read: the
        batch's actions carry them, and ``batch.policy`` re-scores them.

        Returns:
            Sample-weighted means of the objective's statistics over this server's samples (and
            ``grad_norm``), ``num_samples``, and :data:`NONFINITE_WEIGHTS_KEY`: 1.0 when a trainable
            weight holds a NaN or an infinity after the update, else 0.0.

        Raises:
            InputError: ``batch`` is missing or not an :class:`UpdateBatch`, or other keyword
                arguments are given.
        """
        del candidates
        batch = kwargs.pop("batch", None)
        if not isinstance(batch, UpdateBatch) or kwargs:
            raise InputError(
                f"{type(self).__name__}.perform_update takes one UpdateBatch as batch=; got batch={type(batch).__name__} "
                f"and {sorted(kwargs)}. Train through an algorithm (llmgym.PPO, llmgym.A2C)."
            )
        for group, base in zip(self.optimizer.param_groups, self.base_learning_rates):  # type: ignore[union-attr]
            group["lr"] = base * batch.learning_rate_scale
        context = UpdateContext(self, contexts, _current_batch_ids, batch)
        if isinstance(batch.objective, NaturalGradientObjective):
            result = {**batch.objective.step(context), "num_samples": context.num_samples}
        else:
            result = context.minibatch_steps(batch.objective.loss, self.params)
        if (
            NONFINITE_WEIGHTS_KEY not in result
        ):  # minibatch_steps reads it with its statistics, in one host copy
            result[NONFINITE_WEIGHTS_KEY] = 0.0 if bool(all_finite(self.params)) else 1.0
        return result


class UpdateContext:
    """One LLM server's view of one update: its share of the samples and what it may do with them.

    Built by :meth:`PolicyUpdater.perform_update`; the generic minibatch loop runs through it, and a
    :class:`~llmgym.algorithms.protocols.NaturalGradientObjective` runs its own step with it.

    Args:
        updater: The server's updater (its LLM, optimizer and config).
        contexts: This server's contexts.
        current_batch_ids: Index of each context in the client's batch.
        batch: The update.

    Attributes:
        batch: The update.
        own: This server's samples, as indices into the client's batch, in increasing order.
    """

    def __init__(
        self,
        updater: PolicyUpdater,
        contexts: Sequence[str],
        current_batch_ids: Sequence[int],
        batch: UpdateBatch,
    ) -> None:
        self._updater = updater
        self._contexts = contexts
        self._position = {int(g): i for i, g in enumerate(current_batch_ids)}
        self.batch = batch
        self.own = sorted(self._position)

    @property
    def num_samples(self) -> int:
        """How many of the batch's samples this server holds (0 is possible)."""
        return len(self.own)

    @property
    def critic_parameters(self) -> list[torch.nn.Parameter]:
        """The value head's trainable parameters (empty without one)."""
        functions = self._updater.llm.module_functions
        if VALUE_KEY not in functions:
            return []
        return [p for p in functions[VALUE_KEY].parameters() if p.requires_grad]

    @property
    def policy_parameters(self) -> list[torch.nn.Parameter]:
        """Every trainable parameter but the critic's: the LLM (or its LoRA adapter) and the action head."""
        critic = {id(p) for p in self.critic_parameters}
        return [p for p in self._updater.params if id(p) not in critic]

    def evaluate(self, require_grad: bool = True, second_order: bool = False) -> PolicyOutputs:
        """The current policy on this server's samples, on the model's device (``[n]`` fields, :attr:`own` order).

        Args:
            require_grad: Keep the autograd graph.
            second_order: Build a graph that can be differentiated twice (Hessian-vector products):
                attention runs on PyTorch's math kernel, the fused ones have no double backward.

        Raises:
            InputError: This server holds no sample.
        """
        if not self.own:
            raise InputError(
                "UpdateContext.evaluate: this server holds no sample of the batch; check num_samples first."
            )
        kernels = sdpa_kernel(SDPBackend.MATH) if second_order else contextlib.nullcontext()
        with kernels:
            outputs = self._evaluate(self.own, require_grad)
        return outputs.to(self._device())

    def _evaluate(self, chunk: Sequence[int], require_grad: bool = True) -> PolicyOutputs:
        """``batch.policy`` on the samples ``chunk`` (indices into the client's batch, all this server's)."""
        batch = self.batch
        return batch.policy.evaluate(
            self._updater.llm,
            [self._contexts[self._position[g]] for g in chunk],
            batch.actions.select(chunk),
            require_grad=require_grad,
            with_reference=batch.objective.kl_coef > 0,
            kl_estimator=batch.kl_estimator,
        )

    def targets(self) -> SampleTargets:
        """The rollout's stored quantities for this server's samples (:attr:`own` order)."""
        return self.batch.targets(self.own, self._device())

    def mean(self, values: Tensor) -> Tensor:
        """The mean over all servers' samples of ``values``, this server's mean over its own samples.

        A collective: every server calls it, in the same order, with a tensor of the same shape
        (zeros when it holds no sample; they get weight 0).
        """
        return self._updater.llm.all_reduce_mean(values, self.num_samples)

    def minibatch_steps(self, loss: LossFunction, parameters: Sequence[torch.nn.Parameter]) -> dict[str, Any]:
        """One optimizer step per minibatch of the batch on ``loss``, moving only ``parameters``.

        For each minibatch: the mean loss over this server's samples in it (in
        ``gradient_accumulation_steps`` chunks), the weighted gradient all-reduce, clipping to
        ``max_grad_norm`` and an AdamW step on ``parameters`` (the others' gradients are dropped).

        Args:
            loss: The chunk's loss and statistics.
            parameters: The parameters to step (a subset of the updater's).

        Returns:
            Sample-weighted means of the statistics over this server's samples (and
            ``grad_norm``), ``num_samples`` (its samples summed over the minibatches) and, when it
            held samples, :data:`NONFINITE_WEIGHTS_KEY` (1.0: a weight is NaN or infinite after the steps).
        """
        updater, cfg = self._updater, self._updater.config
        stepped = {id(p) for p in parameters}
        # Sums stay on the device: one host copy for the whole update, none per chunk (each a GPU sync).
        totals: dict[str, Tensor] = {}
        seen = 0
        device = self._device()
        for minibatch in self.batch.minibatches:
            own = [int(g) for g in minibatch if int(g) in self._position]
            updater.optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
            for chunk in _chunks(own, cfg.gradient_accumulation_steps) if own else []:
                outputs = self._evaluate(chunk)
                chunk_loss, stats = loss(outputs, self.batch.targets(chunk, device))
                updater.loss_scaling.backward(chunk_loss * (len(chunk) / len(own)))
                for key, value in stats.items():
                    _accumulate(totals, key, value, len(chunk), device)
                seen += len(chunk)
            updater.llm.sync_gradients(len(own))
            for param in updater.params:
                if id(param) not in stepped:
                    param.grad = None
            norm = updater.loss_scaling.step(updater.optimizer, list(parameters), cfg.max_grad_norm)  # type: ignore[arg-type]
            if norm is not None:
                _accumulate(totals, "grad_norm", norm, len(own), device)
        if seen:
            # Whether every weight is finite after the steps: one device reduction per update, read back with the
            # statistics; the client stops the run on it before a checkpoint is written (check_finite).
            nonfinite = (~all_finite(updater.params)).to(device=device, dtype=torch.float32) * seen
            totals[NONFINITE_WEIGHTS_KEY] = nonfinite
        sums = torch.stack(list(totals.values())).tolist() if totals else []
        result: dict[str, Any] = {key: value / seen for key, value in zip(totals, sums)} if seen else {}
        result["num_samples"] = seen
        return result

    def _device(self) -> torch.device:
        """Where the policy's outputs land, so the targets go there: the LM head's device (the last GPU of a sharded model)."""
        head_device = getattr(self._updater.llm, "head_device", None)
        return (
            head_device if isinstance(head_device, torch.device) else next(iter(self._updater.params)).device
        )


def resolve_updater(config: AlgorithmConfig) -> Updater:
    """The updater of an ``algorithm`` section: a :class:`PolicyUpdater`, or the user class ``algorithm.updater``.

    The one builder of updaters: :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.updater` and
    :func:`llmgym.run.build.build_llm` both call it. A user class (``'module:Class'``) is instantiated
    with the algorithm config when its constructor accepts it, else without arguments.

    Raises:
        ConfigError: ``algorithm.updater`` cannot be imported or is not an :class:`~llmgym.llm.updater.Updater`.
    """
    if config.updater is None:
        return PolicyUpdater(config)
    cls = import_class(config.updater, "algorithm.updater", Updater, "llmgym.Updater subclass")  # type: ignore[type-abstract]
    try:
        updater: Updater = cls(config)  # type: ignore[call-arg]  # user classes may take the config
    except TypeError:
        updater = cls()
    return updater


def _accumulate(
    totals: dict[str, Tensor], key: str, value: Tensor | float, weight: int, device: torch.device
) -> None:
    """Add ``value * weight`` to ``totals[key]`` as a detached float32 0-d tensor on ``device`` (no host sync)."""
    term = torch.as_tensor(value).detach().to(device=device, dtype=torch.float32, non_blocking=True) * weight
    totals[key] = totals[key] + term if key in totals else term
