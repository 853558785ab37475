"""Classes a config names as ``'package.module:ClassName'`` (``algorithm.name``, ``algorithm.updater``)."""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

from llmgym.errors import ConfigError

__all__ = ["import_class", "is_import_path"]

_T = TypeVar("_T")


def is_import_path(spec: str) -> bool:
    """Whether ``spec`` names a class by import path (``'package.module:ClassName'``)."""
    module_name, sep, class_name = spec.partition(":")
    return bool(sep and module_name and class_name)


def import_class(spec: str, key: str, base: type[_T], what: str) -> type[_T]:
    """Import the class ``spec`` names and check that it subclasses ``base``.

    Args:
        spec: ``'package.module:ClassName'`` (a dotted attribute path is allowed after the colon).
        key: The config key that named it (``algorithm.name``), for the messages.
        base: The class it must subclass.
        what: What it must be, for the messages (``"llmgym.Updater subclass"``).

    Returns:
        The class.

    Raises:
        ConfigError: ``spec`` is not an import path, its import fails, or it is not a subclass of ``base``.
    """
    if not is_import_path(spec):
        raise ConfigError(f"{key}={spec!r} must look like 'package.module:ClassName'.")
    module_name, _, class_name = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in class_name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{key}={spec!r} could not be imported ({exc}); give 'package.module:ClassName' of an importable {what}."
        ) from exc
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ConfigError(f"{key}={spec!r} is not an {what}; it is {found!r:.100}.")
    return found
