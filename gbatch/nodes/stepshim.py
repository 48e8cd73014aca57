"""The supervisor of one step: its command on a pseudo-terminal or pipes, relayed to its client.

    python -m gbatch.nodes.stepshim CLIENT_FD STEP_DIR [--as UID GID GROUPS WORKDIR |
        --cwd DIR] [--pty ROWS COLS] [--grace SECONDS] -- ARGV...

or forked by the shim server (gbatch/nodes/shimserver.py), which calls `run` with the
client's descriptor. CLIENT_FD is the connection `gbatch srun` opened to gbatchd:
gbatchd answered its request, then handed the connection here, so the step's bytes go
between the client and this process without passing through gbatchd, and a gbatchd
restart leaves an attached step alone. The connection carries frames
(gbatch/core/stepframes.py): stdin, resize and signals in; stdout, stderr and the exit
status out.

The shim starts ARGV in a session of its own (as the job's user with --as, exactly as
gbatch.shim starts a bare job), on a new pseudo-terminal that becomes the session's
controlling terminal with --pty (window size ROWS x COLS, resized by RESIZE frames;
Ctrl-C typed at the client is the byte 0x03, which the terminal turns into SIGINT for
the foreground process group), else on three pipes. It records STEP_DIR/pids.json (the
session) and, once the step has ended, STEP_DIR/exit.json; it holds the step's lock
(STEP_DIR/step.lock, passed in, taken by gbatchd) for its whole life, which tells a
restarted gbatchd that the step lives.

gbatchd tells the step's client something (a warning before the job's time limit, why
the job is ending) by appending lines to STEP_DIR/notices and sending the shim SIGUSR1:
the shim relays each new line as a STDERR frame (every client prints those), ending in
\r\n on a terminal (the client's is in raw mode).

A client that goes away (its connection closes) hangs the step up, as a closed terminal
does: the pseudo-terminal's master is closed (the kernel sends SIGHUP), pipes' processes
get SIGHUP, and whatever of the step's session is left after --grace seconds is killed.
When the step's first process exits, what it left behind in its session is killed too
(a step's processes end with it, as in Slurm). A bare job's step starts in its run's
cgroup (gbatch.nodes.cgroups), as the run's own processes do, so the run's -c and --mem
hold the step too. stdlib and gbatch's shim only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from functools import partial
from pathlib import Path

from gbatch import shim
from gbatch.core import stepframes as frames
from gbatch.nodes.cgroups import JobCgroup

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

LOCK_FILE = "step.lock"
NOTICES_FILE = "notices"  # lines gbatchd has for the client (tell on SIGUSR1)
NOTICE_SIGNAL = signal.SIGUSR1
# A step's own --mem (srun --mem inside a job), in MiB: its RLIMIT_DATA even where the
# job's cgroup holds the job's memory (that cgroup holds the job's total, not the step's).
STEP_MEM_ENV = "GBATCH_STEP_MEM_MB"
# After the step's first process exits: how long its output may still take to arrive.
OUTPUT_GRACE_SECONDS = 0.5
# The most the output of what the step left behind may keep it from ending.
DRAIN_SECONDS = 5.0
# Buffered bytes past which the shim stops reading the other side (back-pressure).
HIGH_WATER = 1 << 20
# How long the last frames may take to reach a client that stopped reading.
FLUSH_SECONDS = 10.0
USAGE = (
    "usage: python -m gbatch.nodes.stepshim CLIENT_FD STEP_DIR [--as UID GID GROUPS WORKDIR | "
    "--cwd DIR] [--pty ROWS COLS] [--grace SECONDS] -- ARGV..."
)


class Options(shim._Record):
    """The step's arguments: where it records itself, whom it runs as, how it is attached."""

    __slots__ = ("argv", "cwd", "grace", "identity", "pty", "step_dir")

    def __init__(
        self,
        step_dir: Path,
        argv: list[str],
        identity: shim.Identity | None = None,
        pty: tuple[int, int] | None = None,
        grace: float = 10.0,
        cwd: str | None = None,
    ) -> None:
        self.step_dir = step_dir
        self.argv = argv
        self.identity = identity
        self.pty = pty
        self.grace = grace
        self.cwd = cwd  # where a step run as the shim's own user starts (--as has its own)

    @property
    def workdir(self) -> str | None:
        return self.identity.workdir if self.identity is not None else self.cwd


