"""From a fresh install: `man gbatch-sbatch` shows sbatch's page, and the scripts of
`gbatch completion` complete a real daemon's job ids, partitions and nodes in bash,
zsh and fish, and nothing, quietly, once it is stopped.

The install is a plain `pip install .` of this checkout into a new virtual
environment (its dependencies borrowed from the test's own through a .pth file:
installing the same wheels again would be minutes for nothing). `man` finds the
pages as it does for any user: MANPATH unset, the venv's bin on PATH (man-db then
reads <venv>/share/man). Needs man-db and, for zsh and fish, .ci/setup-terminal.sh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Head
from shellcomplete import complete_lines, items, require_shell

from gbatch.cli import completion

ROOT = Path(__file__).resolve().parents[2]
SHELLS = ["bash", "zsh", "fish"]
# What a build needs of the checkout (tests, benches and caches stay behind).
NOT_BUILT = (".git", ".venv", "build", "*.egg-info", "__pycache__", "*_cache", "tests", "bench")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv with gbatch installed from a copy of this checkout: its bin."""
    base = tmp_path_factory.mktemp("fresh")
    source = base / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_BUILT))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=base,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = subprocess.run(
        [python, "-c", "import gbatch; print(gbatch.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=base,
    ).stdout
    assert loaded.startswith(site), loaded  # the installed copy, not this checkout
    yield venv / "bin"


def _env(bin_dir: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MANPATH", "PYTHONPATH")}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, **extra, "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home)}


def test_man_finds_the_installed_pages_of_gbatch_and_its_commands(
    installed: Path, tmp_path: Path
) -> None:
    man = shutil.which("man")
    if man is None:
        if os.environ.get("CI") == "true":
            pytest.fail("man is not installed (Debian: man-db)")
        pytest.skip("man is not installed (Debian: man-db)")
    env = _env(installed, tmp_path / "home", MANWIDTH="100", MANPAGER="cat", PAGER="cat")
    where = subprocess.run(
        [man, "-w", "gbatch-sbatch"], capture_output=True, text=True, env=env, timeout=60
    )
    assert where.stdout.strip() == str(installed.parent / "share/man/man1/gbatch-sbatch.1")
    shown = subprocess.run(
        [man, "--warnings", "gbatch-sbatch"], capture_output=True, text=True, env=env, timeout=60
    )
    assert (shown.returncode, shown.stderr) == (0, "")
    page = shown.stdout
    assert "gbatch-sbatch - queue a job" in page
    for option in ("-p, --partition NAME", "--wrap CMD", "-t, --time TIME", "--test-only"):
        assert option in page
    assert "EXIT STATUS" in page and "sbatch(1)" in page
    top = subprocess.run([man, "gbatch"], capture_output=True, text=True, env=env, timeout=60)
    assert "gbatch-squeue(1)" in top.stdout and "gbatch-completion(1)" in top.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_the_installed_gbatch_prints_each_completion_script(installed: Path, shell: str) -> None:
    done = subprocess.run(
        [installed / "gbatch", "completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(installed, installed.parent / "home"),
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == completion.script(shell)


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_asks_the_daemon_and_says_nothing_once_it_is_gone(
    installed: Path, head: Head, tmp_path: Path, shell: str
) -> None:
    require_shell(shell)
    single = head.sbatch("-H", "--wrap", "true")
    array = head.sbatch("-H", "--array", "1-3", "--wrap", "true")
    script = tmp_path / f"gbatch.{shell}"
    made = subprocess.run(
        [installed / "gbatch", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
        env=_env(installed, tmp_path / "home", **head.env),
    )
    script.write_text(made.stdout)
    env = _env(installed, tmp_path / "home", **head.env)
    lines = ["gbatch scancel ", "gbatch squeue -p ", "gbatch node drain "]
    answers = complete_lines(shell, script, lines, env)
    assert [noise for _, noise in answers] == [""] * len(lines)
    assert [items(found) for found, _ in answers] == [{str(single), str(array)}, {"gpu"}, {"local"}]

    head.run("scancel", str(single), str(array), check=True)
    head.stop()
    assert complete_lines(shell, script, lines, env) == [([], "")] * len(lines)
