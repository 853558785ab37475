"""Classes a config names as ``'package.module:ClassName'`` (``algorithm.name``, ``algorithm.updater``)."""

from __future__ import annotations

from typing import TypeVar

from llmgym.errors import ConfigError
from llmgym.import_path import import_object, is_import_path

__all__ = ["import_class", "is_import_path"]

_T = TypeVar("_T")


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
    found = import_object(spec, key, f"'package.module:ClassName' of an {what}")
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ConfigError(f"{key}={spec!r} is not an {what}; it is {found!r:.100}.")
    return found
