"""Headless Chromium for the report tests: the DOM after the page's JavaScript ran, and a screenshot.

Debian's ``chromium`` package (``scripts/setup-dev.sh``, run by ``make test``, installs it where it can);
tests skip with a message where no binary is found.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# --no-sandbox: CI and this machine run as root, where Chromium's sandbox refuses to start; the
# pages loaded are the report files the test just wrote.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-extensions",
]


def chromium() -> str:
    """The Chromium binary, or skip the test with the reason."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "no headless Chromium found (tried chromium, chromium-browser, google-chrome): apt-get install chromium"
    )


def url(path: Path, fragment: str = "") -> str:
    return Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")


def _run(*args: str) -> subprocess.CompletedProcess:
    """One headless Chromium process with its own profile (pytest-xdist workers run them side by side)."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )


def dump_dom(path: Path, fragment: str = "") -> str:
    """The page's DOM once its scripts ran (``--dump-dom`` prints it after the load event)."""
    proc = _run("--dump-dom", url(path, fragment))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def screenshot(path: Path, out: Path, fragment: str = "", size: str = "1280,2200") -> Path:
    """A PNG screenshot of the page."""
    proc = _run(f"--window-size={size}", f"--screenshot={out}", url(path, fragment))
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-2000:]
    return out


def assert_not_blank(png: Path) -> None:
    """The screenshot has content: its pixels vary (a blank page is one colour)."""
    import matplotlib.image

    pixels = matplotlib.image.imread(str(png))
    assert pixels.ndim == 3 and pixels.shape[0] > 500
    assert float(pixels[..., :3].std()) > 0.05, "the screenshot is (nearly) one colour"
    # More than a few colours: text, charts and bars were drawn.
    assert len({tuple(p) for p in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3).tolist()}) > 50


def attributes(dom: str, tag_class: str, attribute: str) -> list[str]:
    """The values of ``attribute`` on the elements whose class attribute starts with ``tag_class``."""
    pattern = re.compile(rf'<[a-z]+ class="{re.escape(tag_class)}[^"]*"[^>]*\b{attribute}="([^"]*)"')
    return pattern.findall(dom)
