"""Distributed backends: one RL client, N LLM servers, no hangs.

The Ray backend (the default, docs/distributed.md): :mod:`.ray_runtime` starts a private
token-authenticated Ray instance or joins a cluster, :mod:`.ray_backend` (``RayLLM``) places one
:mod:`.ray_server` actor per server in a placement-group bundle, and :mod:`.dispatch` splits and
gathers the calls; the servers' gradients meet in a ``torch.distributed`` group
(:mod:`llmgym.llm.collectives`).

The spawn backend (``distributed.backend="spawn"`` and ``llmgym launch``; deprecated), by design:

* **Processes.** ``llmgym launch`` (:mod:`.launch`, one per machine) starts the user's command
  as the RL client on node 0 and ``python -m llmgym.llm.distributed.server`` for each LLM server;
  without a launcher, ``distributed.llm_processes > 1`` spawns the servers as child processes
  (:meth:`DistributedLLM.spawn <.client.DistributedLLM.spawn>`). The user's script runs once, on
  the client; the servers get the backend factory (model config, heads, updater, pickled with
  cloudpickle so classes defined in the script travel too) over the control plane.
* **Control plane** (:mod:`.transport`): one TCP connection per server to the client, mutually
  authenticated with the job's secret (HMAC-SHA256, every frame checked before unpickling; see
  docs/security.md), carrying pickled ``(kind, request id, ...)`` messages. Servers send heartbeats while they
  work, so the client bounds every wait by ``timeout_s`` of silence; a dead server's connection
  drops at once. Server exceptions travel back with rank, host, pid and traceback and are raised
  as ``BackendError``.
* **Data plane** (:mod:`.gradients`): a gloo process group of the servers only (the client is
  never in a collective), rendezvous on a TCPStore hosted by the client (bound to the master address only), timeout ``timeout_s``:
  server 0's trainable weights are broadcast at start, and ``sync_gradients(n)`` (the gradients)
  and ``all_reduce_mean(values, n)`` (any tensor, e.g. TRPO's Fisher-vector products) are
  sample-weighted all-reduces in which an idle server joins with weight 0.
* **Dispatch** (:mod:`.balance`, :mod:`.client`): batches are split by size (characters as a
  proxy for tokens) and answers gathered in the original order.
* **Placement** (:mod:`.placement`): servers per node and GPU blocks per server, pure functions.
* **Selection** (:mod:`.backend`): :func:`~.backend.make_backend` picks local, spawned or launched.
"""
