"""A training run above the algorithms: what ``llmgym train``, ``sweep`` and ``eval`` read, build and run.

* :mod:`llmgym.run.config_files`: a run's config file, llmgym's own or an RL4LMs task file
  (converted by :mod:`llmgym.compat.rl4lms`).
* :mod:`llmgym.run.requirements`: what a config needs installed before it runs.
* :mod:`llmgym.run.build`: the LLM, agent and envs of a run, built from its config.
* :mod:`llmgym.run.budgets`: the prompt budget fitted to the model window at the start of a run.
* :mod:`llmgym.run.evaluation` and :mod:`llmgym.run.text_evaluation`: seeded evaluation episodes, and
  the split evaluation of text tasks; :mod:`llmgym.run.fluency`: the fluency of an evaluation's
  completions (perplexity under the reference, distinct-n, KL to the reference).
* :mod:`llmgym.run.trainer`: ``Trainer``, ``run_training``, ``evaluate_run`` (logging, evaluation,
  checkpoints, resume), stopped cleanly by :mod:`llmgym.run.stop_signals`.

Only :func:`load_run_config` is imported here; the other modules are imported by name, so reading a
config does not import torch.
"""

from llmgym.run.config_files import load_run_config

__all__ = ["load_run_config"]
