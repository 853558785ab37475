"""The RL client of the launch tests: run by `llmgym launch` (argv: output JSON path, mode: fake, hang or sigkill)."""

import json
import os
import signal
import sys
import time

from llmgym.llm.distributed.client import DistributedLLM
from llmgym.llm.distributed.launch import launch_info
from tests.distributed.fakes import FakeFactory


def main(out_path: str, mode: str) -> int:
    info = launch_info()
    assert info is not None, "not launched"
    llm = DistributedLLM.connect(
        FakeFactory(), info.llm_processes, host=info.master_addr, port=info.master_port, timeout_s=info.timeout_s
    )
    scores = llm.score(["You see a red ball", "Action:", "go"], [[" left", " right"], [" up"], [" to"]])
    record = {
        "client_pid": os.getpid(),
        "servers": [[s.rank, s.host, s.pid] for s in llm.servers],
        "scores": [s.tolist() for s in scores],
    }
    with open(out_path + ".tmp", "w") as fh:
        json.dump(record, fh)
    os.replace(out_path + ".tmp", out_path)
    if mode == "hang":
        time.sleep(120)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
