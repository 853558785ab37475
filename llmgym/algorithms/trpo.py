"""Trust Region Policy Optimization (Schulman et al., 2015) for LLM agents, all of it in one place.

One update, on a rollout whose GAE advantages are computed (SB3-contrib's ``TRPO.train``, as in
RL4LMs), with ``theta`` the policy's trainable parameters (the LLM or its LoRA adapter, and the
action head) and ``L(theta) = mean(pi_theta(a|s) / pi_old(a|s) * A)`` the surrogate:

1. ``g = grad L`` at the behaviour policy ``theta_old``;
2. ``x ~= F^-1 g`` by ``algorithm.trpo.cg_steps`` conjugate-gradient iterations, where ``F v`` (the
   Fisher-vector product) is the Hessian-vector product of the mean ``KL(pi_old || pi_theta)`` at
   ``theta_old``, plus ``algorithm.trpo.cg_damping * v``;
3. the largest step along ``x`` whose quadratic KL model reaches ``algorithm.trpo.max_kl``:
   ``beta = sqrt(2 * max_kl / (x^T F x))``;
4. a backtracking line search over ``theta_old + shrink^k * beta * x``, ``k < line_search_steps``,
   accepting the first step whose mean KL is at most ``max_kl`` and whose surrogate improves on
   ``L(theta_old)``; if none does, ``theta`` stays ``theta_old``;
5. the critic (the value head alone) trained on ``0.5 * (V - R)^2`` with AdamW at
   ``algorithm.head_learning_rate``, ``algorithm.epochs`` passes in minibatches of
   ``algorithm.minibatch_size``.

The KL is the policy's own (:meth:`~llmgym.agents.policies.Policy.kl`): exact over the candidates
for a candidate policy and, for generated actions, Schulman's ``k3`` estimate on the sampled
sequence (``pi/pi_old - 1 - log(pi/pi_old)``, unbiased and >= 0; its Hessian at ``theta_old`` is
the empirical Fisher of the sampled actions), since the token distributions are not kept.

Steps 1-4 run next to the model on every LLM server (:meth:`TRPOObjective.step`, handed an
:class:`~llmgym.algorithms.updaters.UpdateContext` by the generic
:class:`~llmgym.algorithms.updaters.PolicyUpdater`): each server computes ``g``, every ``F v`` and
every line-search surrogate and KL on its own samples and ``context.mean`` all-reduces them weighted
by samples, so every server takes the same step, the step one process would take.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch
from torch import Tensor

from llmgym.agents.policies import Policy
from llmgym.algorithms.batch import PolicyOutputs, SampleTargets
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.losses import check_same_shape, value_loss
from llmgym.algorithms.on_policy import OnPolicyAlgorithm, minibatch_schedule, weighted_mean
from llmgym.algorithms.protocols import PolicyBackend
from llmgym.algorithms.updaters import UpdateContext
from llmgym.errors import InputError

__all__ = [
    "TRPO",
    "LineSearchResult",
    "TRPOObjective",
    "conjugate_gradient",
    "line_search",
    "surrogate_objective",
    "trpo_step_size",
]


def surrogate_objective(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor) -> Tensor:
    """TRPO's surrogate ``mean(exp(log pi - log pi_old) * A)``, to maximise.

    Args:
        log_probs: ``[B]`` log-probs of the taken actions under the current policy (with grad).
        old_log_probs: ``[B]`` log-probs at collection time.
        advantages: ``[B]`` advantages (not differentiated).

    Returns:
        The 0-d surrogate.

    Raises:
        InputError: On a shape mismatch.
    """
    check_same_shape("log_probs", log_probs, old_log_probs=old_log_probs, advantages=advantages)
    return (torch.exp(log_probs - old_log_probs.detach()) * advantages.detach()).mean()


def conjugate_gradient(
    fvp: Callable[[Tensor], Tensor], b: Tensor, steps: int, residual_tol: float = 1e-10
) -> Tensor:
    """Approximately solve ``F x = b`` for a symmetric positive-definite ``F`` given as products ``F v``.

    Args:
        fvp: ``v -> F v`` for ``[P]`` vectors.
        b: ``[P]`` right-hand side (the policy gradient).
        steps: Iterations at most (``steps >= P`` solves exactly, up to rounding).
        residual_tol: Stop once the squared residual ``|b - F x|^2`` is below this.

    Returns:
        ``[P]`` the solution estimate ``x``, from ``x_0 = 0``.
    """
    x = torch.zeros_like(b)
    residual = b.clone()
    direction = b.clone()
    squared = residual @ residual
    for _ in range(steps):
        if float(squared) < residual_tol:
            break
        product = fvp(direction)
        alpha = squared / (direction @ product)
        x = x + alpha * direction
        residual = residual - alpha * product
        new_squared = residual @ residual
        direction = residual + (new_squared / squared) * direction
        squared = new_squared
    return x


def trpo_step_size(direction: Tensor, fisher_direction: Tensor, max_kl: float) -> float:
    """``beta = sqrt(2 * max_kl / (x^T F x))``: the step along ``x`` whose quadratic KL model is ``max_kl``.

    Args:
        direction: ``[P]`` the search direction ``x``.
        fisher_direction: ``[P]`` its product ``F x``.
        max_kl: Trust-region radius ``delta`` > 0.

    Returns:
        ``beta``, or 0.0 when ``x^T F x <= 0`` (a zero gradient: nothing to step along).
    """
    curvature = float(direction @ fisher_direction)
    return math.sqrt(2.0 * max_kl / curvature) if curvature > 0 else 0.0


@dataclass(frozen=True)
class LineSearchResult:
    """The outcome of :func:`line_search`.

    Attributes:
        fraction: The accepted fraction of the full step (``shrink ** k``), 0.0 if none was accepted.
        trials: Steps evaluated.
        improvement: Surrogate gain of the accepted step (0.0 if none).
        kl: Mean KL of the accepted step (0.0 if none).
    """

    fraction: float
    trials: int
    improvement: float
    kl: float

    @property
    def accepted(self) -> bool:
        """Whether a step was taken."""
        return self.fraction > 0


def line_search(
    evaluate: Callable[[float], tuple[float, float]], max_kl: float, steps: int, shrink: float
) -> LineSearchResult:
    """Backtrack from the full step: the first fraction ``shrink ** k`` that keeps the trust region and improves.

    Args:
        evaluate: ``fraction -> (surrogate improvement, mean KL)`` of ``theta_old + fraction * full_step``.
        max_kl: Largest accepted mean KL.
        steps: Fractions tried at most (``1, shrink, shrink^2, ...``).
        shrink: Factor in ``(0, 1)`` between consecutive fractions.

    Returns:
        The first fraction with ``kl <= max_kl`` and ``improvement > 0``, or fraction 0.0 if none.
    """
    fraction = 1.0
    for trial in range(1, steps + 1):
        improvement, kl = evaluate(fraction)
        if kl <= max_kl and improvement > 0:
            return LineSearchResult(fraction, trial, improvement, kl)
        fraction *= shrink
    return LineSearchResult(0.0, steps, 0.0, 0.0)


def _flat_grad(output: Tensor, parameters: Sequence[Tensor], create_graph: bool = False) -> Tensor:
    """``[P]`` gradient of a 0-d ``output`` w.r.t. ``parameters`` (zeros where unused), graph kept."""
    grads = torch.autograd.grad(
        output, list(parameters), retain_graph=True, create_graph=create_graph, allow_unused=True
    )
    return torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, parameters)]
    )


def _flatten(parameters: Sequence[Tensor]) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters])


def _assign(parameters: Sequence[Tensor], flat: Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for param in parameters:
            param.copy_(flat[offset : offset + param.numel()].view_as(param))
            offset += param.numel()


@dataclass(frozen=True)
class TRPOObjective:
    """TRPO's server-side step: the natural-gradient policy step in a KL trust region, then the critic.

    A :class:`~llmgym.algorithms.protocols.NaturalGradientObjective`: the updater hands it the
    whole update (:meth:`step`).

    Attributes:
        max_kl: Trust-region radius ``delta`` on the mean ``KL(pi_old || pi)``.
        cg_steps: Conjugate-gradient iterations.
        cg_damping: ``lambda`` in ``(F + lambda I) x = g``.
        line_search_steps: Backtracking trials at most.
        line_search_shrink: Factor between trials.
        kl_coef: ``c_kl``: the surrogate is ``L - c_kl KL(pi || pi_ref)`` (0: no reference pass).
    """

    max_kl: float
    cg_steps: int
    cg_damping: float
    line_search_steps: int
    line_search_shrink: float
    kl_coef: float

    def policy_objective(self, outputs: PolicyOutputs, targets: SampleTargets) -> Tensor:
        """The 0-d surrogate to maximise over a chunk: ``mean(ratio * A) - c_kl * mean(KL(pi || pi_ref))``."""
        surrogate = surrogate_objective(outputs.log_probs, targets.old_log_probs, targets.advantages)
        return surrogate - self.kl_coef * outputs.ref_kl.mean()

    def critic_loss(self, outputs: PolicyOutputs, targets: SampleTargets) -> tuple[Tensor, dict[str, Tensor]]:
        """The critic's ``0.5 * mean((V - R)^2)`` and its statistics (``value_loss``, ``explained_variance``)."""
        loss, stats = value_loss(outputs.values, targets.returns)
        return loss, {"value_loss": loss.detach(), "explained_variance": stats["explained_variance"]}

    def step(self, context: UpdateContext) -> dict[str, float]:
        """The policy's trust-region step (:meth:`policy_step`), then ``epochs`` critic passes.

        Returns:
            The policy step's statistics and the critic's sample-weighted ``value_loss``,
            ``explained_variance`` and ``grad_norm``.
        """
        stats = self.policy_step(context)
        if context.critic_parameters:
            critic = context.minibatch_steps(self.critic_loss, context.critic_parameters)
            stats.update({key: value for key, value in critic.items() if key != "num_samples"})
        return stats

    def policy_step(self, context: UpdateContext) -> dict[str, float]:
        """Steps 1-4 of the module docstring on the policy's parameters, identical on every server.

        Returns:
            ``policy_objective`` (the surrogate at ``theta_old``), ``policy_improvement`` and
            ``approx_kl`` (of the accepted step, 0 if none), ``step_fraction`` (0: rejected),
            ``line_search_trials``, ``step_size`` (``beta``), this server's mean ``entropy`` and the
            mean ``kl_ref`` to the reference over all servers (0 without the KL term).

        Raises:
            InputError: The policy has no trainable parameter.
        """
        params = context.policy_parameters
        if not params:
            raise InputError(
                "TRPO found no policy parameter to train: add LoRA (model.lora) or an action head."
            )
        policy = context.batch.policy
        start = _flatten(params)
        zeros = torch.zeros_like(start)
        old: Optional[PolicyOutputs] = None
        kl_gradient: Optional[Tensor] = None
        own_gradient, own_objective, entropy = zeros, start.new_zeros(()), 0.0
        if context.num_samples:
            outputs = context.evaluate(second_order=True)
            old = outputs.detach()
            objective = self.policy_objective(outputs, context.targets())
            own_gradient = _flat_grad(objective, params)
            kl_gradient = _flat_grad(policy.kl(old, outputs).mean(), params, create_graph=True)
            own_objective, entropy = objective.detach(), float(outputs.entropy.detach().mean())
        gradient = context.mean(own_gradient)
        own_ref_kl = old.ref_kl.mean().to(start).reshape(1) if old is not None else start.new_zeros(1)
        ref_kl = float(context.mean(own_ref_kl)[0])

        def fisher_product(vector: Tensor) -> Tensor:
            own = _flat_grad(kl_gradient @ vector, params) if kl_gradient is not None else zeros
            return context.mean(own) + self.cg_damping * vector

        direction = conjugate_gradient(fisher_product, gradient, self.cg_steps)
        step_size = trpo_step_size(direction, fisher_product(direction), self.max_kl)
        full_step = step_size * direction
        baseline = float(context.mean(own_objective))

        def evaluate(fraction: float) -> tuple[float, float]:
            _assign(params, start + fraction * full_step)
            own = start.new_zeros(2)
            if old is not None:
                new = context.evaluate(require_grad=False)
                objective = self.policy_objective(new, context.targets())
                own = torch.stack([objective, policy.kl(old, new).mean()]).to(start)
            surrogate, kl = context.mean(own).tolist()
            return surrogate - baseline, kl

        result = line_search(evaluate, self.max_kl, self.line_search_steps, self.line_search_shrink)
        _assign(params, start + result.fraction * full_step)
        return {
            "policy_objective": baseline,
            "policy_improvement": result.improvement,
            "approx_kl": result.kl,
            "step_fraction": result.fraction,
            "line_search_trials": float(result.trials),
            "step_size": step_size,
            "entropy": entropy,
            "kl_ref": ref_kl,
        }


