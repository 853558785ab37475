"""The wheel a release would upload: built from the sources, installed into a clean venv, its CLI run.

Offline and under a minute: the wheel is built without build isolation (the project venv's setuptools),
installed with ``--no-deps`` into a fresh venv that sees the project venv's packages through a ``.pth``
line (its dependencies, not its editable llmgym: a plain path line runs no ``.pth`` hook of that folder;
``--ignore-installed`` installs the wheel beside, never uninstalling anything there).
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("PPO", "A2C", "GRPO", "RLOO", "NLPO", "TRPO")


def _run(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources (nothing is written into the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "llmgym", source / "llmgym", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        cwd=source,
    )
    [built] = out.glob("llmgym-*.whl")
    return built


def test_the_wheel_metadata_is_ready_for_a_release(wheel):
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_string(archive.read(name).decode())
        files = archive.namelist()
    assert all(algorithm in metadata["Summary"] for algorithm in ALGORITHMS), metadata["Summary"]
    assert metadata["License-Expression"] == "MIT" and any(f.endswith("licenses/LICENSE") for f in files)
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert {"Repository", "Documentation", "Issues"} <= set(urls)
    assert metadata["Author"] and len(metadata.get_all("Classifier")) >= 5
    assert not [
        c for c in metadata.get_all("Classifier") if c.startswith("License ::")
    ]  # PEP 639: the expression only
    description = metadata.get_payload()
    relative = re.findall(r"\]\((?![a-z][a-z0-9+.-]*:|#)[^)\s]+\)", description)
    assert not relative, f"relative links break on PyPI: {relative[:5]}"
    assert f"]({urls['Repository']}/blob/main/docs/configs.md)" in description
    assert f"]({urls['Repository']}/raw/main/docs/images/report_quickstart.png)" in description
    assert any(f.startswith("llmgym/configs/") and f.endswith(".yaml") for f in files)


def test_the_wheel_installs_into_a_clean_venv_and_its_cli_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path
        ).stdout.strip()
    )
    deps = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "project_venv_dependencies.pth").write_text("".join(f"{path}\n" for path in deps))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            "-q",
            str(wheel),
        ],
        cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = _run([str(python), "-c", "import llmgym; print(llmgym.__file__)"], cwd=tmp_path, env=env).stdout
    assert where.strip().startswith(str(site)), f"llmgym came from {where.strip()}, not the installed wheel"
    help_text = _run([str(venv / "bin" / "llmgym"), "--help"], cwd=tmp_path, env=env).stdout
    assert all(command in help_text for command in ("train", "eval", "sweep", "report", "config"))
    configs = _run([str(venv / "bin" / "llmgym"), "config", "list"], cwd=tmp_path, env=env).stdout
    assert "quickstart" in configs
