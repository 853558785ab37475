"""Real strings through Gymnasium's shared memory for :class:`~llmgym.envs.core.TextSpace`.

:class:`gymnasium.vector.AsyncVectorEnv` with ``shared_memory=True`` (its default, and what
``gymnasium.make_vec(..., vectorization_mode="async")`` builds) reads its observation buffer once,
when it is built, and returns what :func:`~gymnasium.vector.utils.read_from_shared_memory` gave it
then. For a ``Box`` that is a NumPy view of the buffer, which the workers' writes update; for a
``Text`` space, Gymnasium (1.x) decodes the buffer there and then into a tuple of strings, so every
later observation reads as the first, empty buffer: the charset's first character repeated up to
``max_length`` (``"aaaa..."``). Its encoding also maps characters through the space's charset, so a
character outside it cannot be written at all.

:func:`register_text_shared_memory` gives a ``Text`` subclass (llmgym registers
:class:`~llmgym.envs.core.TextSpace`; plain ``Text`` spaces keep Gymnasium's handlers) handlers that
store each env's string as its length followed by its Unicode code points, ``max_length + 1``
``int32`` per env, and read it back as a :class:`SharedTextView`: a sequence of strings decoded on
each access, so the observations follow the workers' writes as a NumPy view does. A copy, deep copy
or pickle of a view is a tuple of strings, which is what ``AsyncVectorEnv(copy=True)`` (the default)
returns and the type ``SyncVectorEnv`` returns. A string longer than ``max_length`` is an
:class:`~llmgym.errors.InputError` (raised in the worker, re-raised by ``AsyncVectorEnv`` in the
parent), never silently truncated.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, overload

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from llmgym.errors import InputError

__all__ = ["SharedTextView", "register_text_shared_memory"]

# UTF-32 is one code unit per code point, so a str of length k encodes to exactly k int32;
# "surrogatepass" lets the lone surrogates a Python str may hold through too.
_CODEC = "utf-32-le"
_ERRORS = "surrogatepass"
_WIRE_DTYPE = np.dtype("<i4")


class SharedTextView(Sequence[str]):
    """The strings of ``n`` envs in a shared-memory buffer, decoded on each access.

    Row ``i`` of the buffer holds env ``i``'s string: its length, then its code points. A copy,
    deep copy or pickle is a ``tuple`` of the strings at that moment, and a view equals the tuple of
    its strings.

    Args:
        rows: ``int32`` array of shape ``(n, max_length + 1)`` over the shared buffer.
    """

    def __init__(self, rows: np.ndarray) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(_decode(row) for row in self._rows[index])
        return _decode(self._rows[index])

    def __iter__(self) -> Iterator[str]:
        return (_decode(row) for row in self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SharedTextView):
            other = tuple(other)
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple(self) == other

    __hash__ = None  # type: ignore[assignment]  # its strings change with the buffer

    def __reduce__(self) -> tuple[type[tuple], tuple[tuple[str, ...]]]:
        """Copy, deep-copy and pickle as the tuple of the current strings."""
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return f"SharedTextView({tuple(self)!r})"


def _decode(row: np.ndarray) -> str:
    """Decode one buffer row: ``row[0]`` code points from ``row[1]`` on."""
    return row[1 : 1 + int(row[0])].astype(_WIRE_DTYPE, copy=False).tobytes().decode(_CODEC, _ERRORS)


def _rows(space: Text, shared_memory: Any) -> np.ndarray:
    """The shared buffer as one row of ``max_length + 1`` ``int32`` per env."""
    return np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(-1, space.max_length + 1)


def _create(space: Text, n: int = 1, ctx: ModuleType = mp) -> Any:
    """Allocate ``n`` rows of ``max_length + 1`` ``int32`` (the length, then the code points)."""
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))  # type: ignore[attr-defined]


def _read(space: Text, shared_memory: Any, n: int = 1) -> SharedTextView:
    """Return a view that decodes the ``n`` strings of the buffer on each access."""
    return SharedTextView(_rows(space, shared_memory)[:n])


def _write(space: Text, index: int, value: Any, shared_memory: Any) -> None:
    """Write env ``index``'s string into its row.

    Raises:
        InputError: If ``value`` is not a ``str`` or is longer than the space's ``max_length``.
    """
    if not isinstance(value, str):
        raise InputError(
            f"observation {value!r:.100} of a {type(space).__name__} is a {type(value).__name__}; expected a str. "
            "Fix: make the env return text for this part of its observation."
        )
    if len(value) > space.max_length:
        raise InputError(
            f"an observation text of {len(value)} characters ({value!r:.60}) is longer than its space's "
            f"max_length={space.max_length}, so it does not fit the vector env's shared memory. Fix: give the "
            f"env's observation space a max_length of at least {len(value)}, or pass shared_memory=False."
        )
    codes = np.frombuffer(value.encode(_CODEC, _ERRORS), dtype=_WIRE_DTYPE)
    row = _rows(space, shared_memory)[index]
    row[0] = codes.size
    row[1 : 1 + codes.size] = codes


def register_text_shared_memory(space_type: type[Text]) -> None:
    """Register this module's shared-memory handlers for ``space_type`` (a ``Text`` subclass).

    Gymnasium's ``create_shared_memory``, ``read_from_shared_memory`` and ``write_to_shared_memory``
    dispatch on the space's class, so only spaces of ``space_type`` (and its subclasses) use them.

    Args:
        space_type: The ``Text`` subclass, e.g. :class:`~llmgym.envs.core.TextSpace`.
    """
    create_shared_memory.register(space_type, _create)
    # Gymnasium annotates reads as dict | tuple | ndarray; a tuple could not follow the buffer.
    read_from_shared_memory.register(space_type, _read)  # type: ignore[arg-type]
    write_to_shared_memory.register(space_type, _write)