class TRPO(OnPolicyAlgorithm):
    """Trust Region Policy Optimization: one natural-gradient step in a KL trust region per rollout.

    Built and used as :class:`~llmgym.algorithms.ppo.PPO` is. ``algorithm.trpo``: ``max_kl``, ``cg_steps``,
    ``cg_damping``, ``line_search_steps`` and ``line_search_shrink`` shape the policy step;
    ``epochs``, ``minibatch_size`` and ``head_learning_rate`` the critic's. ``learning_rate``,
    ``algorithm.ppo`` (the clips and ``target_kl``) and ``entropy_coef`` do not apply.
    """

    name: ClassVar[str] = "trpo"

    def objective(self) -> TRPOObjective:
        """TRPO's step with this config's trust region, conjugate gradient and line search."""
        trpo = self.config.trpo
        return TRPOObjective(
            trpo.max_kl,
            trpo.cg_steps,
            trpo.cg_damping,
            trpo.line_search_steps,
            trpo.line_search_shrink,
            self.kl.loss_coef,
        )

    def train(self, llm: PolicyBackend, buffer: RolloutBuffer, policy: Policy) -> dict[str, float]:
        """One ``llm.update``: the policy step on the whole rollout, then the critic's ``epochs`` passes.

        Returns:
            The update's sample-weighted statistics, ``epochs`` and the rollout's advantage, value
            and return statistics.
        """
        rollout = self.rollout_targets(buffer)
        cfg = self.config
        critic_minibatches = [
            minibatch
            for _ in range(cfg.epochs)
            for minibatch in minibatch_schedule(len(rollout), cfg.minibatch_size, self.generator)
        ]
        batch = rollout.update_batch(
            self.objective(), policy, critic_minibatches, self.learning_rate_scale(), self.kl_estimator
        )
        stats = weighted_mean(llm.update(rollout.batch.prompts, batch.actions.candidate_sets, batch=batch))
        return {**stats, "epochs": float(cfg.epochs), **rollout.statistics()}
