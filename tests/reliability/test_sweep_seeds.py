"""``--seeds`` with a huge range is refused before any list is built.

Before, ``llmgym sweep CFG --seeds 0-2000000000`` built the whole list (24 GB) and was OOM-killed.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from llmgym.errors import ConfigError
from llmgym.stats import MAX_LIST_VALUES, parse_seeds


@pytest.mark.timeout(20)
def test_huge_seed_range_is_refused_at_once() -> None:
    with pytest.raises(
        ConfigError, match=r"--seeds '0-2000000000' lists 2000000001 values, more than the 10000"
    ):
        parse_seeds("0-2000000000")
    with pytest.raises(ConfigError, match=r"lists 10001 values"):
        parse_seeds(f"0-{MAX_LIST_VALUES - 1},{MAX_LIST_VALUES}")
    assert (
        len(parse_seeds(f"0-{MAX_LIST_VALUES - 1}")) == MAX_LIST_VALUES
    )  # at the bound, duplicates found fast


@pytest.mark.timeout(60)
def test_cli_sweep_with_a_huge_range_exits_with_the_error_in_bounded_memory(tmp_path) -> None:
    def limit_memory() -> None:  # 2 GiB: the old code needed ~24 GB
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "llmgym.cli", "sweep", "quickstart", "--seeds", "0-2000000000"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=limit_memory,
        timeout=50,
    )
    assert proc.returncode != 0
    assert "lists 2000000001 values" in proc.stderr
