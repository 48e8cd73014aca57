"""A real terminal for tests: a detached tmux session on a private tmux server.

Keys go in through `tmux send-keys`, the screen comes back with `capture-pane`, the
window is resized with `resize-window`. Needs tmux (`.ci/setup-terminal.sh`); without it
a test skips locally and fails with CI=true.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TIMEOUT_S = 30.0


def require_tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        message = "tmux is not installed; run .ci/setup-terminal.sh as root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


class Terminal:
    """One detached tmux session of `width` x `height` on a private tmux server."""

    def __init__(self, tmux: str, socket: Path) -> None:
        self.tmux = tmux
        self.socket = socket
        self.session = f"gbatch-{uuid.uuid4().hex[:8]}"
        self.env = dict(os.environ)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.tmux, "-S", str(self.socket), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )

    def start(
        self, command: str, env: dict[str, str], cwd: Path, width: int = 100, height: int = 30
    ) -> None:
        """Run `command` (a shell line) in a new session, in `env` and `cwd`."""
        self.env = {"TERM": "xterm-256color", **env, "SHELL": "/bin/sh"}
        size = ("-x", str(width), "-y", str(height))
        done = self._run("new-session", "-d", *size, "-c", str(cwd), "-s", self.session, command)
        assert done.returncode == 0, f"tmux new-session failed: {done.stderr}"

    def keys(self, *keys: str, literal: bool = False) -> None:
        """Send tmux key names (`Enter`, `C-c`), or with `literal` text as typed."""
        flags = ["-l"] if literal else []
        done = self._run("send-keys", "-t", self.session, *flags, *keys)
        assert done.returncode == 0, f"tmux send-keys failed: {done.stderr}"

    def type(self, line: str) -> None:
        """Type `line` and Enter."""
        self.keys(line, literal=True)
        self.keys("Enter")

    def resize(self, width: int, height: int) -> None:
        done = self._run("resize-window", "-t", self.session, "-x", str(width), "-y", str(height))
        assert done.returncode == 0, f"tmux resize-window failed: {done.stderr}"

    def screen(self) -> str:
        return self._run("capture-pane", "-p", "-t", self.session).stdout

    def alive(self) -> bool:
        return self._run("has-session", "-t", self.session).returncode == 0

    def kill(self) -> None:
        self._run("kill-server")

    def until(
        self, predicate: Callable[[str], object], what: str, timeout: float = TIMEOUT_S
    ) -> str:
        """Poll the pane until `predicate(screen)` holds; fail with the last screen."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; screen:\n{screen}")

    def until_gone(self, timeout: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not self.alive(), f"the session did not end; screen:\n{self.screen()}"


@contextlib.contextmanager
def private_terminal() -> Iterator[Terminal]:
    """A Terminal on a tmux server of its own, killed and its files removed at the end
    (a skip without tmux locally, a failure with CI=true: checked before anything starts)."""
    tmux = require_tmux()
    # Short and under /tmp: a unix socket's path has a length limit.
    base = Path(tempfile.mkdtemp(prefix="gbatch-tmux-", dir="/tmp"))
    term = Terminal(tmux, base / "tmux.sock")
    try:
        yield term
    finally:
        term.kill()
        shutil.rmtree(base, ignore_errors=True)
