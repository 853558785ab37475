"""A run's config file: llmgym's own, or an RL4LMs task file converted strictly.

:func:`llmgym.config.load_config` knows only llmgym's schema; the commands that take a config
argument (``llmgym train``, ``config``, ``sft``, ``sweep``, ``eval``) read it with
:func:`load_run_config`, which converts an RL4LMs file first (:mod:`llmgym.compat.rl4lms`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Optional

from llmgym.compat.rl4lms import convert_rl4lms_config, is_rl4lms_config
from llmgym.config import Config, load_config, read_config_file

__all__ = ["load_run_config"]


def load_run_config(path: Optional[str | os.PathLike[str]], overrides: Sequence[str] = ()) -> Config:
    """:func:`~llmgym.config.load_config` of a config file that may be an RL4LMs task config.

    An RL4LMs file (:func:`~llmgym.compat.rl4lms.is_rl4lms_config`) is converted strictly: a key
    without an exact llmgym equivalent is a :class:`~llmgym.errors.ConfigError` naming it (``llmgym
    convert --approximate`` writes an approximate llmgym file instead). A ``model.name=`` override
    is the model whose EOS token the conversion uses.

    Args:
        path: A YAML file or the name of a shipped config; ``None`` starts from the defaults.
        overrides: ``section.key=value`` strings applied after the file, in order.

    Returns:
        The validated config.

    Raises:
        ConfigError: As :func:`~llmgym.config.load_config`, or an RL4LMs key without an exact equivalent.
    """
    if path is None:
        return load_config(None, list(overrides))
    mapping, source = read_config_file(path)
    if is_rl4lms_config(mapping):
        model = next((o.partition("=")[2] for o in reversed(overrides) if o.startswith("model.name=")), None)
        mapping = convert_rl4lms_config(mapping, model_name=model).config
    return load_config(mapping, list(overrides), source=source)
