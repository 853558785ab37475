"""JSON Lines files of a run folder (``metrics.jsonl``, ``episodes.jsonl``), read back record by record.

Records are written one JSON object per line, some with ``ensure_ascii=False`` (``episodes.jsonl``),
so a recorded text may hold U+0085, U+2028 or U+2029, which ``str.splitlines`` takes for line
ends: lines are split on LF (newline) only. An append cut short (a crash, a full disk) leaves a torn
last line without its LF (newline): it is left out with a warning, as resume drops it. Any other line
that is not a JSON object of the expected shape is a :class:`~llmgym.errors.RunFileError` naming
the file and the line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from llmgym.atomic_io import write_text_atomic
from llmgym.errors import RunFileError

__all__ = ["json_lines", "read_jsonl", "keep_records"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def json_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: split on LF (newline) only, blank lines left out.

    Args:
        text: The file's content.
    """
    return [line for line in text.split("\n") if line.strip()]


def read_jsonl(path: str | Path, parse: Callable[[dict[str, Any]], T], what: str) -> list[T]:
    """The records of a JSON Lines file, each parsed by ``parse``.

    Args:
        path: The file.
        parse: Builds a record from a line's JSON object; raises ``ValueError``, ``TypeError`` or
            ``KeyError`` (its message says what was expected) when the object is not one.
        what: What each line should hold, for messages (e.g. ``"a metrics record"``).

    Returns:
        The records, in order (a torn last line left out).

    Raises:
        RunFileError: When the file cannot be read, or a line (other than a torn last one) is not
            valid JSON or not ``what``; the message names the file and the line.
    """
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{target} cannot be read ({exc}); restore it or remove it.") from exc
    lines = text.split("\n")
    records: list[T] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            if number == len(lines):  # no "\n" after it: an append cut short
                logger.warning(
                    "Left out the torn last line %d of %s (an interrupted write; resume drops it too).",
                    number,
                    target,
                )
                break
            raise RunFileError(
                f"{target}:{number} is not valid JSON ({exc}); each line must hold {what}. Fix or remove that line."
            ) from exc
        if not isinstance(data, dict):
            raise RunFileError(
                f"{target}:{number} holds a JSON {type(data).__name__}, not {what}. Fix or remove that line."
            )
        try:
            records.append(parse(data))
        except (ValueError, TypeError, KeyError) as exc:
            raise RunFileError(f"{target}:{number} is not {what} ({exc}). Fix or remove that line.") from exc
    return records


def keep_records(
    path: str | Path, records: Sequence[T], keep: Callable[[T], bool], line: Callable[[T], str]
) -> int:
    """Rewrite a JSON Lines file with only the records ``keep`` accepts, atomically.

    A resumed run drops the records its logs hold past the checkpoint it resumed from. The file is
    left as it is when every record stays.

    Args:
        path: The file.
        records: Its records, as read.
        keep: Whether a record stays.
        line: A record's line, without its newline.

    Returns:
        The number of records dropped.
    """
    kept = [record for record in records if keep(record)]
    if len(kept) != len(records):
        write_text_atomic(Path(path), "".join(f"{line(record)}\n" for record in kept))
    return len(records) - len(kept)
