"""`gbatch tui` in a real terminal: tmux runs the real command against a real daemon,
keys go in through `tmux send-keys` and the screen is read back with `capture-pane`.

The Pilot tests drive the app in-process and headless; this one checks what they
cannot: the console script starts, takes over a terminal, renders into it, answers
keys, follows a running job's log on screen and gives the terminal back on `q`.

Each test starts its own tmux server on a socket in a temp dir (never the user's),
and kills it at the end whatever happened. Needs tmux: `.ci/setup-terminal.sh` (root)
installs it; without it the test skips locally and fails with CI=true.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Head, remove_tree

WIDTH, HEIGHT = 120, 32
LINES = 40  # the job prints this many log lines, one every 0.3 s (12 s), then sleeps
TIMEOUT_S = 20.0


def require_tmux() -> str:
    """tmux's path; a skip without it locally, a failure in CI."""
    path = shutil.which("tmux")
    if path is None:
        message = "tmux is not installed; run .ci/setup-terminal.sh as root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


class Terminal:
    """One detached tmux session of WIDTH x HEIGHT on a private tmux server."""

    def __init__(self, tmux: str, socket: Path) -> None:
        self.tmux = tmux
        self.socket = socket
        self.session = f"gbatch-tui-{uuid.uuid4().hex[:8]}"
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

    def start(self, command: str, env: dict[str, str]) -> None:
        """Run `command` (a shell line) in a new session; the server starts with it,
        in `env` (and TERM, SHELL=/bin/sh: its default-shell runs the line)."""
        self.env = {"TERM": "xterm-256color", **env, "SHELL": "/bin/sh"}
        size = ("-x", str(WIDTH), "-y", str(HEIGHT))
        done = self._run("new-session", "-d", *size, "-s", self.session, command)
        assert done.returncode == 0, f"tmux new-session failed: {done.stderr}"

    def keys(self, *keys: str) -> None:
        """Send tmux key names (`Down`, `Enter`, `q`), as a user would type them."""
        done = self._run("send-keys", "-t", self.session, *keys)
        assert done.returncode == 0, f"tmux send-keys failed: {done.stderr}"

    def screen(self) -> str:
        """What the pane shows now ("" once the session is gone)."""
        return self._run("capture-pane", "-p", "-t", self.session).stdout

    def alive(self) -> bool:
        return self._run("has-session", "-t", self.session).returncode == 0

    def kill(self) -> None:
        self._run("kill-server")


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    """A private tmux server's terminal (checked for before any daemon starts)."""
    tmux = require_tmux()
    # Short and under /tmp: a unix socket's path has a length limit.
    base = Path(tempfile.mkdtemp(prefix="gbatch-tmux-", dir="/tmp"))
    term = Terminal(tmux, base / "tmux.sock")
    try:
        yield term
    finally:
        term.kill()
        remove_tree(base)


def until_screen(
    term: Terminal, predicate: Callable[[str], object], what: str, timeout: float = TIMEOUT_S
) -> str:
    """Poll the pane until `predicate(screen)` holds; fail with the last screen."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = term.screen()
        if predicate(screen):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; screen:\n{screen}")


def tui_command(head: Head, exit_file: Path) -> str:
    """`gbatch tui` as a user would start it, its exit status written to `exit_file`."""
    tui = shlex.join([sys.executable, "-m", "gbatch", "tui", "--refresh", "0.5"])
    home = shlex.quote(str(head.home))
    return f"GBATCH_HOME={home} {tui}; echo $? > {shlex.quote(str(exit_file))}"


def test_tui_in_tmux_follows_a_running_jobs_log_on_screen(
    terminal: Terminal, tui_head: Head
) -> None:
    token = uuid.uuid4().hex[:8]
    script = f"for i in $(seq 1 {LINES}); do echo tick-{token}-$i; sleep 0.3; done; sleep 300"
    idle = tui_head.sbatch("-J", "idle", "-H", "--wrap", "true")
    chatty = tui_head.sbatch("-J", "chatty", "--wrap", script)
    tui_head.wait_state(chatty, "RUNNING")
    exit_file = terminal.socket.parent / "exit-status"
    terminal.start(tui_command(tui_head, exit_file), tui_head.env)

    # The queue, sorted by id: the held job first, the chatty one under it.
    rows = re.compile(rf"^\s*{idle}\s.*idle.*\n\s*{chatty}\s.*chatty\s+R\s", re.MULTILINE)
    until_screen(terminal, rows.search, "both jobs in the queue")
    terminal.keys("Down", "Enter")
    until_screen(
        terminal, lambda s: f"job {chatty} 'chatty' of" in s and "RUNNING" in s, "the job view"
    )

    tick = re.compile(rf"tick-{token}-(\d+)")
    first = until_screen(terminal, tick.search, "a log line on screen")
    first_seen = max(int(n) for n in tick.findall(first))
    last_line = f"tick-{token}-{LINES}"
    screen = until_screen(terminal, lambda s: last_line in s, "the job's latest log line")
    # Followed live: a line was on screen while the job still wrote more.
    assert first_seen < LINES, f"only saw the log once the job had written it all: {first}"
    # The latest line is the log's last (the daemon's copy agrees) and sits at the bottom
    # of the log pane, under the lines before it.
    logged = tui_head.run("logs", str(chatty), check=True).stdout.splitlines()
    assert logged[-1] == last_line
    shown = [int(n) for n in tick.findall(screen)]
    assert shown == list(range(shown[0], LINES + 1)) and len(shown) >= 5, screen

    terminal.keys("q")
    deadline = time.monotonic() + TIMEOUT_S
    while terminal.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not terminal.alive(), f"the TUI did not quit on q; screen:\n{terminal.screen()}"
    assert exit_file.read_text().strip() == "0", "gbatch tui exited with a failure status"
