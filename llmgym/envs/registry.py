"""A registry of named entries, one per kind: datapools, rewards and text metrics.

:mod:`llmgym.envs.datapools`, :mod:`llmgym.envs.rewards` and :mod:`llmgym.text_metrics` each keep
one :class:`Registry`; their ``register_*``, ``list_*`` and lookups are thin calls into it, so they
refuse a taken name and an unknown one with the same typed errors (:class:`~llmgym.errors.ConfigError`
naming the name, the registered ones and the closest matches).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from llmgym.errors import ConfigError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one kind, by name.

    Args:
        kind: What an entry is, for messages (``"datapool"``, ``"reward"``, ``"metric"``).
        fix: The end of the unknown-name message, what the user may do instead (``"Fix: pick one, ..."``).
    """

    def __init__(self, kind: str, fix: str) -> None:
        self.kind = kind
        self.fix = fix
        self._entries: dict[str, T] = {}

    def register(
        self,
        name: str,
        fn: Callable[..., Any] | None,
        entry: Callable[[Callable[..., Any]], T],
        *,
        overwrite: bool = False,
    ) -> Callable[..., Any]:
        """Register ``entry(fn)`` under ``name``, as a call or, with ``fn`` omitted, as a decorator.

        Args:
            name: The name to refer to it by.
            fn: The function registered; ``None`` for the decorator form.
            entry: Builds the stored entry from the function (the function itself, or it with flags).
            overwrite: Whether to replace an entry already registered under ``name``.

        Returns:
            ``fn`` itself, or the decorator (which returns the function it decorates) when ``fn`` is ``None``.

        Raises:
            ConfigError: If ``name`` is taken and ``overwrite`` is false.
        """

        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._entries and not overwrite:
                raise ConfigError(
                    f"{self.kind} name={name!r} is already registered; expected a new name. "
                    "Fix: choose another name or pass overwrite=True."
                )
            self._entries[name] = entry(func)
            return func

        return decorator if fn is None else decorator(fn)

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is registered."""
        return name in self._entries

    def get(self, name: str) -> T:
        """Return the entry registered under ``name``.

        Raises:
            ConfigError: If ``name`` is not registered (:meth:`unknown`).
        """
        if name in self._entries:
            return self._entries[name]
        raise self.unknown(name)

    def unknown(self, name: str) -> ConfigError:
        """Build the error for a name that is not registered.

        Args:
            name: The name asked for.

        Returns:
            A :class:`~llmgym.errors.ConfigError` naming ``name``, the registered names, the closest
            ones, and the registry's ``fix``.
        """
        close = difflib.get_close_matches(name, list(self._entries), n=3)
        hint = f" Did you mean {close}?" if close else ""
        return ConfigError(
            f"{self.kind}={name!r} is not a registered {self.kind}; expected one of {self.names()}.{hint} "
            f"{self.fix}"
        )
