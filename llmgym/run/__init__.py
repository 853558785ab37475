"""A training run above the algorithms: what ``llmgym train``, ``sweep`` and ``eval`` read and build.

* :mod:`llmgym.run.config_files`: a run's config file, llmgym's own or an RL4LMs task file
  (converted by :mod:`llmgym.compat.rl4lms`).
"""

from llmgym.run.config_files import load_run_config

__all__ = ["load_run_config"]
