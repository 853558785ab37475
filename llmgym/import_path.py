"""Objects a config names by import path, ``'package.module:attribute'`` (a user's algorithm, reward, metric...)."""

from __future__ import annotations

import importlib
from typing import Any

from llmgym.errors import ConfigError

__all__ = ["import_object", "is_import_path"]


def is_import_path(spec: str) -> bool:
    """Whether ``spec`` names an object by import path (``'package.module:attribute'``)."""
    module_name, sep, attribute = spec.partition(":")
    return bool(sep and module_name and attribute)


def import_object(spec: str, key: str, expected: str = "'package.module:function'") -> Any:
    """Import the object ``spec`` names.

    Args:
        spec: ``'package.module:attribute'`` (a dotted attribute path is allowed after the colon).
        key: The config key or kind that named it (``algorithm.name``, ``reward``), for the messages.
        expected: What it should look like, for the messages (``"'package.module:ClassName' of an
            importable llmgym.Updater subclass"``).

    Returns:
        The object.

    Raises:
        ConfigError: ``spec`` is not an import path, or its import fails.
    """
    if not is_import_path(spec):
        raise ConfigError(f"{key}={spec!r} must look like 'package.module:attribute'; expected {expected}.")
    module_name, _, attribute = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{key}={spec!r} could not be imported ({exc}); expected {expected} importable from the current environment."
        ) from exc
    return found
