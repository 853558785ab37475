"""Write docs/env-arguments.md: every shipped env class, its ids and its constructor arguments.

The arguments and their meaning come from each class's docstring (its ``Args:`` section), read
from the source without importing the optional suites, so the page cannot drift from the code::

    python scripts/env_arguments_doc.py           # rewrite docs/env-arguments.md
    python scripts/env_arguments_doc.py --check   # exit 1 if the page is out of date (run by the tests)
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import sys
from collections import defaultdict
from pathlib import Path

from llmgym.envs.registration import ENV_SPECS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "env-arguments.md"

HEADER = """# Env arguments

Every env registered by llmgym, grouped by the class that implements it, with the arguments its
constructor takes. Pass them as `gymnasium.make(ID, **kwargs)` in Python, or as `env.kwargs` in a
config (`llmgym train quickstart env.kwargs.reward_shaping=0.1`). An id already fixes some of
them (its defaults column); `env.kwargs` overrides those too. Generated from the classes' docstrings
by `python scripts/env_arguments_doc.py` (a test checks that this page is up to date).
"""


def class_docstring(entry_point: str) -> str:
    """The docstring of ``module:Class``, read from the module's source without importing it."""
    module, name = entry_point.split(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SystemExit(f"cannot find the module of {entry_point}")
    tree = ast.parse(Path(spec.origin).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return inspect.cleandoc(ast.get_docstring(node) or "")


def args_section(doc: str) -> list[str]:
    """The lines of the ``Args:`` section of a Google-style docstring, dedented."""
    lines = doc.splitlines()
    if "Args:" not in lines:
        return []
    out = []
    for line in lines[lines.index("Args:") + 1 :]:
        if line and not line.startswith(" "):
            break
        out.append(line[4:] if line.startswith("    ") else line.strip())
    while out and not out[-1].strip():
        out.pop()
    return out


def render() -> str:
    """The page's Markdown."""
    by_class: dict[str, list] = defaultdict(list)
    for entry in ENV_SPECS:
        by_class[entry.entry_point].append(entry)
    parts = [HEADER]
    for entry_point, entries in by_class.items():
        doc = class_docstring(entry_point)
        summary = doc.split("\n\n", 1)[0].replace("\n", " ")
        parts.append(f"## `{entry_point.split(':')[1]}` (`{entry_point.replace(':', '.')}`)\n\n{summary}\n")
        if len(entries) <= 6:
            rows = [
                f"| `{e.id}` | {', '.join(f'`{k}={v!r}`' for k, v in e.kwargs.items()) or '-'} |"
                for e in entries
            ]
            parts.append("| id | defaults |\n| --- | --- |\n" + "\n".join(rows) + "\n")
        else:
            first, last = entries[0].id, entries[-1].id
            parts.append(f"{len(entries)} ids, from `{first}` to `{last}` (`llmgym envs` lists them).\n")
        args = args_section(doc)
        parts.append("Arguments:\n\n```text\n" + "\n".join(args) + "\n```\n" if args else "No arguments.\n")
    return "\n".join(parts)


def main() -> int:
    """Write the page, or with ``--check`` compare it with the committed one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/env-arguments.md is out of date")
    text = render()
    if parser.parse_args().check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is out of date: run python scripts/env_arguments_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
