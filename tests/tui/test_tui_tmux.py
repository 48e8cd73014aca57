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

import re
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Head
from tmuxterm import Terminal, private_terminal

WIDTH, HEIGHT = 120, 32
LINES = 40  # the job prints this many log lines, one every 0.3 s (12 s), then sleeps
TIMEOUT_S = 20.0


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    """A private tmux server's terminal (checked for before any daemon starts)."""
    with private_terminal() as term:
        yield term


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
    terminal.start(tui_command(tui_head, exit_file), tui_head.env, Path.cwd(), WIDTH, HEIGHT)

    # The queue, sorted by id: the held job first, the chatty one under it.
    rows = re.compile(rf"^\s*{idle}\s.*idle.*\n\s*{chatty}\s.*chatty\s+R\s", re.MULTILINE)
    terminal.until(rows.search, "both jobs in the queue")
    terminal.keys("Down", "Enter")
    terminal.until(lambda s: f"job {chatty} 'chatty' of" in s and "RUNNING" in s, "the job view")

    tick = re.compile(rf"tick-{token}-(\d+)")
    first = terminal.until(tick.search, "a log line on screen")
    first_seen = max(int(n) for n in tick.findall(first))
    last_line = f"tick-{token}-{LINES}"
    screen = terminal.until(lambda s: last_line in s, "the job's latest log line")
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
