"""quickstart.sh, run whole from a copy of the clone: what it prints must show what the
README says it does (a job that fails once and is retried, one past its time limit, one
cancelled), and the examples it points a newcomer at must be the ones its demo runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import kill_leftover_jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[Path]:
    """The script and its examples, with a .venv whose gbatch is this checkout's (the
    script installs one only when .venv/bin/gbatch is missing)."""
    clone = tmp_path / "qs"
    clone.mkdir()
    shutil.copy(ROOT / "quickstart.sh", clone)
    shutil.copytree(ROOT / "examples", clone / "examples")
    gbatch = clone / ".venv" / "bin" / "gbatch"
    gbatch.parent.mkdir(parents=True)
    gbatch.write_text(f'#!/bin/sh\nexec {sys.executable} -m gbatch "$@"\n')
    gbatch.chmod(0o755)
    yield clone
    subprocess.run([gbatch, "daemon", "stop"], env=_env(clone), capture_output=True, timeout=60)
    kill_leftover_jobs(clone / ".demo")


def _env(clone: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GBATCH_")}
    return {**env, "GBATCH_HOME": str(clone / ".demo")}


def test_the_quickstart_shows_the_flaky_jobs_retry_and_its_demo_refuses_train_yaml(
    clone: Path,
) -> None:
    done = subprocess.run(
        ["bash", str(clone / "quickstart.sh")],
        env={k: v for k, v in _env(clone).items() if k != "GBATCH_HOME"},  # its default
        capture_output=True,
        text=True,
        timeout=240,
        cwd=clone,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    accounting = out[out.index("==> accounting") :]
    sacct = accounting[accounting.index("$ gbatch sacct") : accounting.index("==> flaky")]
    states = sorted(
        tuple(line.split()[1:4:2])
        for line in sacct.splitlines()[3:]
        if line.strip() and "." not in line.split()[0]  # the jobs' lines, not N.batch
    )
    assert states == [
        ("doomed", "CANCELLED"),
        ("flaky", "COMPLETED"),
        *[("hello", "COMPLETED")] * 4,
        ("too-slow", "TIMEOUT"),
    ]
    # The retry itself: both attempts' output, and the retry in the flaky job's events.
    assert "attempt 1: crashing\nattempt 2: fine\n" in accounting
    assert "JobId=" in accounting and "JobName=flaky" in accounting
    assert "JobName=doomed" not in accounting
    assert "Attempt=2 Retries=1" in accounting
    assert "PENDING      retry 1/1 after exit code 3" in accounting

    # What the script then suggests runs on its demo; train.yaml, as it says, does not.
    gbatch = [str(clone / ".venv" / "bin" / "gbatch")]
    hello = subprocess.run(
        [*gbatch, "sbatch", "--test-only", "examples/hello.yaml"],
        env=_env(clone),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=clone,
    )
    assert hello.returncode == 0, hello.stderr
    assert "examples/train.yaml is the reference of every job-file key" in out
    train = subprocess.run(
        [*gbatch, "sbatch", "examples/train.yaml"],
        env=_env(clone),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=clone,
    )
    # Refused in one line: bad input here (its logs/ directory, its mounts), or no docker.
    assert train.returncode in (2, 5), train.stderr
    assert train.stderr.startswith("gbatch sbatch: error: ") and train.stderr.count("\n") == 1