def parse_args(argv: list[str]) -> Options | None:
    """The step's Options from its arguments; None when they do not fit.

    They are `STEP_DIR [--as ...|--cwd DIR] [--pty R C] [--grace S] -- ARGV`."""
    if "--" not in argv or not argv:
        return None
    split = argv.index("--")
    head, command = argv[:split], argv[split + 1 :]
    if not head or not command:
        return None
    options = Options(Path(head[0]), command)
    rest = head[1:]
    try:
        while rest:
            word = rest.pop(0)
            if word == "--as":
                uid, gid, groups, workdir = rest[:4]
                del rest[:4]
                options.identity = shim.Identity(
                    int(uid), int(gid), tuple(int(g) for g in groups.split(",") if g), workdir
                )
            elif word == "--pty":
                options.pty = (int(rest[0]), int(rest[1]))
                del rest[:2]
            elif word == "--cwd":
                options.cwd = rest.pop(0)
            elif word == "--grace":
                options.grace = float(rest.pop(0))
            else:
                return None
    except (IndexError, ValueError):
        return None
    return options


def _prepare_child(pty: bool, limits: shim.Limits, workdir: str | None) -> None:
    """In the step's process, after setsid and the switch to its user: the terminal made
    its controlling one, the limits applied, the workdir entered."""
    if pty:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    limits.apply()
    if workdir is not None:
        shim._enter_workdir(workdir)


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _tty_gid() -> int:
    import grp  # deferred: only a step on a terminal for another user

    try:
        return grp.getgrnam("tty").gr_gid
    except KeyError:
        return -1


