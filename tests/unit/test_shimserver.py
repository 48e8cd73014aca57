"""The shim server as real processes: the shim it forks starts the job exactly as the
plain `python -m gbatch.shim` does (environment, descriptors, session, signals, user),
the run's lock tells that the run exists, runs outlive the server, and the daemon falls
back to the plain shim whenever the server cannot take a run."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gbatch.nodes.base import LaunchError
from gbatch.nodes.local import JOB_ENV_FILE, LocalNode
from gbatch.nodes.shimserver import RESTART_AFTER, ServerGone, ShimServer, lock_held

# What the job sees of how it was started; pids are compared as relations.
PROBE = """
import json, os, sys
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
print(json.dumps({
    "env": dict(  # as exec'd: Python's own locale coercion changes os.environ
        e.split("=", 1) for e in open("/proc/self/environ").read().split("\\0") if e
    ),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "signals": {k: status[k].strip() for k in ("SigBlk", "SigIgn", "SigCgt")},
    "umask": os.umask(0o22),
    "cwd": os.getcwd(),
    "ids": [os.getuid(), os.getgid(), sorted(os.getgroups())],
    "own_group": os.getpgid(0) == os.getpid(),
    "session": os.getsid(0),
    "stdin": os.readlink("/proc/self/fd/0"),
}))
"""


def wait_for(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ended() -> threading.Event:
    return threading.Event()


@pytest.fixture
def server(ended: threading.Event) -> Iterator[ShimServer]:
    shims = ShimServer(ended.set, clock=Clock())
    yield shims
    shims.stop()


def job_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "JOB_VALUE": "it's $mine",
        "HOME": str(tmp_path),
    }


def start(server: ShimServer, run_dir: Path, log: Path, command: list[str], **kw: object) -> int:
    run_dir.mkdir(exist_ok=True)
    env = kw.pop("env", None) or job_env(run_dir.parent)
    identity = kw.pop("identity", [])
    with open(log, "ab") as out:
        return server.start_run(
            run_dir,
            [str(run_dir), *identity, "--", *command],  # type: ignore[list-item]
            env,  # type: ignore[arg-type]
            str(kw.pop("cwd", "/")),
            out.fileno(),
        )


def exit_record(run_dir: Path) -> dict[str, object]:
    wait_for((run_dir / "exit.json").exists)
    record: dict[str, object] = json.loads((run_dir / "exit.json").read_text())
    return record


def plain_shim(run_dir: Path, log: Path, command: list[str], env: dict[str, str]) -> None:
    run_dir.mkdir()
    with open(log, "ab") as out:
        subprocess.run(
            [sys.executable, "-m", "gbatch.shim", str(run_dir), "--", *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            cwd="/",
            start_new_session=True,
            check=True,
        )


def probe(run_dir: Path, log: Path) -> dict[str, object]:
    seen: dict[str, object] = json.loads(log.read_text())
    pids = json.loads((run_dir / "pids.json").read_text())
    # The shim is the session leader of its job, as the daemon's GPU check expects.
    assert seen.pop("session") == pids["shim"]
    return seen


def test_a_forked_shim_runs_the_job_records_its_end_and_wakes_the_daemon(
    server: ShimServer, ended: threading.Event, tmp_path: Path
) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "job.log"
    pid = start(server, run_dir, log, ["sh", "-c", 'echo "$JOB_VALUE"; echo err >&2; exit 3'])
    record = exit_record(run_dir)
    assert record["exit_code"] == 3 and record["signal"] == 0
    assert log.read_text() == "it's $mine\nerr\n"
    assert json.loads((run_dir / "pids.json").read_text())["shim"] == pid
    wait_for(ended.is_set)  # told once the shim exited
    assert not lock_held(run_dir)


@pytest.mark.parametrize(
    ("locale", "coerced"),
    [
        # A fresh interpreter (the plain shim) sets LC_CTYPE where no locale is set
        # (PEP 538), and its job inherits it: the forked shim's job gets it too.
        ({}, {"LC_CTYPE": "C.UTF-8"}),
        ({"LC_ALL": "C.UTF-8"}, {}),
        ({"LANG": "C.UTF-8", "PYTHONCOERCECLOCALE": "0"}, {}),
    ],
)
def test_the_job_starts_as_the_plain_shims_job_starts(
    server: ShimServer, tmp_path: Path, locale: dict[str, str], coerced: dict[str, str]
) -> None:
    env = {**job_env(tmp_path), **locale}
    command = [sys.executable, "-c", PROBE]
    start(server, tmp_path / "forked", tmp_path / "forked.log", command, env=env)
    exit_record(tmp_path / "forked")
    plain_shim(tmp_path / "plain", tmp_path / "plain.log", command, env)
    forked = probe(tmp_path / "forked", tmp_path / "forked.log")
    plain = probe(tmp_path / "plain", tmp_path / "plain.log")
    assert forked == plain
    assert forked["fds"] == ["0", "1", "2", "3"]  # 3: the probe's own open of fd/
    assert forked["stdin"] == "/dev/null" and forked["own_group"]
    assert forked["env"] == {**env, **coerced}


def test_a_job_gets_default_signals_whatever_the_daemons_starter_ignored(
    tmp_path: Path,
) -> None:
    """`nohup gbatch daemon start` ignores SIGHUP for the daemon and all it starts: the
    job must not inherit it (a step's hang-up and a cancel's SIGTERM must reach it)."""

    def ignoring() -> None:
        for sig in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

    probe_cmd = [sys.executable, "-c", PROBE]
    (tmp_path / "plain").mkdir()
    with open(tmp_path / "plain.log", "ab") as out:
        subprocess.run(
            [sys.executable, "-m", "gbatch.shim", str(tmp_path / "plain"), "--", *probe_cmd],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=job_env(tmp_path),
            cwd="/",
            start_new_session=True,
            preexec_fn=ignoring,
            check=True,
        )
    signals = probe(tmp_path / "plain", tmp_path / "plain.log")["signals"]
    assert isinstance(signals, dict)
    ignored = int(signals["SigIgn"], 16)
    assert not ignored & (1 << (signal.SIGHUP - 1)) and not ignored & (1 << (signal.SIGTERM - 1))
    assert int(signals["SigBlk"], 16) == 0


def test_another_users_job_runs_with_exactly_their_rights(
    server: ShimServer, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: only a root daemon starts jobs as other users")
    nobody = pwd.getpwnam("nobody")
    identity = ["--as", str(nobody.pw_uid), str(nobody.pw_gid), "", "/"]
    tmp_path.chmod(0o755)
    env = {**job_env(tmp_path), "HOME": "/"}
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3, which another user may run")
    command = ["/usr/bin/python3", "-c", PROBE]
    start(server, tmp_path / "forked", tmp_path / "forked.log", command, env=env, identity=identity)
    exit_record(tmp_path / "forked")
    seen = probe(tmp_path / "forked", tmp_path / "forked.log")
    assert seen["ids"] == [nobody.pw_uid, nobody.pw_gid, [nobody.pw_gid]]
    assert seen["umask"] == 0o22
    (tmp_path / "plain").mkdir()
    with open(tmp_path / "plain.log", "ab") as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gbatch.shim",
                str(tmp_path / "plain"),
                *identity,
                "--",
                *command,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            cwd="/",
            start_new_session=True,
            check=True,
        )
    assert probe(tmp_path / "plain", tmp_path / "plain.log") == seen


def test_the_lock_is_held_while_the_run_lives_and_runs_outlive_the_server(
    server: ShimServer, tmp_path: Path
) -> None:
    run_dir, go = tmp_path / "run", tmp_path / "go"
    start(
        server, run_dir, tmp_path / "log", ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done"]
    )
    assert lock_held(run_dir)
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    wait_for(lambda: _gone(server.pid))
    assert lock_held(run_dir) and not (run_dir / "exit.json").exists()
    go.touch()
    assert exit_record(run_dir)["exit_code"] == 0
    wait_for(lambda: not lock_held(run_dir))  # the shim exits just after its record


def _gone(pid: int | None) -> bool:
    assert pid is not None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_after_the_server_died_runs_go_to_the_plain_shim_then_to_a_new_server(
    ended: threading.Event, tmp_path: Path
) -> None:
    clock = Clock()
    server = ShimServer(ended.set, clock=clock)
    try:
        start(server, tmp_path / "first", tmp_path / "log", ["true"])
        exit_record(tmp_path / "first")
        old = server.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: _gone(old))
        with pytest.raises(ServerGone):
            start(server, tmp_path / "second", tmp_path / "log", ["true"])
        assert not (tmp_path / "second" / "pids.json").exists()
        with pytest.raises(ServerGone):  # not restarted at once
            start(server, tmp_path / "third", tmp_path / "log", ["true"])
        clock.now += RESTART_AFTER
        start(server, tmp_path / "fourth", tmp_path / "log", ["true"])
        assert exit_record(tmp_path / "fourth")["exit_code"] == 0
        assert server.pid not in (None, old)
    finally:
        server.stop()


def test_a_server_that_cannot_run_sends_runs_to_the_plain_shim(
    ended: threading.Event, tmp_path: Path
) -> None:
    server = ShimServer(ended.set, argv=[sys.executable, "-c", "pass"])
    try:
        with pytest.raises(ServerGone):
            start(server, tmp_path / "run", tmp_path / "log", ["true"])
        assert not lock_held(tmp_path / "run")
    finally:
        server.stop()
    missing = ShimServer(ended.set, argv=[str(tmp_path / "no-such-python")])
    with pytest.raises(ServerGone):
        start(missing, tmp_path / "run2", tmp_path / "log", ["true"])


def test_a_workdir_that_cannot_be_entered_fails_the_launch(
    server: ShimServer, tmp_path: Path
) -> None:
    with pytest.raises(LaunchError, match=r"cannot start the job: .*No such file"):
        start(server, tmp_path / "run", tmp_path / "log", ["true"], cwd=tmp_path / "missing")
    assert not (tmp_path / "run" / "pids.json").exists()


def test_the_server_has_no_address_another_process_could_reach(
    server: ShimServer, tmp_path: Path
) -> None:
    start(server, tmp_path / "run", tmp_path / "log", ["true"])
    assert server.pid is not None
    inodes = set()
    for fd in Path(f"/proc/{server.pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    assert inodes, "the server talks over a socket"
    rows = [line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
    bound = {row[6]: row[7:] for row in rows}
    assert all(bound.get(inode) == [] for inode in inodes), "a socket with a path"
    assert all(not _listens(inode, rows) for inode in inodes)


def _listens(inode: str, rows: list[list[str]]) -> bool:
    # /proc/net/unix flags 00010000: __SO_ACCEPTCON, a listening socket.
    return any(row[6] == inode and int(row[3], 16) & 0x10000 for row in rows)


def test_a_request_too_large_for_one_message_goes_to_the_plain_shim(
    server: ShimServer, tmp_path: Path
) -> None:
    env = {**job_env(tmp_path), "BIG": "x" * (4 << 20)}
    with pytest.raises(ServerGone):
        start(server, tmp_path / "run", tmp_path / "log", ["true"], env=env)
    assert not lock_held(tmp_path / "run")
    start(server, tmp_path / "next", tmp_path / "log", ["true"])  # the server still serves
    assert exit_record(tmp_path / "next")["exit_code"] == 0


def test_a_lock_in_flight_stays_held_until_its_message_is_dropped(tmp_path: Path) -> None:
    """What a restarted daemon relies on: a request the server has not read yet keeps
    the run's lock though the daemon that sent it is gone; dropped unread, it frees it."""
    (tmp_path / "run").mkdir()
    lock = os.open(tmp_path / "run" / "shim.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.sendmsg([b"{}"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, lock.to_bytes(4, sys.byteorder))])
    os.close(lock)
    ours.close()  # the daemon died
    assert lock_held(tmp_path / "run")
    theirs.close()  # the server died before it read the request
    assert not lock_held(tmp_path / "run")


def test_a_server_killed_before_it_forks_starts_nothing(server: ShimServer, tmp_path: Path) -> None:
    start(server, tmp_path / "warm", tmp_path / "log", ["true"])
    assert server.pid is not None
    pid = server.pid
    os.kill(pid, signal.SIGSTOP)
    failed: list[BaseException] = []

    def launch() -> None:
        try:
            start(server, tmp_path / "run", tmp_path / "log", ["true"])
        except BaseException as err:
            failed.append(err)

    launching = threading.Thread(target=launch)
    launching.start()
    wait_for(lambda: lock_held(tmp_path / "run"))  # taken before the request is sent
    os.kill(pid, signal.SIGKILL)
    launching.join()
    assert len(failed) == 1 and isinstance(failed[0], ServerGone)
    assert not lock_held(tmp_path / "run")
    assert not (tmp_path / "run" / "pids.json").exists()


def test_the_plain_shim_for_another_user_never_runs_with_their_environment(
    tmp_path: Path,
) -> None:
    """The fallback: a root shim started for another user gets the daemon's environment
    and takes the job's from a file, so what the user exported (here a PYTHONPATH with
    a `gbatch` of theirs) never runs in the root interpreter; the job still gets it."""
    evil = tmp_path / "evil"
    (evil / "gbatch").mkdir(parents=True)
    marker = tmp_path / "ran-in-the-shim"
    (evil / "gbatch" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    run_dir, log = tmp_path / "run", tmp_path / "job.log"
    run_dir.mkdir()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(evil), "LC_ALL": "C.UTF-8"}
    someone = pwd.getpwnam("nobody")
    with open(log, "ab") as out:
        shim = LocalNode._start_plain_shim(
            [str(run_dir), "--", "sh", "-c", 'echo "$PYTHONPATH"'],
            env,
            "/",
            out,
            someone,
            run_dir,
        )
    assert shim.wait(timeout=60) == 0
    assert exit_record(run_dir)["exit_code"] == 0
    assert log.read_text() == f"{evil}\n"  # the job has the user's environment
    assert not marker.exists()  # the shim did not
    assert not (run_dir / JOB_ENV_FILE).exists()
