"""The README's and docs' code blocks run as written, so the docs cannot drift from the code.

- Every ```python block runs in a fresh interpreter (in a temporary folder; a minute on an idle 2-core CPU, two at most),
  unless the line above its fence is ``<!-- docs-test: skip (reason) -->``; a skip must give a reason.
  Where a block shows what it prints, as a ``# -> TEXT`` comment on the printing line (one per printed line,
  in order; ``TEXT`` ending in ``...`` matches a line starting with the rest), the printed lines must be
  exactly those: a comment that drifts from the code fails here.
- Every ``llmgym ...`` line of a ```bash block parses with the real command-line parser, and the
  config and ``key=value`` overrides of ``llmgym train`` / ``llmgym sweep`` load (unknown keys,
  wrong types and unknown config names fail here), unless the block is marked skip as above.
- Every ```yaml block loads with llmgym's config loader (unknown keys, wrong types fail), unless marked skip.
- Any other block (text, json, output shown) is listed as skipped with its language as the reason, so
  ``pytest -ra`` lists every block that is not checked, and why.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmgym.cli import _split_config_arg, build_parser
from llmgym.config import load_config, resolve_config
from llmgym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block of a Markdown file."""

    path: Path
    line: int
    language: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """The fenced code blocks of ``path`` with their language and skip marker."""
    lines = path.read_text().splitlines()
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if match is None:
            i += 1
            continue
        start, language = i, match.group(1)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.search(above)
        blocks.append(
            CodeBlock(path, start + 1, language, "\n".join(lines[start + 1 : end]), skip and skip["reason"])
        )
        i = end + 1
    return blocks


ALL_BLOCKS = [block for path in DOC_FILES for block in code_blocks(path)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.language == "python"]
BASH_BLOCKS = [b for b in ALL_BLOCKS if b.language in ("bash", "sh", "shell")]
YAML_BLOCKS = [b for b in ALL_BLOCKS if b.language in ("yaml", "yml")]
OTHER_BLOCKS = [b for b in ALL_BLOCKS if b not in (*PYTHON_BLOCKS, *BASH_BLOCKS, *YAML_BLOCKS)]
#: ``print(...)  # -> what it prints``: the expected line of a printing line.
PRINTED = re.compile(r"#\s*->\s?(?P<line>.*)$")


def test_the_collector_finds_the_docs_blocks() -> None:
    assert len(PYTHON_BLOCKS) >= 5 and len(BASH_BLOCKS) >= 5 and len(YAML_BLOCKS) >= 3
    blocks = code_blocks(ROOT / "docs" / "custom-env.md")
    assert blocks[0].language == "python" and "class GuessNumberEnv" in blocks[0].code
    shown = [b for b in PYTHON_BLOCKS if expected_output(b.code) and not b.skip_reason]
    assert len(shown) >= 3, "the docs' snippets show what they print with # -> comments"


def expected_output(code: str) -> list[str]:
    """The lines a snippet says it prints: its ``# -> TEXT`` comments, in order."""
    return [m["line"].rstrip() for line in code.splitlines() if (m := PRINTED.search(line))]


def output_mismatch(expected: list[str], printed: str) -> str | None:
    """Why ``printed`` is not the lines ``expected`` (``...`` at the end of one: a prefix), or ``None``."""
    lines = printed.rstrip("\n").splitlines() if printed.strip() else []
    if len(lines) != len(expected):
        return f"the snippet says it prints {len(expected)} lines, it printed {len(lines)}:\n{printed}"
    for want, got in zip(expected, lines):
        if not (got.startswith(want[:-3]) if want.endswith("...") else got.rstrip() == want):
            return f"the snippet says it prints\n  {want}\nbut it printed\n  {got}"
    return None


def test_a_printed_comment_that_drifts_fails() -> None:
    assert expected_output('print("a")  # -> a\nx = 1\nprint(x, 2)   # -> 1 2') == ["a", "1 2"]
    assert output_mismatch(["a", "1 2"], "a\n1 2\n") is None
    assert output_mismatch(["Goal: go to the grey key"], "Goal: go to the green ball\n") is not None
    assert output_mismatch(["Goal: go to..."], "Goal: go to the green ball\n") is None
    assert output_mismatch(["a"], "a\nb\n") is not None  # an unannounced line is a drift too


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.id for b in PYTHON_BLOCKS])
def test_python_block_runs(block: CodeBlock, tmp_path: Path) -> None:
    if block.skip_reason:
        pytest.skip(block.skip_reason)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-c", block.code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, f"{block.id} failed:\n{proc.stderr[-3000:]}"
    expected = expected_output(block.code)
    if expected:
        mismatch = output_mismatch(expected, proc.stdout)
        assert mismatch is None, f"{block.id}: {mismatch}"


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.id for b in YAML_BLOCKS])
def test_yaml_block_loads_as_a_config(block: CodeBlock, tmp_path: Path) -> None:
    if block.skip_reason:
        pytest.skip(block.skip_reason)
    path = tmp_path / "block.yaml"
    path.write_text(block.code + "\n")
    load_config(path)


@pytest.mark.parametrize("block", OTHER_BLOCKS, ids=[b.id for b in OTHER_BLOCKS])
def test_other_blocks_are_listed_as_not_checked(block: CodeBlock) -> None:
    pytest.skip(f"a {block.language or 'plain'} block (output or data shown), not code to run")


def _commands(block: CodeBlock) -> list[list[str]]:
    """The ``llmgym`` command lines of a shell block (comments and continuation lines handled)."""
    text = block.code.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["llmgym"]:
            commands.append(words[1:])
    return commands


@pytest.mark.parametrize("block", BASH_BLOCKS, ids=[b.id for b in BASH_BLOCKS])
def test_llmgym_command_lines_parse_and_their_configs_load(block: CodeBlock, monkeypatch) -> None:
    if block.skip_reason:
        pytest.skip(block.skip_reason)
    for line in block.code.splitlines():  # the block's `export NAME=value` lines (LLMGYM_ALLOW_IMPORTS...)
        if line.startswith("export ") and "=" in line:
            name, _, value = shlex.split(line, comments=True)[1].partition("=")
            monkeypatch.setenv(name, value)
    parser = build_parser()
    for argv in _commands(block):
        args, extra = parser.parse_known_args(argv)
        assert all("=" in e and not e.startswith("-") for e in extra), (
            f"{block.id}: llmgym {shlex.join(argv)}"
        )
        if args.command not in ("train", "sweep") or getattr(args, "combine", None):
            continue
        config, overrides = _split_config_arg(args.config, [*args.overrides, *extra])
        if config is not None:
            try:
                resolve_config(config)
            except ConfigError:
                continue  # the reader's own file (my.yaml): nothing to load here
        load_config(config, overrides)


def test_the_env_arguments_page_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/env_arguments_doc.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_relative_links_point_at_files_that_exist(path: Path) -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    missing = [link for link in links if "://" not in link and not (path.parent / link).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


def test_the_readme_stays_a_short_guide() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 180, (
        f"README.md has {len(lines)} lines; move detail into docs/ (the README is a newcomer's guide)"
    )
