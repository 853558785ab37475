"""The distributed backend: one RL client, N LLM servers as Ray actors, no hangs.

See docs/distributed.md: :mod:`.ray_runtime` starts a private
token-authenticated Ray instance or joins a cluster, :mod:`.ray_backend` (``RayLLM``) places one
:mod:`.ray_server` actor per server in a placement-group bundle, and :mod:`.dispatch` splits and
gathers the calls; the servers' gradients meet in a ``torch.distributed`` group
(:mod:`llmgym.llm.collectives`).

Faults are errors, never hangs: a server's exception, a killed actor or a lost node is a
``BackendError`` naming the server; a call that outlives ``distributed.call_timeout_s`` is a
``BackendTimeoutError``; every collective is bounded by ``distributed.timeout_s``. Nothing read
from a socket of this project is unpickled by its own code: Ray carries the calls (see docs/security.md).
"""
