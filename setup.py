"""Build hook: the package's long description is README.md with its relative links made absolute.

PyPI shows the long description away from the repository, where README's relative links (``docs/*.md``,
``LICENSE``, images) would lead nowhere; in the built metadata they point at the repository's files
(``[project.urls] Repository`` in pyproject.toml, branch ``main``). README.md itself keeps relative links,
which work on the repository's page and in a checkout (``tests/test_docs.py`` checks that they resolve).
"""

import re
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
#: A Markdown link or image whose target is a path in the repository (no scheme, not an anchor).
RELATIVE_LINK = re.compile(r"(!?)\[([^\]]*)\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s]+)\)")


def absolute_links(markdown: str, repository: str) -> str:
    """``markdown`` with each relative link made absolute: pages under ``blob/main``, images under ``raw/main``."""

    def absolute(match: re.Match) -> str:
        bang, text, target = match.groups()
        return f"{bang}[{text}]({repository}/{'raw' if bang else 'blob'}/main/{target})"

    return RELATIVE_LINK.sub(absolute, markdown)


def repository_url() -> str:
    """``[project.urls] Repository`` of pyproject.toml (read with a regex: tomllib is Python 3.11+)."""
    found = re.search(r'^Repository\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit("pyproject.toml has no [project.urls] Repository: the long description needs it")
    return found.group(1).rstrip("/")


if __name__ == "__main__":
    setup(
        long_description=absolute_links((ROOT / "README.md").read_text(encoding="utf-8"), repository_url()),
        long_description_content_type="text/markdown",
    )
