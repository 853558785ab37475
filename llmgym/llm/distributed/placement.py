"""The devices of one LLM server, as its Ray bundle gave them (see :mod:`.ray_server`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Placement"]


@dataclass(frozen=True)
class Placement:
    """The devices of one LLM server.

    Attributes:
        rank: Server rank in ``[0, num_servers)`` (the RL client is not counted).
        gpus: This server's GPUs, numbered as it sees them (Ray narrows its ``CUDA_VISIBLE_DEVICES`` to
            them, so ``0..n-1``); empty on CPU.
    """

    rank: int
    gpus: tuple[int, ...] = ()

    @property
    def device(self) -> str:
        """The torch device of the model's first layers: ``"cpu"`` or ``"cuda:0"``.

        A server only sees its own GPUs, so its first GPU is always ``cuda:0``.
        """
        return "cuda:0" if self.gpus else "cpu"

    @property
    def model_parallel(self) -> bool:
        """Whether the model is sharded over several GPUs (Accelerate ``device_map``)."""
        return len(self.gpus) > 1
