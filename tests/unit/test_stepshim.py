"""The step shim (gbatch/nodes/stepshim.py) against a client on a socketpair: pipes and a
pseudo-terminal, input, size, Ctrl-C, its exit, and a client that goes away."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.core import stepframes as frames
from gbatch.nodes.stepshim import Options, parse_args, session_members


class Client:
    """The client's end: frames out, frames in."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = frames.FrameReader(frames.TO_CLIENT)
        self.out = b""
        self.err = b""
        self.errors: list[bytes] = []
        self.exit: tuple[int, int] | None = None

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, predicate: object, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                break
            for kind, payload in self.reader.feed(data):
                if kind == frames.STDOUT:
                    self.out += payload
                elif kind == frames.STDERR:
                    self.err += payload
                elif kind == frames.ERROR:
                    self.errors.append(payload)
                elif kind == frames.EXIT:
                    self.exit = frames.read_exit(payload)
        assert predicate(), (self.out, self.err, self.exit)  # type: ignore[operator]

    def wait_exit(self) -> tuple[int, int]:
        self.read_until(lambda: self.exit is not None)
        assert self.exit is not None
        return self.exit


@pytest.fixture
def start(tmp_path: Path) -> Iterator[object]:
    shims: list[subprocess.Popen[bytes]] = []

    def started(*words: str, pty: tuple[int, int] | None = None) -> tuple[Client, Path]:
        ours, theirs = socket.socketpair()
        step_dir = tmp_path / f"step.{len(shims)}"
        step_dir.mkdir()
        size = [] if pty is None else ["--pty", str(pty[0]), str(pty[1])]
        argv = [str(step_dir), "--cwd", str(tmp_path), *size, "--grace", "1", "--", *words]
        shims.append(
            subprocess.Popen(
                [sys.executable, "-m", "gbatch.nodes.stepshim", str(theirs.fileno()), *argv],
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        )
        theirs.close()
        return Client(ours), step_dir

    yield started
    for shim in shims:
        shim.wait(timeout=30)


def recorded(step_dir: Path) -> dict[str, object]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            return dict(json.loads((step_dir / "exit.json").read_text()))
        except FileNotFoundError:
            time.sleep(0.05)
    raise AssertionError("no exit.json")


def test_the_arguments_parse_as_the_node_writes_them() -> None:
    assert parse_args(["/r/step.0", "--as", "1000", "1000", "27,100", "/home/a", "--pty",
                       "24", "80", "--grace", "2.5", "--", "bash", "-l"]) == Options(
        Path("/r/step.0"), ["bash", "-l"], pty=(24, 80), grace=2.5,
        identity=__import__("gbatch.shim").shim.Identity(1000, 1000, (27, 100), "/home/a"),
    )  # fmt: skip
    assert parse_args(["/r/step.0", "--", "true"]) == Options(Path("/r/step.0"), ["true"])
    assert parse_args(["/r/step.0", "--bogus", "--", "true"]) is None
    assert parse_args(["/r/step.0", "--pty", "24"]) is None


def test_pipes_carry_stdout_stderr_stdin_and_the_exit(start: object, tmp_path: Path) -> None:
    client, step_dir = start(  # type: ignore[operator]
        "sh", "-c", "pwd; cat; echo oops >&2; exit 3"
    )
    client.send(frames.frame(frames.STDIN, b"typed\n") + frames.frame(frames.STDIN_EOF))
    assert client.wait_exit() == (3, 0)
    assert client.out == f"{tmp_path}\ntyped\n".encode()
    assert client.err == b"oops\n"
    assert recorded(step_dir)["exit_code"] == 3
    assert json.loads((step_dir / "pids.json").read_text())["session"] > 0


def test_a_terminal_is_the_steps_own_follows_resizes_and_turns_ctrl_c_into_sigint(
    start: object,
) -> None:
    client, _ = start(  # type: ignore[operator]
        "sh", "-c", "tty; stty size; read line; stty size; exec sleep 60", pty=(30, 90)
    )
    client.read_until(lambda: b"30 90" in client.out)
    assert client.out.startswith(b"/dev/pts/")
    client.send(frames.resize_frame(50, 132) + frames.frame(frames.STDIN, b"go\r"))
    client.read_until(lambda: b"50 132" in client.out)
    time.sleep(0.3)  # sleep has started
    client.send(frames.frame(frames.STDIN, b"\x03"))
    assert client.wait_exit() == (0, 2)  # SIGINT, from the terminal's own line discipline


def test_a_signal_frame_reaches_the_step(start: object) -> None:
    client, _ = start("sleep", "60")  # type: ignore[operator]
    time.sleep(0.3)
    client.send(frames.signal_frame(15))
    assert client.wait_exit() == (0, 15)


def test_a_missing_program_is_told_to_the_client_and_recorded(start: object) -> None:
    client, step_dir = start("no-such-program-here")  # type: ignore[operator]
    assert client.wait_exit() == (127, 0)
    assert b"cannot start 'no-such-program-here'" in client.errors[0]
    assert "No such file" in str(recorded(step_dir)["error"])


def test_a_client_that_goes_away_hangs_the_step_up(start: object) -> None:
    client, step_dir = start("sleep", "60", pty=(24, 80))  # type: ignore[operator]
    time.sleep(0.3)
    client.sock.close()
    record = recorded(step_dir)
    assert (record["signal"], record["hangup"]) == (1, True)  # SIGHUP, as a closed terminal


def test_a_step_deaf_to_the_hangup_is_killed_after_the_grace(start: object) -> None:
    client, step_dir = start(  # type: ignore[operator]
        "sh", "-c", "trap '' HUP; echo ready; sleep 60"
    )
    client.read_until(lambda: b"ready" in client.out)
    client.sock.close()
    began = time.monotonic()
    record = recorded(step_dir)
    assert record["hangup"] is True and record["signal"] == 9
    assert time.monotonic() - began < 10


def test_what_a_step_leaves_behind_ends_with_it(start: object) -> None:
    client, step_dir = start(  # type: ignore[operator]
        "sh", "-c", "sleep 300 & echo $!"
    )
    assert client.wait_exit() == (0, 0)
    session = json.loads((step_dir / "pids.json").read_text())["session"]
    deadline = time.monotonic() + 10
    while session_members(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_members(session) == []
    assert not os.path.exists(f"/proc/{int(client.out)}")
