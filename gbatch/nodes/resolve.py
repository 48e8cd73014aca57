"""Mount paths resolved with the submitter's rights, on whichever machine checks them.

A mount source is checked against the mount roots after following its symlinks. Who
follows them matters: docker binds as root, so a path the submitter could not reach
(a directory of someone else's on the way, or a 0700 `/data/{user}` the daemon's user
cannot enter) would otherwise reach the container anyway. So the paths are resolved
by a small program that first becomes the submitter (uid, gid, groups) when it runs
as root, and that refuses, instead of passing unresolved, any path a directory on the
way keeps it from following: `realpath -m` would silently stop there, which is how a
symlink to /etc in a 0700 root once reached `docker run`. A missing path is not an
error (it may exist only on the GPU hosts; docker refuses a missing bind source).

A FUSE file system the submitter mounted is never looked into (own_fuse_mounts): its
server, theirs, could keep the look waiting, and a container's start waits on it.

The program is RESOLVER_SOURCE (`follow`, the FUSE table and a main), run as
`python -I -S -c RESOLVER_SOURCE --as UID GID GROUPS -- PATH...` on the head (at
submit) and on the node (as the run starts), so a host needs nothing but the Python
its agent runs on. Its answer is one JSON object per
path: {"path": real} or {"error": why}.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gbatch.nodes.base import CommandResult, HostError
from gbatch.site.policy import RunAs


def follow(path: str, closed: frozenset[str] = frozenset()) -> str:
    """`path` with every symlink followed, as far as it exists.

    OSError when a directory on the way cannot be searched (or a loop, or a file used
    as a directory), or is one of `closed` (own_fuse_mounts: never looked into, since a
    file system its user serves may keep a look waiting). Part of RESOLVER_SOURCE:
    stdlib only, any Python 3.
    """
    todo = [p for p in path.split("/") if p not in ("", ".")]
    done, hops = "/", 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, part)
        if here in closed:
            raise OSError(
                errno.EACCES, f"{here} is a FUSE file system you mounted; gbatch never waits on one"
            )
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            if ".." in todo:
                raise OSError(errno.ENOENT, "a missing directory followed by ..") from None
            return os.path.join(here, *todo)
        if stat.S_ISLNK(mode):
            hops += 1
            if hops > 40:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
            target = os.readlink(here)
            if target.startswith("/"):
                done = "/"
            todo[:0] = [p for p in target.split("/") if p not in ("", ".")]
            continue
        if todo and not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        done = here
    return done


def own_fuse_mounts(mountinfo: str, uid: int) -> frozenset[str]:
    """The mount points of the FUSE file systems that the user `uid` mounted; none for root.

    Read from `mountinfo` (/proc/self/mountinfo's text; fusermount's user_id=). A
    process that serves a file system may leave a stat of it waiting as long as it
    likes; the resolver runs as the submitter, on the daemon's loop as a container job
    starts, so it never looks into one the submitter serves. Part of RESOLVER_SOURCE.
    """
    if uid == 0:
        return frozenset()
    points = set()
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        kind, options = fields[dash + 1 : dash + 2], fields[dash + 3 : dash + 4]
        if not kind or not (kind[0] == "fuse" or kind[0].startswith("fuse.")):
            continue
        if options and f"user_id={uid}" in options[0].split(","):
            # Octal escapes for space, tab, newline and backslash, as the kernel writes them.
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return frozenset(points)


def read_own_fuse_mounts() -> frozenset[str]:
    """own_fuse_mounts of this process's user, from this process's mount table.

    Part of RESOLVER_SOURCE.
    """
    try:
        with open("/proc/self/mountinfo") as table:
            return own_fuse_mounts(table.read(), os.getuid())
    except OSError:
        return frozenset()


_RESOLVER_MAIN = """
args = sys.argv[1:]
if args[:1] == ["--as"]:
    uid, gid = int(args[1]), int(args[2])
    groups = [int(g) for g in args[3].split(",") if g]
    args = args[4:]
    if os.geteuid() == 0 and uid != 0:
        os.setgroups(sorted({gid, *groups}))
        os.setgid(gid)
        os.setuid(uid)
closed = read_own_fuse_mounts()
for path in args[1:]:
    try:
        answer = {"path": follow(path, closed)}
    except OSError as err:
        answer = {"error": err.strerror or str(err)}
    print(json.dumps(answer))
"""
RESOLVER_SOURCE = (
    "from __future__ import annotations\nimport errno, json, os, re, stat, sys\n"
    + "".join(inspect.getsource(f) for f in (follow, own_fuse_mounts, read_own_fuse_mounts))
    + _RESOLVER_MAIN
)


@dataclass(frozen=True)
class Resolved:
    """Each path's real path, or why it could not be followed (`errors`)."""

    paths: Mapping[str, str]
    errors: Mapping[str, str]

    def __call__(self, path: str) -> str:
        """The real path, as gbatch.site.policy's `resolve` callback; ValueError when the
        path could not be followed with the submitter's rights."""
        if path in self.errors:
            raise ValueError(self.errors[path])
        return self.paths.get(path, path)


def resolver_argv(python: str, run_as: RunAs | None, paths: Sequence[str]) -> list[str]:
    """The command that resolves `paths` as `run_as` (None: as whoever runs it)."""
    identity = (
        ["--as", str(run_as.uid), str(run_as.gid), ",".join(str(g) for g in run_as.groups)]
        if run_as is not None
        else []
    )
    return [python, "-I", "-S", "-c", RESOLVER_SOURCE, *identity, "--", *paths]


def parse_resolved(result: CommandResult, paths: Sequence[str]) -> Resolved:
    """The resolver's answer; HostError when it did not give one line per path."""
    lines = result.stdout.decode(errors="replace").splitlines()
    if result.exit_status != 0 or len(lines) != len(paths):
        error = result.stderr.decode(errors="replace").strip().splitlines()
        raise HostError(
            error[-1] if error else f"the resolver exited with {result.exit_status}",
            answer_lost=False,
        )
    real: dict[str, str] = {}
    errors: dict[str, str] = {}
    for path, line in zip(paths, lines, strict=True):
        answer = json.loads(line)
        if "path" in answer:
            real[path] = str(answer["path"])
        else:
            errors[path] = str(answer.get("error", "cannot be followed"))
    return Resolved(real, errors)


def resolve_here(run_as: RunAs | None, paths: Sequence[str], timeout: float = 30.0) -> Resolved:
    """Resolve `paths` on this machine as `run_as`: the daemon's check at submit.

    A child process only when it must change user; otherwise in this process's own
    rights, as strictly. Raises HostError.
    """
    if run_as is None or os.geteuid() != 0 or run_as.uid == 0:
        # The same program, without a process: nobody to become.
        return _resolve_in_process(paths)
    argv = resolver_argv(sys.executable, run_as, paths)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise HostError(f"cannot resolve mount paths: {err}", answer_lost=False) from err
    return parse_resolved(CommandResult(done.returncode, done.stdout, done.stderr), paths)


def _resolve_in_process(paths: Sequence[str]) -> Resolved:
    real: dict[str, str] = {}
    errors: dict[str, str] = {}
    closed = read_own_fuse_mounts()
    for path in paths:
        try:
            real[path] = follow(path, closed)
        except OSError as err:
            errors[path] = err.strerror or str(err)
    return Resolved(real, errors)
