"""Lamorel's README custom-module example on llmgym: an MLP head and a TestUpdater.

``TwoLayersMLPModuleFn`` is a :class:`llmgym.ModuleFunction` on the LLM's last context token;
``TestUpdater`` is an :class:`llmgym.Updater` that trains only that head with a cross-entropy loss
against labels passed to ``llm.update``. The head runs through ``llm.forward`` (alone or with the
built-in ``"score"`` in the same forward pass). ``llmgym.compat.lamorel`` runs Lamorel's original
code unchanged; this is the same example written against llmgym's own API.

Run::

    python examples/custom_module.py              # SmolLM2-135M-Instruct
    python examples/custom_module.py --updates 3
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch

import llmgym
from llmgym.llm.scoring import ForwardOutputs, Minibatch


class TwoLayersMLPModuleFn(llmgym.ModuleFunction):
    """An MLP ``H -> 128 -> 128 -> n_outputs`` on the hidden state of each context's last token.

    Args:
        n_outputs: Number of outputs.
    """

    def __init__(self, n_outputs: int) -> None:
        super().__init__()
        self._n_outputs = n_outputs

    def initialize(self) -> None:
        """Build the MLP (``self.hidden_size`` is the LLM's width)."""
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(self.hidden_size, 128),
            torch.nn.Linear(128, 128),
            torch.nn.Linear(128, self._n_outputs),
        )

    def forward(
        self,
        forward_outputs: ForwardOutputs,
        minibatch: Minibatch,
        tokenized_contexts: Sequence[Sequence[int]],
        **kwargs: Any,
    ) -> torch.Tensor:
        """Outputs ``[S, n_outputs]``, one row per context of the minibatch."""
        return self.mlp(forward_outputs.context_hidden.float())


class TestUpdater(llmgym.Updater):
    """Trains the ``mlp_head`` module only, with cross-entropy against ``labels[_current_batch_ids]``."""

    def setup(self) -> None:
        """Adam on the head's parameters (the LLM stays as it is)."""
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.adam = torch.optim.Adam(self.llm.module_functions["mlp_head"].parameters())
        self.optimizer = self.adam  # saved in checkpoints by llm.save

    def perform_update(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None,
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One gradient step; returns the loss."""
        output = self.llm.forward(["mlp_head"], contexts, require_grad=True)
        stacked_output = torch.stack([o["mlp_head"] for o in output]).cpu()
        loss = self.loss_fn(stacked_output, kwargs["labels"][list(_current_batch_ids)])
        loss.backward()
        self.llm.sync_gradients(len(contexts))  # averages gradients across LLM servers (no-op in-process)
        self.adam.step()
        self.adam.zero_grad()
        return {"loss": loss.item()}


def main(argv: list[str] | None = None) -> list[float]:
    """Run the head, then train it; returns the loss of every update."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="model name or local folder")
    parser.add_argument("--updates", type=int, default=20, help="number of llm.update calls")
    args = parser.parse_args(argv)

    contexts = ["This is an examples prompt, continue it with", "Another prompt, continue it with"]
    labels = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    with llmgym.LLM(
        args.model, module_functions={"mlp_head": TwoLayersMLPModuleFn(2)}, updater=TestUpdater
    ) as llm:
        direct = llm.forward(["mlp_head"], contexts)  # the head alone: one [2] tensor per context
        print("mlp_head:", [o["mlp_head"].tolist() for o in direct])
        both = llm.forward(["score", "mlp_head"], contexts, [[" a sentence", " another sentence"]] * 2)
        print("score:", [o["score"].tolist() for o in both])
        losses = []
        for step in range(args.updates):
            result = llm.update(contexts, labels=labels)  # one result per LLM server
            losses.append(float(sum(r["loss"] for r in result) / len(result)))
            print(f"update {step + 1:>3}  loss {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
