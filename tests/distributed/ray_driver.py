"""A user script on the Ray backend for the signal tests: builds 2 LLM servers, says where, then waits.

Prints one JSON line (``pids``: every process the driver started, directly or not: the private instance's
Ray processes, the agents its raylet starts, the servers' actor processes and llmgym's reaper) and sleeps
until a signal ends it.
"""

import json
import signal
import sys
import time

import psutil
import ray

from llmgym.config import DistributedConfig, ModelConfig
from llmgym.llm.distributed.backend import make_backend
from llmgym.testing import tiny_causal_lm


def main() -> int:
    # As a terminal's Ctrl-C finds it: a CI runner's background shell may have left SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    llm = make_backend(
        ModelConfig(name="tiny"),
        model=model,
        tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=2, timeout_s=30.0),
    )
    llm.score(["Action:"], [[" go"]])
    node = ray._private.worker._global_node
    pids = [info.process.pid for infos in node.all_processes.values() for info in infos]
    descendants = [child.pid for child in psutil.Process().children(recursive=True)]
    pids = list(dict.fromkeys(pids + [server.pid for server in llm.servers] + descendants))
    print(json.dumps({"pids": pids}), flush=True)
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
