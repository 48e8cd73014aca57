"""A real gbatchd per test: started as a process in a temp GBATCH_HOME, driven through
the real `gbatch` CLI in subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.paths import resolve_paths
from gbatch.protocol import requests
from gbatch.protocol.client import Client, DaemonUnavailable, ReplyTimeout, RequestFailed

GBATCH = [sys.executable, "-m", "gbatch"]
FAST_CONFIG = """\
tick_seconds: 0.2
report_interval: 0.2
kill_grace_seconds: 1
"""
# Job files of these tests mount directories under tmp_path: a site allows no mounts
# until its admin names mount roots.
TMP_MOUNTS_CONFIG = "mount_roots: [{path: /tmp, writable: true}]\n"


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")


@dataclass
class Head:
    """One daemon's home and the CLI aimed at it."""

    home: Path
    env: dict[str, str]

    def run(
        self, *args: str, user: int | None = None, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*GBATCH, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            user=user,
            cwd=self.home,
            input=input,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"gbatch {' '.join(args)} -> {result.returncode}\n{result.stdout}{result.stderr}"
            )
        return result

    def sbatch(self, *args: str) -> int:
        return int(self.run("sbatch", "--parsable", *args, check=True).stdout.strip())

    def job(self, job_id: int) -> dict[str, object]:
        out = self.run("scontrol", "show", "job", str(job_id), "--json", check=True).stdout
        data: dict[str, object] = json.loads(out)
        return data

    def state(self, job_id: int) -> str:
        return str(self.job(job_id)["state"])

    def polled(self, job_id: int) -> dict[str, Any] | None:
        """The job's wire record, asked over the daemon's socket from this process (None
        while no daemon answers): waits poll with this, since each `gbatch` subprocess
        costs a Python start-up, and a run makes thousands of polls on a few cores."""
        try:
            with Client(resolve_paths(self.env).socket) as client:
                job: dict[str, Any] = client.call(requests.ShowJob(id=job_id))["job"]
                return job
        except (DaemonUnavailable, ReplyTimeout, RequestFailed):
            return None

    def wait_state(self, job_id: int, *states: str, timeout: float = 30.0) -> dict[str, object]:
        """The job's record (through the CLI) once it is in one of `states`."""
        try:
            wait_for(lambda: (self.polled(job_id) or {}).get("state") in states, timeout)
        except AssertionError:
            job = self.job(job_id)
            raise AssertionError(
                f"timed out after {timeout} s waiting for job {job_id} to reach {states} "
                f"(now {job['state']}, reason {job.get('reason')!r})"
            ) from None
        return self.job(job_id)

    def wait_planned(self, job_id: int, timeout: float = 30.0) -> dict[str, object]:
        """The job once the planner has given it a pending reason (or started it): what
        a fixed wait for "a pass or two" stood in for."""

        def planned() -> bool:
            job = self.polled(job_id) or {}
            return job.get("state") not in ("PENDING", None) or job.get("reason") not in ("", None)

        wait_for(planned, timeout, f"job {job_id} to be planned")
        return self.job(job_id)

    def start(self) -> None:
        self.run("daemon", "start", check=True)

    def stop(self) -> None:
        self.run("daemon", "stop")

    def daemon_pid(self) -> int:
        return int((self.home / "gbatchd.lock").read_text().strip())