def session_members(session: int) -> list[int]:
    """The pids of the processes in `session` (from /proc)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 4 and int(fields[3]) == session:
            found.append(int(entry))
    return found


def signal_session(session: int, sig: int) -> None:
    """Send `sig` to every process of `session` (its leader included)."""
    for pid in session_members(session):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Relay:
    """The step's process and its client, and the bytes between them, until both are done."""

    def __init__(self, client: socket.socket, child: subprocess.Popen[bytes], grace: float) -> None:
        self.client = client
        self.child = child
        self.grace = grace
        self.to_client = bytearray()
        self.to_child = bytearray()
        self.reader = frames.FrameReader(frames.TO_STEP)
        self.client_gone = False
        self.hung_up_at: float | None = None
        self.killed = False
        self.exited_at: float | None = None
        self.last_output = time.monotonic()
        self.stdin_eof = False
        self.notices: Path | None = None  # STEP_DIR/notices, read from notices_read on
        self.notices_read = 0

    # The line end the client's terminal needs: a pty client's is in raw mode. Notices
    # start on a line of their own there (the cursor may sit after a prompt).
    line_end = b"\n"
    notices_start = b""

    # -- what a kind of attachment does (a terminal's or pipes') -----------------------

    def outputs(self) -> dict[int, int]:  # fd -> the frame kind its bytes go out as
        raise NotImplementedError

    def input_fd(self) -> int | None:
        raise NotImplementedError

    def resize(self, rows: int, cols: int) -> None:
        raise NotImplementedError

    def deliver(self, sig: int) -> None:
        raise NotImplementedError

    def end_input(self) -> None:
        raise NotImplementedError

    def hang_up(self) -> None:
        raise NotImplementedError

    def close_output(self, fd: int) -> None:
        raise NotImplementedError

    # -- the loop ---------------------------------------------------------------------

    def run(self, wake: int) -> None:
        """Relay until the step's process has exited and its output has drained."""
        selector = selectors.DefaultSelector()
        self.client.setblocking(False)
        try:
            while not self._done():
                self._register(selector, wake)
                timeout = self._timeout()
                for key, events in selector.select(timeout):
                    fd = int(key.fd)
                    if fd == wake:
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake, 4096)
                        self.tell()
                        self._reap()
                    elif fd == self.client.fileno():
                        if events & selectors.EVENT_READ:
                            self._from_client()
                        if events & selectors.EVENT_WRITE and not self.client_gone:
                            self._flush_client()
                    else:  # a terminal's master is the step's input and its output
                        if events & selectors.EVENT_WRITE and fd == self.input_fd():
                            self._flush_child()
                        kind = self.outputs().get(fd)
                        if events & selectors.EVENT_READ and kind is not None:
                            self._from_output(fd, kind)
                self._reap()
                self._after_hangup()
        finally:
            selector.close()

    def _register(self, selector: selectors.BaseSelector, wake: int) -> None:
        wanted: dict[int, int] = {wake: selectors.EVENT_READ}
        if not self.client_gone:
            events = 0
            if len(self.to_child) < HIGH_WATER:
                events |= selectors.EVENT_READ
            if self.to_client:
                events |= selectors.EVENT_WRITE
            if events:
                wanted[self.client.fileno()] = events
        if len(self.to_client) < HIGH_WATER or self.client_gone:
            for fd in self.outputs():
                wanted[fd] = selectors.EVENT_READ
        target = self.input_fd()
        if target is not None and self.to_child:
            wanted[target] = wanted.get(target, 0) | selectors.EVENT_WRITE
        registered = {int(key.fd): key.events for key in selector.get_map().values()}
        for fd in set(registered) - set(wanted):
            selector.unregister(fd)
        for fd, events in wanted.items():
            if fd not in registered:
                selector.register(fd, events)
            elif registered[fd] != events:
                selector.modify(fd, events)

    def _timeout(self) -> float | None:
        if self.exited_at is not None:
            return OUTPUT_GRACE_SECONDS
        if self.hung_up_at is not None and not self.killed:
            return max(0.05, self.hung_up_at + self.grace - time.monotonic())
        return None

    def _done(self) -> bool:
        """The step's first process has exited and its output has drained: its outputs
        closed, or silent for OUTPUT_GRACE_SECONDS (what it left behind may hold them
        open), or still running on DRAIN_SECONDS after the exit."""
        if self.exited_at is None:
            return False
        if not self.outputs():
            return True
        now = time.monotonic()
        if now - self.exited_at >= DRAIN_SECONDS:
            return True
        return now - max(self.exited_at, self.last_output) >= OUTPUT_GRACE_SECONDS

    def _reap(self) -> None:
        if self.exited_at is None and self.child.poll() is not None:
            self.exited_at = time.monotonic()

    def _from_client(self) -> None:
        try:
            data = self.client.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._client_left()
            return
        try:
            received = self.reader.feed(data)
        except frames.FrameError:
            self._client_left()
            return
        for kind, payload in received:
            try:
                if kind == frames.STDIN:
                    self.to_child += payload
                elif kind == frames.STDIN_EOF:
                    self.stdin_eof = True
                elif kind == frames.RESIZE:
                    self.resize(*frames.read_size(payload))
                elif kind == frames.SIGNAL:
                    self.deliver(frames.read_signal(payload))
            except frames.FrameError:
                continue
        self._flush_child()

    def _flush_child(self) -> None:
        target = self.input_fd()
        if target is None:
            self.to_child.clear()
            return
        while self.to_child:
            try:
                written = os.write(target, self.to_child[: 1 << 16])
            except BlockingIOError:
                return
            except OSError:
                self.to_child.clear()  # nobody reads it any more
                break
            del self.to_child[:written]
        if self.stdin_eof:
            self.end_input()

    def _from_output(self, fd: int, kind: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: a terminal whose every other end has closed
            data = b""
        if not data:
            self.close_output(fd)
            return
        self.last_output = time.monotonic()
        if not self.client_gone:
            for piece in frames.data_frames(kind, data):
                self.to_client += piece
            self._flush_client()

    def _flush_client(self) -> None:
        if not frames.flush(self.client, self.to_client):
            self._client_left()

    def _client_left(self) -> None:
        if self.client_gone:
            return
        self.client_gone = True
        self.to_client.clear()
        if self.exited_at is None:
            self.hung_up_at = time.monotonic()
            self.hang_up()

    def _after_hangup(self) -> None:
        if self.hung_up_at is None or self.killed or self.exited_at is not None:
            return
        if time.monotonic() >= self.hung_up_at + self.grace:
            self.killed = True
            signal_session(self.child.pid, signal.SIGKILL)

    def tell(self) -> None:
        """Relay the lines gbatchd appended to the notices file since the last look."""
        if self.notices is None or self.client_gone:
            return
        try:
            with open(self.notices, "rb") as handle:
                handle.seek(self.notices_read)
                data = handle.read(frames.MAX_PAYLOAD)
        except OSError:
            return
        whole = data[: data.rfind(b"\n") + 1]
        self.notices_read += len(whole)
        if whole and self.notices_start:
            self.to_client += frames.frame(frames.STDERR, self.notices_start)
        for line in whole.splitlines():
            self.to_client += frames.frame(frames.STDERR, line[:4096] + self.line_end)
        if whole:
            self._flush_client()

    def finish(self, exit_code: int, signum: int) -> None:
        """Send the EXIT frame (and whatever is still buffered) before closing."""
        if self.client_gone:
            return
        self.tell()
        self.to_client += frames.exit_frame(exit_code, signum)
        deadline = time.monotonic() + FLUSH_SECONDS
        self.client.setblocking(True)
        while self.to_client and time.monotonic() < deadline:
            self.client.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sent = self.client.send(self.to_client[: 1 << 16])
            except OSError:
                return
            del self.to_client[:sent]


class TerminalRelay(Relay):
    """A step on a pseudo-terminal: one stream out (STDOUT), keys in, size and signals."""

    line_end = b"\r\n"
    notices_start = b"\r\n"

    def __init__(
        self, client: socket.socket, child: subprocess.Popen[bytes], grace: float, master: int
    ) -> None:
        super().__init__(client, child, grace)
        self.master: int | None = master

    def outputs(self) -> dict[int, int]:
        return {} if self.master is None else {self.master: frames.STDOUT}

    def input_fd(self) -> int | None:
        return self.master

    def resize(self, rows: int, cols: int) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                _set_size(self.master, rows, cols)

    def deliver(self, sig: int) -> None:
        group = self.child.pid
        if self.master is not None:
            with contextlib.suppress(OSError):
                group = os.tcgetpgrp(self.master)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)

    def end_input(self) -> None:
        # The terminal's end-of-file character: a reader in canonical mode sees EOF.
        if self.master is not None and not self.to_child:
            with contextlib.suppress(OSError):
                os.write(self.master, b"\x04")
            self.stdin_eof = False

    def hang_up(self) -> None:
        self.close_output(self.master or -1)  # the kernel hangs the session up: SIGHUP

    def close_output(self, fd: int) -> None:
        if self.master is not None and fd == self.master:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None


