"""gbatch.nodes.resolve: mount paths followed strictly, in this process and as the
program that runs on a node (a real child Python). Switching to the submitter needs
root: tests/integration/test_run_as_submitter.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gbatch.nodes.base import CommandResult, HostError
from gbatch.nodes.resolve import (
    Resolved,
    follow,
    own_fuse_mounts,
    parse_resolved,
    resolve_here,
    resolver_argv,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "data" / "alice" / "run").mkdir(parents=True)
    (tmp_path / "data" / "alice" / "link-etc").symlink_to("/etc")
    (tmp_path / "data" / "alice" / "up").symlink_to("../alice/run")
    (tmp_path / "data" / "alice" / "loop").symlink_to("loop")
    (tmp_path / "data" / "alice" / "file").write_text("x")
    return tmp_path


def test_symlinks_are_followed_absolute_and_relative(tree: Path) -> None:
    alice = tree / "data" / "alice"
    assert follow(str(alice / "link-etc")) == "/etc"
    assert follow(str(alice / "link-etc" / "ssh")) == "/etc/ssh"
    assert follow(str(alice / "up")) == str(alice / "run")
    assert follow(str(alice / "run" / ".." / "link-etc")) == "/etc"
    assert follow(f"{alice}//./run/") == str(alice / "run")


def test_a_missing_tail_is_kept_as_written(tree: Path) -> None:
    alice = tree / "data" / "alice"
    assert follow(str(alice / "new" / "dir")) == str(alice / "new" / "dir")
    assert follow(str(alice / "link-etc" / "no-such")) == "/etc/no-such"
    with pytest.raises(OSError, match="missing directory followed by"):
        follow(str(alice / "new" / ".." / "link-etc"))


def test_what_cannot_be_followed_is_an_error_not_a_pass(tree: Path) -> None:
    alice = tree / "data" / "alice"
    with pytest.raises(OSError, match="Too many levels"):
        follow(str(alice / "loop"))
    with pytest.raises(OSError, match="Not a directory"):
        follow(str(alice / "file" / "x"))


def test_the_program_answers_one_line_per_path(tree: Path) -> None:
    alice = tree / "data" / "alice"
    paths = [str(alice / "link-etc"), str(alice / "loop"), str(alice / "new")]
    done = subprocess.run(resolver_argv(sys.executable, None, paths), capture_output=True)
    resolved = parse_resolved(CommandResult(done.returncode, done.stdout, done.stderr), paths)
    assert resolved.paths == {paths[0]: "/etc", paths[2]: paths[2]}
    assert resolved.errors == {paths[1]: "Too many levels of symbolic links"}
    assert resolved(paths[0]) == "/etc" and resolved("/other") == "/other"
    with pytest.raises(ValueError, match="Too many levels"):
        resolved(paths[1])
    # In this process, as the daemon does when nobody else is to be become.
    assert resolve_here(None, paths) == resolved


def test_a_resolver_that_did_not_answer_is_a_host_error() -> None:
    with pytest.raises(HostError, match="python3: not found"):
        parse_resolved(CommandResult(127, b"", b"sh: python3: not found\n"), ["/a"])
    with pytest.raises(HostError, match="exited with 0"):
        parse_resolved(CommandResult(0, b"", b""), ["/a"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root follows any directory")
def test_a_closed_directory_is_refused_for_the_daemons_own_user(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / "link").symlink_to("/etc")
    closed.chmod(0)
    try:
        assert resolve_here(None, [str(closed / "link")]) == Resolved(
            {}, {str(closed / "link"): "Permission denied"}
        )
    finally:
        closed.chmod(0o700)


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /data rw,nosuid shared:20 - fuse.gcsfuse lab-bucket rw,user_id=0,group_id=0
41 22 0:36 / /data/alice/remote rw,nosuid shared:21 - fuse.sshfs a@h:/ rw,user_id=1001
42 22 0:37 / /data/alice/my\\040fs rw,nosuid,nodev shared:22 - fuse x rw,user_id=1001,group_id=1001
43 22 0:38 / /data/bob/fs rw,nosuid,nodev shared:23 - fuse.sshfs b@h:/ rw,user_id=1002,group_id=1002
44 22 0:39 / /data/alice/tmp rw master:3 - tmpfs tmpfs rw,uid=1001
"""


def test_only_the_fuse_file_systems_the_user_mounted_are_closed() -> None:
    """Those its server (the user) could keep waiting; an admin's (root's) FUSE stays open."""
    assert own_fuse_mounts(MOUNTINFO, 1001) == {"/data/alice/remote", "/data/alice/my fs"}
    assert own_fuse_mounts(MOUNTINFO, 1002) == {"/data/bob/fs"}
    assert own_fuse_mounts(MOUNTINFO, 0) == frozenset()
    assert own_fuse_mounts("garbage\n\n1 2 3\n", 1001) == frozenset()


def test_a_closed_mount_is_refused_without_being_looked_into(tree: Path) -> None:
    alice = tree / "data" / "alice"
    (alice / "fuse").mkdir()
    (alice / "to-fuse").symlink_to(alice / "fuse")
    closed = frozenset({str(alice / "fuse")})
    for path in (alice / "fuse" / "x", alice / "to-fuse"):
        with pytest.raises(OSError, match="is a FUSE file system you mounted; gbatch never"):
            follow(str(path), closed)
    assert follow(str(alice / "run"), closed) == str(alice / "run")
    # The program a host runs takes the same table (its own /proc/self/mountinfo).
    assert "def own_fuse_mounts" in resolver_argv(sys.executable, None, [])[4]