def is_gone(pid: int) -> bool:
    """Dead and reaped, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def require_root(why: str) -> None:
    """Acting as another user needs root: a skip on a laptop, a failure in CI (where a
    missing component never passes as a skip)."""
    if os.getuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run as root {why}")
        pytest.skip(f"needs root {why}")


# Service accounts made for this run (token_account), removed when the session ends.
_SERVICE_ACCOUNTS: dict[str, str] = {}


def token_account(which: str = "bot") -> str:
    """The account API tokens are minted for in these tests.

    As root (who gets no tokens of its own): a throw-away service account, made once per
    run and `which` (a robot's: uid from UID_MIN up, no home, no login shell), which the
    head must list (`service_config`); removed when the run ends. As anyone else: that
    user, who mints their own."""
    if os.getuid() != 0:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    if which not in _SERVICE_ACCOUNTS:
        import secrets

        name = f"gbsvc-{secrets.token_hex(3)}-{which}"
        subprocess.run(
            ["useradd", "-M", "-s", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
            timeout=60,
        )
        _SERVICE_ACCOUNTS[which] = name
    return _SERVICE_ACCOUNTS[which]


def service_config(*which: str) -> str:
    """config.yaml's service_accounts: line listing token_account(w) for each of `which`
    (default: "bot"), as root; empty for anyone else (they mint for themselves)."""
    if os.getuid() != 0:
        return ""
    return f"service_accounts: [{', '.join(token_account(w) for w in which or ('bot',))}]\n"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for name in _SERVICE_ACCOUNTS.values():
        subprocess.run(["userdel", "-r", name], capture_output=True, timeout=60)
    _SERVICE_ACCOUNTS.clear()


def make_head(home: Path, gpus: int | str = 2, config: str = FAST_CONFIG) -> Head:
    """A head (not started) in `home`: `gpus` is GBATCH_SIMULATE_GPUS (a count or models)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "config.yaml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GBATCH_")}
    env.update(GBATCH_HOME=str(home), GBATCH_SIMULATE_GPUS=str(gpus))
    return Head(home, env)


def kill_leftover_jobs(home: Path) -> None:
    """Jobs outlive the daemon by design; a test must not leave any behind, nor their
    cgroups (gbatch/nodes/cgroups.py: this daemon's, killed and removed)."""
    for run_dir in (home / "run").glob("*.*"):
        try:
            pids = json.loads((run_dir / "pids.json").read_text())
            os.killpg(int(pids["pgid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
    remove_bare_cgroups(home)


def remove_bare_cgroups(home: Path) -> None:
    """Kill what is in the bare-job cgroups of the daemon of `home`, and remove them."""
    from gbatch.nodes import cgroups

    tree = cgroups.find(home / "run")
    if not isinstance(tree, str):
        tree.remove_all()


@contextlib.contextmanager
def container_head(home: Path, gpus: int) -> Iterator[Head]:
    """A started head whose jobs may run containers; afterwards its jobs and the gbatch
    containers on the engine are gone (tests that start containers hold the engine
    alone, so every gbatch-* container is this test's)."""
    head = make_head(home, gpus=gpus)
    head.start()
    try:
        yield head
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
        names = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=gbatch.job"],
            capture_output=True,
            text=True,
        ).stdout.split()
        for name in names:
            inspect = subprocess.run(
                ["docker", "inspect", "-f", "{{.Name}}", name], capture_output=True, text=True
            ).stdout
            if inspect.strip().lstrip("/").startswith("gbatch-"):
                subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@contextlib.contextmanager
def shared_home(
    prefix: str, config: str = FAST_CONFIG + "socket_mode: '666'\n", gpus: int = 2
) -> Iterator[Head]:
    """A head other users can reach, as a lab's shared head: made, not started.

    Its home is under /tmp (0755), not tmp_path: pytest's base dir is private to its
    user; the home is 0711, so others reach the socket and list nothing. Stopped and
    removed, its jobs killed, when the block ends."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    base.chmod(0o755)
    head = make_head(base / "home", gpus=gpus, config=config)
    head.home.chmod(0o711)
    try:
        yield head
        head.stop()
        kill_leftover_jobs(head.home)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def shared_head() -> Iterator[Head]:
    """A daemon whose socket other users can reach (as a lab's shared head would)."""
    with shared_home("gbatch-shared-") as head:
        head.start()
        yield head


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    h = make_head(tmp_path / "home")
    h.start()
    yield h
    h.stop()
    kill_leftover_jobs(h.home)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
