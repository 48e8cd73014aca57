"""./test.sh --fast: a rerun runs pytest alone, never pip, the setup scripts, ruff or mypy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fake_venv(tmp_path: Path) -> Path:
    """test.sh beside a .venv whose tools record their calls (pip, ruff, mypy fail)."""
    shutil.copy(ROOT / "test.sh", tmp_path / "test.sh")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "pip", "ruff", "mypy"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} ran >&2\nexit 9\n")
    (bin_dir / "pytest").write_text('#!/bin/sh\necho "pytest $*"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return tmp_path


def test_fast_runs_pytest_alone_with_its_arguments(tmp_path: Path) -> None:
    root = _fake_venv(tmp_path)
    result = subprocess.run(
        ["bash", str(root / "test.sh"), "--fast", "tests/unit/x.py::t", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "pytest tests/unit/x.py::t -q\n",
        "",
    )


def test_fast_without_a_venv_says_to_run_the_full_path_once(tmp_path: Path) -> None:
    shutil.copy(ROOT / "test.sh", tmp_path / "test.sh")
    result = subprocess.run(
        ["bash", str(tmp_path / "test.sh"), "--fast"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr == "test.sh --fast: error: no .venv/bin/pytest. Run ./test.sh once first\n"


def test_ci_runs_the_full_path() -> None:
    assert "--fast" not in (ROOT / ".ci" / "run").read_text()