class PipeRelay(Relay):
    """A step on pipes: stdout and stderr apart, stdin that may end."""

    def __init__(
        self,
        client: socket.socket,
        child: subprocess.Popen[bytes],
        grace: float,
        stdin: int,
        stdout: int,
        stderr: int,
    ) -> None:
        super().__init__(client, child, grace)
        self.stdin: int | None = stdin
        self.open_outputs = {stdout: frames.STDOUT, stderr: frames.STDERR}

    def outputs(self) -> dict[int, int]:
        return self.open_outputs

    def input_fd(self) -> int | None:
        return self.stdin

    def resize(self, rows: int, cols: int) -> None:
        pass  # no terminal to resize

    def deliver(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, sig)

    def end_input(self) -> None:
        if self.stdin is not None and not self.to_child:
            with contextlib.suppress(OSError):
                os.close(self.stdin)
            self.stdin = None

    def hang_up(self) -> None:
        self.end_input()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signal.SIGHUP)

    def close_output(self, fd: int) -> None:
        if self.open_outputs.pop(fd, None) is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _nonblocking(fd: int) -> None:
    os.set_blocking(fd, False)


def run(options: Options, client_fd: int) -> int:
    """Run the step of `options`, attached to the client on `client_fd`; the shim's status.

    The environment is the step's (os.environ, after shim.take_job_env); the limits come
    in it (shim.Limits) and are taken out."""
    shim.fresh_signals()  # the step's, whatever the daemon's starter ignored
    client = socket.socket(fileno=client_fd)
    step_dir = options.step_dir
    try:
        shim.take_job_env(os.environ)
    except (OSError, ValueError) as err:
        return _failed(client, step_dir, f"cannot read the step's environment: {err}", 126)
    limits = shim.Limits.take_from(os.environ)
    step_mem = os.environ.pop(STEP_MEM_ENV, "")
    run_cgroup = JobCgroup.take_from(os.environ)  # the job's run's: the step joins it
    identity = options.identity
    switch = identity.popen_options() if identity is not None else {}
    workdir = options.workdir
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd needs a handler
    relay: Relay
    try:
        with shim.run_cgroup_entered(run_cgroup, limits) as (_, limits):
            if step_mem.isdigit():
                limits = shim.Limits(limits.cpus, int(step_mem))
            pty = options.pty is not None
            switch["preexec_fn"] = partial(_prepare_child, pty, limits, workdir)
            if options.pty is not None:
                master, slave = os.openpty()
                _set_size(master, *options.pty)
                if identity is not None:
                    os.fchown(slave, identity.uid, _tty_gid())
                    os.fchmod(slave, 0o620)
                try:
                    child = subprocess.Popen(
                        options.argv, stdin=slave, stdout=slave, stderr=slave,
                        start_new_session=True, **switch,
                    )  # fmt: skip
                finally:
                    os.close(slave)
                _nonblocking(master)
                relay = TerminalRelay(client, child, options.grace, master)
            else:
                in_read, in_write = os.pipe()
                out_read, out_write = os.pipe()
                err_read, err_write = os.pipe()
                try:
                    child = subprocess.Popen(
                        options.argv, stdin=in_read, stdout=out_write, stderr=err_write,
                        start_new_session=True, **switch,
                    )  # fmt: skip
                finally:
                    for fd in (in_read, out_write, err_write):
                        os.close(fd)
                for fd in (in_write, out_read, err_read):
                    _nonblocking(fd)
                relay = PipeRelay(client, child, options.grace, in_write, out_read, err_read)
    except OSError as err:
        code = 127 if isinstance(err, FileNotFoundError) else 126
        return _failed(client, step_dir, f"cannot start {options.argv[0]!r}: {err.strerror}", code)
    # gbatchd signals the step's session, not the shim: stray signals must not end the
    # shim, which alone can tell the client and record the end. (Only now: an ignored
    # signal stays ignored across exec, and the step must get its own.)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    # Before pids.json names the shim: gbatchd signals it only once it is named there.
    relay.notices = step_dir / NOTICES_FILE
    signal.signal(NOTICE_SIGNAL, lambda *_: None)  # the wake-up fd tells the relay
    pids: dict[str, object] = {"shim": os.getpid(), "session": child.pid}
    shim.write_when_possible(step_dir / "pids.json", lambda: pids, durable=False)
    relay.run(wake_read)
    returncode = child.wait()
    end_time = time.time()
    # What the step left behind in its session ends with it.
    signal_session(child.pid, signal.SIGKILL)
    exit_code, killed_by = (returncode, 0) if returncode >= 0 else (0, -returncode)
    record: dict[str, object] = {
        "exit_code": exit_code,
        "signal": killed_by,
        "end_time": end_time,
        "hangup": relay.client_gone,
    }
    shim.write_when_possible(step_dir / "exit.json", lambda: record)
    relay.finish(exit_code, killed_by)
    with contextlib.suppress(OSError):
        client.close()
    return 0


def _failed(client: socket.socket, step_dir: Path, message: str, code: int) -> int:
    """The step could not start: say so to the client and record the end."""
    record: dict[str, object] = {
        "exit_code": code,
        "signal": 0,
        "end_time": time.time(),
        "hangup": False,
        "error": message,
    }
    shim.write_when_possible(step_dir / "exit.json", lambda: record)
    with contextlib.suppress(OSError):
        client.settimeout(FLUSH_SECONDS)
        client.sendall(frames.error_frame(message) + frames.exit_frame(code))
    with contextlib.suppress(OSError):
        client.close()
    return code


def main(argv: list[str], runner: Callable[[Options, int], int] = run) -> int:
    if len(argv) < 4 or not argv[0].isdigit():
        print(USAGE, file=sys.stderr)
        return 2
    options = parse_args(argv[1:])
    if options is None:
        print(USAGE, file=sys.stderr)
        return 2
    return runner(options, int(argv[0]))


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main(sys.argv[1:]))
    sys.exit(0)
