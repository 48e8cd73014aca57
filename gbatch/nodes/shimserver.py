"""The shim server: one long-lived Python process that forks a shim per bare job.

It stands in for a fresh interpreter for each job (an interpreter's start costs many
times a fork of this small process).

    python -m gbatch.nodes.shimserver FD

FD is one end of a socketpair the daemon made (SOCK_SEQPACKET): the server has no
address, so no other process, of this user or another, can reach it. It lives as long
as the daemon's end stays open, and reads one request a message: the shim's argv
(`gbatch.shim.main`'s), the job's environment and the directory to start in, with the
job's log and the run's lock as descriptors (SCM_RIGHTS); the shim opens the job's
output files itself (gbatch.nodes.outfiles). It answers {"pid": N} once the shim is
forked, or {"error": ...}; and it tells {"ended": N} when a shim of its exits (so the
daemon wakes at once).

The forked shim starts from the state a fresh `python -m gbatch.shim` has: a session
of its own (its pid is its session, as the daemon expects), default signal handlers
and an empty signal mask, stdin /dev/null, stdout and stderr the log, no descriptor
but those and the ones passed, the job's environment alone. Then it runs
`gbatch.shim.main`, the same code the plain shim runs: a job for another user is
started as that user exactly as there. The server runs as the daemon's user, as the
plain shim does.

The run's lock (RUN_DIR/shim.lock) tells a daemon, a restarted one too, that the run
exists though no `gbatch.shim` shows in /proc: the daemon takes it before it sends the
request, the request carries it (a descriptor in flight keeps the lock), and the forked
shim holds it until it exits. So from the request's sending to the shim's end, the lock
is held; if the server dies before it forks, the lock comes free and the run has surely
not started. Jobs go on when the server dies: each shim is a session of its own and
records the end in exit.json as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

log = logging.getLogger(__name__)

LOCK_FILE = "shim.lock"
MAX_MESSAGE = 1 << 20  # a request that does not fit goes to the plain shim
MAX_FDS = 3  # the log, the lock; and a step's client
REPLY_TIMEOUT = 30.0  # seconds the daemon waits for a fork's answer
RESTART_AFTER = 10.0  # seconds between starts of a server that died


# -- the server's side ---------------------------------------------------------------


def serve(sock: socket.socket) -> None:
    """Answer requests on `sock` until its other end closes.

    Single-threaded, so that a fork copies a consistent process.
    """
    # Preloaded here, not in each child: what the shim imports as it runs.
    import locale  # noqa: F401  (the shim's coerce_c_locale, in each child)
    import selectors  # also the shim's output copier

    import gbatch.nodes.outfiles  # a shim whose job names output files
    import gbatch.shim  # noqa: F401

    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd needs a handler
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        selector.register(wake_read, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_read, 4096)
                    for pid in _reap():
                        _send(sock, {"ended": pid})
                    continue
                message, fds, flags = _receive(sock)
                if not message and not fds:
                    return  # the daemon closed its end
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    _close_all(fds)
                    _send(sock, {"error": "the request is too large", "fallback": True})
                    continue
                _send(sock, start_run(json.loads(message), fds, devnull))


def _receive(sock: socket.socket) -> tuple[bytes, list[int], int]:
    message, ancillary, flags, _ = sock.recvmsg(
        MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
    )
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, usable, 4))
    return message, fds, flags


def _send(sock: socket.socket, message: Mapping[str, object]) -> None:
    sock.sendmsg([json.dumps(message).encode()], [], socket.MSG_NOSIGNAL)


def _reap() -> list[int]:
    ended: list[int] = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append(pid)


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def start_run(request: Mapping[str, object], fds: list[int], devnull: int) -> dict[str, object]:
    """Fork the shim of `request` with `fds` (log, lock; a step's: and its client); the answer.

    A request of kind "step" forks a step's shim (gbatch/nodes/stepshim.py), any other a
    run's."""
    step = request.get("kind") == "step"
    wanted = 3 if step else 2
    if len(fds) != wanted:
        _close_all(fds)
        return {"error": f"the request carries {len(fds)} descriptors, not {wanted}"}
    cwd = str(request["cwd"])
    try:
        # Entered before the fork, with the server's (the daemon's) rights, as the plain
        # shim's Popen(cwd=) enters it: a failure is the launch's, as it is there.
        os.chdir(cwd)
    except OSError as err:
        _close_all(fds)
        return {"error": f"cannot start the job: [Errno {err.errno}] {err.strerror}: {cwd!r}"}
    try:
        pid = os.fork()
    except OSError as err:
        os.chdir("/")
        _close_all(fds)
        return {"error": f"cannot fork: {err.strerror}", "fallback": True}
    if pid == 0:
        code = 1
        try:
            code = _run_step(request, fds, devnull) if step else _run_shim(request, fds, devnull)
        except BaseException:  # the child must never return into the server's loop
            import traceback

            with contextlib.suppress(BaseException):
                traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    os.chdir("/")
    _close_all(fds)
    return {"pid": pid}


def _run_shim(request: Mapping[str, object], fds: list[int], devnull: int) -> int:
    """In the forked child: the state of a fresh shim, then the shim itself."""
    from gbatch import shim

    _fresh_process(request, fds, devnull)
    argv = [str(a) for a in _sequence(request["argv"])]
    return shim.main(argv)


def _run_step(request: Mapping[str, object], fds: list[int], devnull: int) -> int:
    """In the forked child: the state of a fresh step shim, then the step shim itself."""
    from gbatch.nodes import stepshim

    _fresh_process(request, fds, devnull)
    options = stepshim.parse_args([str(a) for a in _sequence(request["argv"])])
    if options is None:
        print(stepshim.USAGE, file=sys.stderr)
        return 2
    return stepshim.run(options, fds[2])


def _fresh_process(request: Mapping[str, object], fds: list[int], devnull: int) -> None:
    """Make the forked child what a fresh `python -m` started by the daemon would be: a
    session of its own, stdin /dev/null and stdout, stderr the log (the first of `fds`),
    no descriptor but those and the rest of `fds`, the request's env. Its signals are
    made fresh by what runs next, as in a plain shim (shim.main, stepshim.run)."""
    from gbatch import shim

    os.setsid()
    signal.set_wakeup_fd(-1)
    log, *kept = fds
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    keep = sorted({0, 1, 2, *kept})
    for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
        os.closerange(low + 1, high)  # the server's socket, pipes and anything else
    env = {str(k): str(v) for k, v in _mapping(request["env"]).items()}
    os.environ.clear()
    os.environ.update(env)
    shim.coerce_c_locale(os.environ)


def _mapping(value: object) -> Mapping[object, object]:
    if not isinstance(value, dict):
        raise TypeError(f"not a mapping: {value!r}")
    return value


def _sequence(value: object) -> Sequence[object]:
    if not isinstance(value, list):
        raise TypeError(f"not a list: {value!r}")
    return value


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m gbatch.nodes.shimserver FD", file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        serve(socket.socket(fileno=int(argv[0])))  # those: the daemon is gone
    return 0


# -- the daemon's side ---------------------------------------------------------------


class ServerGone(Exception):
    """The server did not take the request: the plain shim must start the run."""


class ShimServer:
    """The daemon's handle on its shim server, started on the first run and again if it died.

    It is started again at most every RESTART_AFTER s. `start_run` raises ServerGone
    whenever the run must go to the plain shim instead.
    """

    def __init__(
        self,
        on_end: Callable[[], None],
        argv: Sequence[str] = (sys.executable, "-m", "gbatch.nodes.shimserver"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_end = on_end
        self._argv = tuple(argv)
        self._clock = clock
        self._lock = threading.Lock()  # one request at a time
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._replies: queue.Queue[dict[str, object] | None] = queue.Queue()
        self._died_at: float | None = None

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None or self._sock is None else process.pid

    def start(self) -> None:
        """Start the server now rather than at the first run (if it can start)."""
        with self._lock, contextlib.suppress(ServerGone):
            self._ensure_started()

    def _ensure_started(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        if self._died_at is not None and self._clock() - self._died_at < RESTART_AFTER:
            raise ServerGone("the shim server died a moment ago")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [*self._argv, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # the daemon's terminal signals are not its
                cwd="/",
            )
        except OSError as err:
            ours.close()
            self._died_at = self._clock()
            raise ServerGone(f"cannot start the shim server: {err}") from err
        finally:
            theirs.close()
        self._sock = ours
        self._replies = queue.Queue()
        threading.Thread(
            target=self._read, args=(ours, self._replies), name="shim-server", daemon=True
        ).start()
        return ours

    def _read(self, sock: socket.socket, replies: queue.Queue[dict[str, object] | None]) -> None:
        """Route the server's messages: ends wake the daemon, the rest are answers."""
        try:
            while True:
                message = sock.recv(65536)
                if not message:
                    break
                decoded = json.loads(message)
                if "ended" in decoded:
                    self._on_end()
                else:
                    replies.put(decoded)
        except (OSError, ValueError):
            pass
        replies.put(None)  # gone

    def start_run(
        self,
        run_dir: Path,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        log_fd: int,
    ) -> int:
        """Fork the shim `python -m gbatch.shim ARGV` would be, in `cwd` with `env`; its pid.

        It gets `log_fd`, the job's log, as its stdout and stderr.

        Raises ServerGone when surely nothing started (start the plain shim), and
        LaunchError when the start failed or may have happened unseen.
        """
        request = {"argv": list(argv), "env": dict(env), "cwd": cwd}
        return self._start(run_dir, LOCK_FILE, request, [log_fd])

    def start_step(
        self,
        step_dir: Path,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_fd: int,
        client_fd: int,
    ) -> int:
        """Fork the step shim `python -m gbatch.nodes.stepshim CLIENT ARGV` would be; its pid.

        It holds STEP_DIR/step.lock, writes its own complaints on `log_fd` and relays the
        step to the client on `client_fd`. Raises as start_run does."""
        from gbatch.nodes.stepshim import LOCK_FILE as STEP_LOCK

        request = {"kind": "step", "argv": list(argv), "env": dict(env), "cwd": "/"}
        return self._start(step_dir, STEP_LOCK, request, [log_fd], client_fd)

    def _start(
        self,
        run_dir: Path,
        lock_name: str,
        request: Mapping[str, object],
        fds: list[int],
        client_fd: int | None = None,
    ) -> int:
        from gbatch.nodes.base import LaunchError

        lock_path = run_dir / lock_name
        with self._lock:
            sock = self._ensure_started()
            lock = os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)  # a new file: at once
                passed = [*fds, lock, *([] if client_fd is None else [client_fd])]
                try:
                    sock.sendmsg(
                        [json.dumps(request).encode()],
                        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_bytes(passed))],
                        socket.MSG_NOSIGNAL,
                    )
                except OSError as err:
                    # Not sent (a datagram goes whole or not at all): nothing started.
                    if err.errno != errno.EMSGSIZE:
                        self._lost()
                    raise ServerGone(f"the shim server takes no request: {err}") from err
                try:
                    reply = self._replies.get(timeout=REPLY_TIMEOUT)
                except queue.Empty:
                    reply = None
                    self._kill()  # hung: the next run gets a new one
            finally:
                os.close(lock)
            if reply is None:
                self._lost()
                if lock_held(run_dir, lock_name) or _recorded(run_dir):
                    raise LaunchError(
                        "the shim server died as it started the run", maybe_started=True
                    )
                raise ServerGone("the shim server died before it started the run")
        pid = reply.get("pid")
        if isinstance(pid, int):
            return pid
        if reply.get("fallback"):
            raise ServerGone(str(reply["error"]))
        raise LaunchError(str(reply["error"]))

    def _lost(self) -> None:
        log.warning(
            "the shim server (pid %s) is gone: bare jobs start through the plain shim "
            "until another starts (after %g s)",
            self.pid,
            RESTART_AFTER,
        )
        self._died_at = self._clock()
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        self._reap()

    def _kill(self) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(OSError):
                process.kill()

    def _reap(self) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def stop(self) -> None:
        """Close the server's socket: it exits; the runs it started go on."""
        with self._lock:
            sock, self._sock = self._sock, None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                self._reap()


def _fd_bytes(fds: Sequence[int]) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)


def _recorded(run_dir: Path) -> bool:
    return (run_dir / "pids.json").exists() or (run_dir / "exit.json").exists()


def lock_held(run_dir: Path, name: str = LOCK_FILE) -> bool:
    """Does a shim server's shim (or a request for one) hold the run's lock (`name`)?"""
    try:
        fd = os.open(run_dir / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no such lock: not a run of the server's
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
