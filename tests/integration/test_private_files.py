"""The head's files are its owner's alone whatever the umask: the store (jobs' env values
and commands), its WAL and shared memory, the daemon's log (audit lines), its lock and
the job logs, even in a home that other users may enter (a shared head's, 0711). A home
other users may list (0755) is refused at start, with the fix in one line."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from asuser import User, as_user
from conftest import FAST_CONFIG, Head, make_head, require_root

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def open_home_head() -> Iterator[Head]:
    """A daemon started under umask 022 in a home anyone may enter."""
    base = Path(tempfile.mkdtemp(prefix="gbatch-private-", dir="/tmp"))
    base.chmod(0o755)
    old_umask = os.umask(0o022)
    try:
        head = make_head(base / "home", config=FAST_CONFIG)
        head.home.chmod(0o711)  # others reach the socket, list nothing
        head.start()
    finally:
        os.umask(old_umask)
    try:
        yield head
        head.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def submit_with_env(head: Head) -> int:
    """A job whose env holds a token: what the store must keep from other users."""
    job_file = head.home.parent / "job.yaml"
    job_file.write_text('{"name": "t", "command": "echo secret-output", "env": {"TOKEN": "x"}}')
    return head.sbatch(str(job_file))


def test_the_heads_files_are_private_under_umask_022(open_home_head: Head) -> None:
    head = open_home_head
    job_id = submit_with_env(head)
    head.wait_state(job_id, "COMPLETED")
    home = head.home
    private = [
        home / "gbatch.db",
        home / "gbatch.db-wal",
        home / "gbatch.db-shm",
        home / "gbatchd.log",
        home / "gbatchd.lock",
        home / "logs" / f"{job_id}.log",
    ]
    assert {str(p.relative_to(home)): oct(mode(p)) for p in private} == {
        str(p.relative_to(home)): "0o600" for p in private
    }
    assert oct(mode(home / "logs")) == "0o700"
    assert oct(mode(home / "run")) == "0o700"


def test_another_user_cannot_read_the_store_the_daemon_log_or_a_job_log(
    open_home_head: Head,
) -> None:
    require_root("to act as another user")
    head = open_home_head
    job_id = submit_with_env(head)
    head.wait_state(job_id, "COMPLETED")
    targets = [
        head.home / "gbatch.db",
        head.home / "gbatchd.log",
        head.home / "logs" / f"{job_id}.log",
    ]

    def try_each() -> list[str]:
        outcomes = []
        for target in targets:
            try:
                target.read_bytes()
                outcomes.append("read")
            except PermissionError:
                outcomes.append("denied")
        return outcomes

    nobody = User(NOBODY.pw_name, NOBODY.pw_uid, NOBODY.pw_gid)
    assert as_user(nobody, try_each) == ["denied", "denied", "denied"]


def test_a_home_other_users_may_list_is_refused_at_start(tmp_path: Path) -> None:
    head = make_head(tmp_path / "home", config=FAST_CONFIG)
    head.home.chmod(0o755)
    for command in (("daemon", "start"), ("daemon", "run")):
        done = head.run(*command)
        assert done.returncode == 2, done
        assert done.stderr == (
            f"gbatch daemon: error: {head.home} may be read by other users (mode 755): they "
            f"could list its jobs' logs and runs. Run `chmod 700 {head.home}` (or 711 when "
            "other users connect to a socket inside it)\n"
        )
    assert sorted(p.name for p in head.home.iterdir()) == ["config.yaml"]  # nothing started
