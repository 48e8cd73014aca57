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


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_run_stops_the_daemons_it_started_and_leaves_the_rest(tmp_path: Path) -> None:
    """What a setup script (or a test running one) notes in GBATCH_CI_STARTED is
    stopped when test.sh ends, even a failed run; what nobody noted keeps running."""
    root = _fake_venv(tmp_path)
    shutil.copytree(ROOT / ".ci", root / ".ci")
    # The fake pytest starts two daemons, notes one of them as .ci/started.sh would, and
    # fails. A pid file stands in for the daemon's own.
    (root / ".venv" / "bin" / "pytest").write_text(
        "#!/bin/bash\n"
        ". .ci/started.sh\n"
        "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >noted.pid\n"
        "setsid sleep 301 </dev/null >/dev/null 2>&1 & echo $! >owners.pid\n"
        # setsid execs sleep in the same process: noted before that, it is not yet
        # named sleep, and stop-started rightly leaves it (a loaded CI run saw it).
        'until [ "$(cat /proc/$(cat noted.pid)/comm)" = sleep ]; do sleep 0.01; done\n'
        "note_started sleep noted.pid\n"
        "exit 1\n"
    )
    result = subprocess.run(
        ["bash", str(root / "test.sh"), "--fast"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
    )
    noted = int((root / "noted.pid").read_text())
    owners = int((root / "owners.pid").read_text())
    try:
        assert result.returncode == 1, result.stderr
        assert f"stopped sleep ({noted}), which this run started" in result.stdout
        assert not _alive(noted)
        assert _alive(owners)
    finally:
        subprocess.run(["kill", str(noted), str(owners)], capture_output=True)


def test_stopping_skips_a_pid_that_now_runs_another_program(tmp_path: Path) -> None:
    """A noted pid reused by another program (its comm differs) is left alone."""
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        noted = tmp_path / "started"
        noted.write_text(f"slurmd {other.pid}\nmunged 999999999\n")
        result = subprocess.run(
            ["bash", str(ROOT / ".ci" / "stop-started.sh"), str(noted)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
        assert _alive(other.pid) and not noted.exists()
    finally:
        other.kill()
        other.wait()


def test_nothing_is_noted_outside_a_test_run(tmp_path: Path) -> None:
    """A setup script run by hand (no GBATCH_CI_STARTED) leaves what it starts running."""
    pidfile = tmp_path / "d.pid"
    pidfile.write_text("4242\n")
    script = f". {ROOT / '.ci' / 'started.sh'}; note_started d {pidfile}; echo rc=$?"
    env = {"PATH": "/usr/bin:/bin"}
    alone = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert alone.stdout == "rc=0\n"
    listed = tmp_path / "started"
    under_run = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={**env, "GBATCH_CI_STARTED": str(listed)},
    )
    assert under_run.stdout == "rc=0\n" and listed.read_text() == "d 4242\n"
