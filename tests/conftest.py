"""Shared fixtures: tiny offline models, temporary run folders."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from hypothesis import settings

# The same examples on every run: a property failure is reproducible, never a coin toss in CI.
settings.register_profile("llmgym", derandomize=True)
settings.load_profile("llmgym")

# Tiny models run fastest single-threaded, and pytest-xdist runs one worker per core: more
# threads only oversubscribe the cores (measured: a tiny forward 100x slower on a busy machine).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# The tests' own user algorithms, updaters and rewards are named by import path (tests.algorithms...:Class),
# which a config may import only when the user allows it (docs/security.md, "A config is code").
os.environ.setdefault("LLMGYM_ALLOW_IMPORTS", "tests")


@pytest.fixture(scope="session", autouse=True)
def _single_thread_torch():
    """Pin torch to the OMP_NUM_THREADS setting even if torch was imported before this file."""
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_llama():
    """A tiny llama-architecture causal LM and its tokenizer (do not mutate: session scoped)."""
    from llmgym.testing import tiny_causal_lm

    return tiny_causal_lm("llama")


@pytest.fixture(scope="session")
def tiny_gpt2():
    """A tiny GPT-2 causal LM and its tokenizer (session scoped)."""
    from llmgym.testing import tiny_causal_lm

    return tiny_causal_lm("gpt2")


@pytest.fixture(scope="session")
def tiny_t5():
    """A tiny T5 seq2seq LM and its tokenizer (session scoped)."""
    from llmgym.testing import tiny_seq2seq_lm

    return tiny_seq2seq_lm()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A folder holding a saved tiny llama model + tokenizer, loadable by path.

    Four blocks, so that configs adapting the top four with LoRA (``model.lora.layers``) run on it.
    """
    from llmgym.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), num_layers=4)


@pytest.fixture(autouse=True)
def _default_sigterm_after_each_test():
    """Give SIGTERM back its default action after every test.

    A handler left in a pytest worker (seen in CI: the AsyncVectorEnv test hung in
    ``close(terminate=True)``) is inherited by every process the worker forks later, so those ignore
    ``terminate()`` while stuck at exit, and the test that joins them hangs until its timeout.
    """
    yield
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: Python's own helper processes, which live as long as the interpreter and exit with it.
_INTERPRETER_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
#: How long processes that are still exiting at the end of the session get to finish (tests/reliability/
#: test_no_process_left.py shortens it for its inner session, whose leftover never exits).
_EXIT_GRACE_S = float(os.environ.get("LLMGYM_TEST_EXIT_GRACE_S", "10"))


def leftover_children() -> list[psutil.Process]:
    """This process's running descendants (zombies and Python's interpreter helpers excluded)."""
    leftovers = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(helper in " ".join(child.cmdline()) for helper in _INTERPRETER_HELPERS):
                continue
        except psutil.NoSuchProcess:
            continue
        leftovers.append(child)
    return leftovers


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_behind():
    """Fail the session if a test left a child process running; then kill what is left.

    The multiprocessing forkserver and resource tracker are not counted (they exit with the
    interpreter), but what they started is.
    """
    yield
    deadline = time.monotonic() + _EXIT_GRACE_S
    leftovers = leftover_children()
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.2)
        leftovers = leftover_children()
    described = []
    for child in leftovers:
        try:
            described.append(f"pid {child.pid}: {' '.join(child.cmdline())[:200]}")
            child.kill()
        except psutil.NoSuchProcess:
            continue
    assert not described, "the tests left processes running (now killed):\n" + "\n".join(described)
