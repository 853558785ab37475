"""Distributed backend: one RL client, N LLM servers (see ``docs/distributed.md`` in the module docs below).

* :mod:`.placement` — servers per node and GPUs per server (pure functions).
* :mod:`.balance` — splitting a batch across servers and gathering answers in order.
* :mod:`.transport` — the control plane: authenticated pickled messages over TCP.
* :mod:`.gradients` — start broadcast and sample-weighted gradient all-reduce (gloo, servers only).
* :mod:`.server` — a server process; :mod:`.client` — :class:`DistributedLLM`, the client side.
* :mod:`.backend` — :func:`make_backend`, which ``LLM`` calls to pick local or distributed.
* :mod:`.launch` — ``llmgym launch``.
"""
