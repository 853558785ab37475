"""Objects a config names by import path, ``'package.module:attribute'`` (a user's algorithm, reward, metric...).

A config is code: importing a module runs it, and calling what it names runs that. So a config (or
the ``config.yaml`` of a run folder someone sends you) may name code outside llmgym only when the
person running llmgym allows it, in the environment, not in the config the guard protects:
``LLMGYM_ALLOW_IMPORTS=mypkg,other.pkg`` (module prefixes, comma-separated; ``*`` allows any). And
what the path names must be what the key expects: a Python function or class (or an object with a
Python ``__call__``), never a builtin such as ``os:system``. See docs/security.md.
"""

from __future__ import annotations

import importlib
import inspect
import os
import warnings
from collections.abc import Callable
from typing import Any

from llmgym.errors import ConfigError

__all__ = ["ALLOW_IMPORTS_ENV", "check_import_allowed", "import_object", "is_import_path", "moved_module"]

#: The environment variable listing the module prefixes outside llmgym a config may import.
ALLOW_IMPORTS_ENV = "LLMGYM_ALLOW_IMPORTS"


def is_import_path(spec: str) -> bool:
    """Whether ``spec`` names an object by import path (``'package.module:attribute'``)."""
    module_name, sep, attribute = spec.partition(":")
    return bool(sep and module_name and attribute)


def check_import_allowed(module_name: str, key: str, spec: str) -> None:
    """Refuse to import ``module_name`` for a config unless it is llmgym's or :data:`ALLOW_IMPORTS_ENV` allows it.

    Args:
        module_name: The module the config names.
        key: The config key or kind that named it, for the message.
        spec: The whole value given, for the message.

    Raises:
        ConfigError: Naming the module and the opt-in.
    """
    allowed = [p.strip() for p in os.environ.get(ALLOW_IMPORTS_ENV, "").split(",") if p.strip()]
    prefixes = ["llmgym", *allowed]
    if "*" in allowed or any(module_name == p or module_name.startswith(p + ".") for p in prefixes):
        return
    top = module_name.split(".")[0]
    raise ConfigError(
        f"{key}={spec!r} makes llmgym import and run code from the module {module_name!r}, outside llmgym; a config "
        f"may do that only when you allow it (a config is code: see docs/security.md). Fix: if you trust that code, "
        f"set {ALLOW_IMPORTS_ENV}={top} in the environment (module prefixes, comma-separated; '*' allows any)."
    )


def _is_python_callable(found: Any) -> bool:
    """A function, method or class written in Python, or an object whose class defines ``__call__`` in Python."""
    if inspect.isfunction(found) or inspect.ismethod(found) or inspect.isclass(found):
        return True
    call = getattr(type(found), "__call__", None)  # noqa: B004 - the class's own __call__, not callable()
    return inspect.isfunction(call)


def import_object(spec: str, key: str, expected: str = "'package.module:function'") -> Any:
    """Import the callable ``spec`` names, once :func:`check_import_allowed` allows its module.

    Args:
        spec: ``'package.module:attribute'`` (a dotted attribute path is allowed after the colon).
        key: The config key or kind that named it (``algorithm.name``, ``reward``), for the messages.
        expected: What it should look like, for the messages (``"'package.module:ClassName' of an
            importable llmgym.Updater subclass"``).

    Returns:
        The object: a Python function, method or class, or an object with a Python ``__call__``.

    Raises:
        ConfigError: ``spec`` is not an import path, its module is not allowed, its import fails, or it
            names something else (a builtin such as ``os:system``, a constant).
    """
    if not is_import_path(spec):
        raise ConfigError(f"{key}={spec!r} must look like 'package.module:attribute'; expected {expected}.")
    module_name, _, attribute = spec.partition(":")
    check_import_allowed(module_name, key, spec)
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{key}={spec!r} could not be imported ({exc}); expected {expected} importable from the current environment."
        ) from exc
    if not _is_python_callable(found):
        raise ConfigError(
            f"{key}={spec!r} is {type(found).__name__} {found!r:.80}, not a Python function or class; expected {expected}."
        )
    return found


def moved_module(old: str, new: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of an old module path kept for one release after its module moved.

    A name read from the old module comes from ``new``, imported only then (``importlib``, so the old
    module draws no import arrow to the new one), with a DeprecationWarning naming the new path.

    Args:
        old: The old module's dotted name (its ``__name__``).
        new: The dotted name of the module that now holds its code.

    Returns:
        ``__getattr__(name)`` for the old module; a name ``new`` lacks, or a dunder name (which the
        import machinery probes), raises AttributeError.
    """

    def __getattr__(name: str) -> Any:
        module = None if name.startswith("__") else importlib.import_module(new)
        if module is None or not hasattr(module, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old} moved to {new}; import {name} from {new}.", DeprecationWarning, stacklevel=2)
        return getattr(module, name)

    return __getattr__
