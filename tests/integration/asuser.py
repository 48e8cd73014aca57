"""Acting as another real Unix user from a test that runs as root.

The venv's interpreter and the standard library live under /root (0700) in CI's
clone, so another user cannot exec them: `as_user` forks instead, drops to the user
(supplementary groups included) in the child and runs a function there. Whatever the
child needs must be imported BEFORE the fork (after it, /root is unreadable):
`preload()` imports the CLI's lazily imported modules.

`temp_users` creates users and a group with useradd/groupadd, unique per run, and
removes them (userdel -r, groupdel) however the test ends.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import pwd
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Modules the CLI commands import inside their run(): loaded before a fork.
CLI_MODULES = (
    "gbatch.cli._main",
    "gbatch.render.formatting",
    "gbatch.protocol.wire",
    "gbatch.core.timefmt",
    "gbatch.jobspec.spec",
    "gbatch.site.config",
    "shlex",
    "yaml",
)


def preload(modules: Sequence[str] = CLI_MODULES) -> None:
    for name in modules:
        importlib.import_module(name)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def as_user(user: User, action: Callable[[], Any], timeout: int = 120) -> Any:
    """Run `action()` in a child that became `user` for good; return what it returned
    (JSON round trip), or raise AssertionError with the child's exception."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os.close(read_end)
        try:
            signal.alarm(timeout)  # a hung child must not hang the test
            os.setgroups(os.getgrouplist(user.name, user.gid))
            os.setgid(user.gid)
            os.setuid(user.uid)
            # A login's variables, as the user's own shell has them (sbatch exports them).
            entry = pwd.getpwuid(user.uid)
            os.environ.update(
                HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name, SHELL="/bin/sh"
            )
            outcome: dict[str, Any] = {"ok": action()}
        except BaseException as err:
            outcome = {"crash": repr(err)}
        try:
            data = json.dumps(outcome).encode()
        except (TypeError, ValueError) as err:
            data = json.dumps({"crash": f"result not JSON: {err!r}"}).encode()
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        raw = pipe.read()
    os.waitpid(pid, 0)
    if not raw:
        raise AssertionError(f"the child acting as {user.name} died (timeout {timeout} s?)")
    reply = json.loads(raw)
    if "crash" in reply:
        raise AssertionError(f"the child acting as {user.name} failed: {reply['crash']}")
    return reply["ok"]


def run_cli(home: Path, *argv: str) -> dict[str, Any]:
    """`gbatch ARGV` in this process (call it inside as_user): exit status and output."""
    from gbatch.cli._main import main

    os.environ["GBATCH_HOME"] = str(home)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # argparse's own usage errors
            status = exit_.code if isinstance(exit_.code, int) else 2
    return {"rc": status, "out": out.getvalue(), "err": err.getvalue(), "pid": os.getpid()}


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def temp_users(
    prefix: str, plain: Sequence[str], group: str | None = None, in_group: Sequence[str] = ()
) -> Iterator[dict[str, User]]:
    """Users named `<prefix>-<tag>-<name>` (tag unique per run). With `group`, the group
    `<prefix>-<tag>-<group>` is made too; a name in `in_group` joins it, supplementary,
    or as its primary group when written `name:primary`. Keys are the short names, and
    `group` maps to a User whose gid is the group's."""
    tag = secrets.token_hex(3)
    made: list[str] = []
    group_name = f"{prefix}-{tag}-{group}" if group else None
    users: dict[str, User] = {}
    try:
        if group_name:
            _run("groupadd", group_name)
        for short in [*plain, *in_group]:
            base, _, how = short.partition(":")
            name = f"{prefix}-{tag}-{base}"
            args = ["useradd", "-M", "-s", "/usr/sbin/nologin"]
            if short in in_group and how == "primary":
                args += ["-g", str(group_name)]
            elif short in in_group:
                args += ["-G", str(group_name)]
            _run(*args, name)
            made.append(name)
            entry = pwd.getpwnam(name)
            users[base] = User(name, entry.pw_uid, entry.pw_gid)
        if group_name:
            import grp

            users[str(group)] = User(group_name, -1, grp.getgrnam(group_name).gr_gid)
        yield users
    finally:
        for name in made:
            subprocess.run(["userdel", "-r", name], capture_output=True, timeout=60)
        if group_name:
            subprocess.run(["groupdel", group_name], capture_output=True, timeout=60)
