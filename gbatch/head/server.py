"""gbatchd's front door: the Unix socket, the caller's identity, and start-up.

Identity is the peer's uid from SO_PEERCRED, never anything the request says.
Requests are JSON lines (gbatch.protocol.requests' types), each answered by one JSON line;
a connection may carry many, and a bad one does not close it. A connection is closed
when it breaks a `Limits` (a line too long or too slow, a reply not taken, idle too
long); one refused (too many open) is answered at once and closed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import json
import logging
import os
import pwd
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

from gbatch.core import constants
from gbatch.head import handlers, heap
from gbatch.head.daemon import Daemon
from gbatch.head.eventlog import open_event_log
from gbatch.head.handlers.audit import audit, loggable
from gbatch.head.handlers.auth import is_admin
from gbatch.head.notify import Policy
from gbatch.head.outbox import smtp_password
from gbatch.head.store import Store
from gbatch.nodes.inventory import Inventory
from gbatch.protocol import decoder, replies, requests
from gbatch.site.config import (
    Config,
    ConfigError,
    Paths,
    check_private_home,
    check_socket_directory,
    daemon_paths,
    make_private,
)

log = logging.getLogger("gbatchd")
# Open connections the daemon serves at once: one user's commands, TUIs and scripts, and
# everyone's together, well under the unit's LimitNOFILE. Root and the daemon's own user
# are not counted: an admin gets in during a flood.
MAX_CONNECTIONS_PER_USER = 64
MAX_CONNECTIONS = 512
# Out of file descriptors, accept() fails while the listening socket stays readable:
# wait this long before the next try rather than spin.
ACCEPT_BACKOFF_SECONDS = 0.1


class LogUnwritable(Exception):
    """gbatchd.log cannot be opened; `str()` says where and what to do."""


LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# The syslog priority of each level, which the journal reads from a "<N>" prefix.
_PRIORITIES = {"DEBUG": 7, "INFO": 6, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}


class _JournalFormat(logging.Formatter):
    """A line for the journal: its priority as a `<N>` prefix (`journalctl -p warning`
    shows the refusals), no timestamp (the journal keeps its own)."""

    def __init__(self) -> None:
        super().__init__("%(name)s %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return f"<{_PRIORITIES.get(record.levelname, 6)}>{super().format(record)}"


def log_to_file_and_stderr(daemon_log: Path, environ: Mapping[str, str]) -> None:
    """Send the daemon's lines, audit lines included, to `daemon_log` and to stderr.

    `daemon_log` is gbatchd.log, 0600, whichever way the daemon runs, so `grep audit
    gbatchd.log` always works. Stderr gets them too, unless stderr is that file already
    (`daemon start` points it there). Under systemd stderr is the journal (JOURNAL_STREAM
    names it), and each line there starts with its syslog priority. Raises LogUnwritable.
    """
    try:
        make_private(daemon_log)
        to_file = logging.FileHandler(daemon_log, encoding="utf-8")
    except OSError as err:
        raise LogUnwritable(
            f"cannot write the daemon's log {daemon_log} ({err.strerror or err}). Let "
            "gbatchd's user write to its home"
        ) from err
    to_file.setFormatter(logging.Formatter(LOG_FORMAT))
    handlers: list[logging.Handler] = [to_file]
    try:
        stderr = os.fstat(2)
    except OSError:
        stderr = None  # no stderr at all: the file alone
    written = os.stat(daemon_log)
    if stderr is not None and (stderr.st_dev, stderr.st_ino) != (written.st_dev, written.st_ino):
        to_stderr = logging.StreamHandler(sys.stderr)
        journal = environ.get("JOURNAL_STREAM") == f"{stderr.st_dev}:{stderr.st_ino}"
        to_stderr.setFormatter(_JournalFormat() if journal else logging.Formatter(LOG_FORMAT))
        handlers.append(to_stderr)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)


_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """What one connection may hold of the daemon.

    So that no client, slow or hostile, keeps a thread or a connection slot for ever
    (docs/security.md, "Fair service").
    """

    per_user: int = MAX_CONNECTIONS_PER_USER
    total: int = MAX_CONNECTIONS
    # Requests of one user worked on at once (parsed, handled, encoded): the user's
    # others wait their turn without holding the GIL, so one user's flood has one request
    # at a time in the interpreter beside everyone else's (and the loop's work).
    requests_per_user: int = 1
    # No request under way: a TUI asks every second, a CLI command at once.
    idle_seconds: float = 300.0
    # A request line begun, nothing more arriving (a client sends a request whole).
    pause_seconds: float = 10.0
    # A request line from its first byte to its newline, however it trickles in.
    line_seconds: float = 60.0
    # A reply from its first byte to its last taken by the client.
    reply_seconds: float = 30.0


class AlreadyRunning(Exception):
    pass


@cache
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def peer_caller(sock: socket.socket) -> handlers.Caller:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return handlers.Caller(uid=uid, user=user_name(uid), pid=pid)


class LineTooLong(Exception):
    """A request line over constants.MAX_REQUEST_BYTES; the rest of it is never read."""


class LineTooSlow(Exception):
    """A request line begun and not finished in time; str() says which limit."""


def set_receive_timeout(sock: socket.socket, seconds: float) -> None:
    """Make a blocking recv on `sock` give up (EAGAIN: BlockingIOError) after `seconds`.

    At least a microsecond: SO_RCVTIMEO's zero is no timeout at all.
    """
    micros = max(1, round(seconds * 1_000_000))
    timeval = struct.pack("@ll", micros // 1_000_000, micros % 1_000_000)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)


class LineReader:
    """Request lines from one client's socket, within `limits`.

    A line is of at most constants.MAX_REQUEST_BYTES, arriving without a pause of
    pause_seconds and whole within line_seconds of its first byte. Between lines the client
    may stay silent for idle_seconds.

    The socket is left in blocking mode and a wait is timed by the kernel (SO_RCVTIMEO,
    set only when the wait changes): a timeout of Python's own would poll before each
    recv, and two settimeout calls each request cost two system calls more (a lone
    client's submit makes few). A writer that gives the socket a
    timeout of its own gives it back blocking (_Connection._write).
    """

    def __init__(
        self, sock: socket.socket, limits: Limits, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._sock = sock
        self._limits = limits
        self._clock = clock
        self._buffer = bytearray()
        self._ended = False
        sock.settimeout(None)
        self._waits: float | None = None  # the socket's SO_RCVTIMEO, once set

    def next_line(self) -> bytearray | None:
        """The next line without its newline, or None when the connection ends or idles.

        At the end of the stream what is left (a last line without a newline), then None;
        None too when the connection was idle for idle_seconds or reset. LineTooLong,
        LineTooSlow: the connection is done.
        """
        limits = self._limits
        scanned = 0
        began: float | None = None
        while True:
            end = self._buffer.find(b"\n", scanned)
            if end > constants.MAX_REQUEST_BYTES or (
                end < 0 and len(self._buffer) > constants.MAX_REQUEST_BYTES
            ):
                raise LineTooLong
            if end >= 0:
                line = self._buffer[:end]
                del self._buffer[: end + 1]
                return line
            if self._ended:
                line, self._buffer = self._buffer, bytearray()
                return line or None
            scanned = len(self._buffer)
            if self._buffer:
                now = self._clock()
                began = now if began is None else began
                left = began + limits.line_seconds - now
                wait = min(limits.pause_seconds, left)
                why = (
                    f"nothing more came for {limits.pause_seconds:g} s"
                    if wait == limits.pause_seconds
                    else f"it did not end within {limits.line_seconds:g} s"
                )
                if wait <= 0:
                    raise LineTooSlow(why)
            else:
                wait, why = limits.idle_seconds, ""
            if wait != self._waits:
                set_receive_timeout(self._sock, wait)
                self._waits = wait
            try:
                chunk = self._sock.recv(_CHUNK)
            except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO's EAGAIN: the wait is over
                if not self._buffer:
                    return None  # idle
                raise LineTooSlow(why) from None
            except OSError:
                return None  # reset by the client
            if chunk:
                self._buffer += chunk
            else:
                self._ended = True


class _Connection(socketserver.BaseRequestHandler):
    """One admitted connection; its caller comes as the client address (a Unix socket's
    peer has none), the server having counted it in."""

    server: _Server
    client_address: handlers.Caller

    def handle(self) -> None:
        caller = self.client_address
        try:
            self._serve(caller)
        finally:
            self.server.leave(caller)

    def _serve(self, caller: handlers.Caller) -> None:
        limits = self.server.limits
        lines = LineReader(self.request, limits)
        while True:
            try:
                line = lines.next_line()
            except LineTooLong:
                limit = constants.MAX_REQUEST_BYTES // (1024 * 1024)
                self._close_unread(
                    caller,
                    f"a request line over {limit} MiB",
                    ", the most gbatchd reads. Pass large data in a file the job mounts",
                )
                return
            except LineTooSlow as err:
                self._close_unread(
                    caller,
                    f"a request line left unfinished: {err}",
                    ". Send each request whole, ending in a newline",
                )
                return
            if line is None:
                return
            # A listing's records are made as its reply is written (replies.Streamed): the
            # turn is held until the reply is written.
            with self.server.turn(caller):
                reply = self._reply(caller, line)
                after = reply.pop(handlers.AFTER_TURN, None)
                stream = reply.pop(handlers.STREAM, None)
                if after is None:
                    sent, size = self._write(caller, reply)
                del reply
            if after is not None:
                # A wait (an allocation's): outside the turn, so that the user's other
                # requests go on meanwhile; its reply is small.
                sent, size = self._write(caller, self._after_turn(after))
            if stream is not None:
                # The connection is the step's from now on (handlers/steps.py): the
                # node's step shim holds it; this thread is done with it.
                if sent:
                    stream.start(self.request)
                else:
                    stream.abandon()
                return
            if size >= heap.TRIM_AFTER_BYTES:
                heap.release_free_memory()
            if not sent:
                return

    def _after_turn(self, after: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The reply a wait finished outside the caller's turn makes; a bug in it is an
        internal error, as a handler's."""
        try:
            return after()
        except Exception as err:  # the entry point of a request's wait: report, never die
            daemon = self.server.daemon
            daemon.internal_errors.report(err, "a request's wait")
            return requests.error_reply(
                "internal", f"internal error: {loggable(err)}. See {daemon.paths.daemon_log}"
            )

    def _close_unread(self, caller: handlers.Caller, why: str, advice: str) -> None:
        """A request line gbatchd will not read on: audited, answered with one bad
        request (`why` and `advice`, which goes on from it), and the connection ends."""
        self.server.note(caller, "request", f"refused: {why}; connection closed")
        self._send(caller, requests.error_reply("invalid", f"bad request: {why}{advice}"))

    def _send(self, caller: handlers.Caller, reply: dict[str, Any]) -> bool:
        """Write one reply; False when the connection is done (see _write)."""
        return self._write(caller, reply)[0]

    def _write(self, caller: handlers.Caller, reply: dict[str, Any]) -> tuple[bool, int]:
        """Write one reply, its pieces made as they are written (replies.reply_pieces), the
        client taking at most reply_seconds in all to take them (a client that stops
        reading holds this thread no longer; the time spent making the pieces is not
        the client's). (False when the connection is done, the bytes written.) A reply
        that fails while it is made (a store read streaming a listing) cannot be
        answered with an error any more: it is logged and the connection closed, and the
        client reads a line cut short."""
        seconds = self.server.limits.reply_seconds
        clock = self.server.clock
        sock = self.request
        waited = 0.0
        size = 0
        pieces = replies.reply_pieces(reply)
        try:
            for piece in pieces:
                # A piece the socket's buffer takes whole (a submit's reply, and most) is
                # written at once: no timeout to set, no poll, no wait to time.
                try:
                    sent = sock.send(piece, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                size += sent
                if sent == len(piece):
                    continue
                left = seconds - waited
                if left <= 0:
                    raise TimeoutError
                rest = memoryview(piece)[sent:]
                sock.settimeout(left)
                began = clock()
                try:
                    sock.sendall(rest)
                finally:
                    sock.settimeout(None)  # blocking again, as LineReader reads it
                waited += clock() - began
                size += len(rest)
        except TimeoutError:
            outcome = f"refused: its reply was not taken within {seconds:g} s; connection closed"
            self.server.note(caller, "reply", outcome)
            return False, size
        except OSError:
            return False, size  # the client left before its reply (a timeout, ^C)
        except Exception as err:  # a reply's making failed half written: report, never die
            self.server.daemon.internal_errors.report(err, "a reply (connection closed)")
            return False, size
        finally:
            pieces.close()
            for value in reply.values():
                if isinstance(value, replies.Streamed):
                    value.close()
        return True, size

    def _reply(self, caller: handlers.Caller, line: bytes | bytearray) -> dict[str, Any]:
        """The reply to one line. What is not JSON, or nests too deeply, is a bad request
        like any other (kind "invalid", one line, nothing logged) and the connection
        stays open; only a bug in a handler logs a traceback, once per kind of bug per
        window (core/loglines.InternalErrors: a loop of requests that hit it must not
        fill the disk)."""
        try:
            data = decoder.parse_request_line(line)
        except decoder.BadRequest as err:
            return requests.error_reply("invalid", str(err))
        daemon = self.server.daemon
        try:
            return handlers.handle(daemon, caller, data, stream=True)
        except Exception as err:  # the entry point of a request: report, never die
            op = data.get("op") if isinstance(data, dict) else None
            daemon.internal_errors.report(err, f"request {loggable(repr(op), 60)}")
            return requests.error_reply(
                "internal", f"internal error: {loggable(err)}. See {daemon.paths.daemon_log}"
            )


_NO_TURN = contextlib.nullcontext()  # an admin's: reusable, and shared


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 refuses a burst of CLI calls
    daemon: Daemon

    def __init__(self, path: str, limits: Limits | None = None) -> None:
        super().__init__(path, _Connection)
        self.limits = limits or Limits()
        self.clock = time.monotonic  # what a reply's writing is timed by
        self._counts_lock = threading.Lock()
        self._open: dict[int, int] = {}  # uid -> connections open, counted ones only
        self._exempt = {0, os.getuid()}
        self._turns: dict[int, threading.Semaphore] = {}  # uid -> its requests_per_user

    def shutdown_request(self, request: Any) -> None:
        """Close a connection at once, without socketserver's shutdown(SHUT_WR) first.

        With that shutdown, a client that saw that end of stream could still send a request
        into the socket before its close, lost there unread, and could not tell whether
        gbatchd had taken it (an idle connection's end raced a reused one's request). Closed
        whole, the client's request fails to go (EPIPE) and is sent again on a new
        connection. No file object holds the socket (LineReader reads it itself), so close()
        is the end of it.
        """
        self.close_request(request)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Admit the connection and serve it in a thread of its own, or refuse it here.

        A refusal is one line, written without waiting (a fresh socket's buffer takes it),
        and the connection closed at once, so that a refused connection holds neither a
        thread nor a descriptor.
        """
        try:
            caller = peer_caller(request)
        except OSError:
            self.shutdown_request(request)
            return
        refusal = self.admit(caller)
        if refusal is not None:
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(
                    json.dumps(requests.error_reply("unavailable", refusal)).encode() + b"\n"
                )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, caller)
        except BaseException:
            self.leave(caller)
            raise

    def admit(self, caller: handlers.Caller) -> str | None:
        """Count the caller's new connection in (None), or say why it is refused.

        Refused at the user's cap, or everyone's.
        """
        if caller.uid in self._exempt:
            return None
        with self._counts_lock:
            mine = self._open.get(caller.uid, 0)
            if mine >= self.limits.per_user:
                why = (
                    f"{caller.user} has {mine} connections open to gbatchd, the most one user "
                    "may. Close some (each running gbatch command or TUI holds one) and try again"
                )
            elif sum(self._open.values()) >= self.limits.total:
                why = f"gbatchd serves {self.limits.total} connections already. Try again shortly"
            else:
                self._open[caller.uid] = mine + 1
                return None
        self.note(caller, "connect", f"refused: {why}")
        return why

    def leave(self, caller: handlers.Caller) -> None:
        if caller.uid in self._exempt:
            return
        with self._counts_lock:
            left = self._open.get(caller.uid, 0) - 1
            if left > 0:
                self._open[caller.uid] = left
            else:
                self._open.pop(caller.uid, None)

    def turn(self, caller: handlers.Caller) -> contextlib.AbstractContextManager[Any]:
        """A context that holds one of the caller's requests_per_user turns (waiting for it).

        It is held while one of their requests is worked on. Admins (root and the daemon's
        user among them) take none: their requests never wait, and an admin's slow one
        (`node install`) never holds up their others. (A context made per request by
        contextlib.contextmanager was a cost to each one.)
        """
        if is_admin(self.daemon, caller):
            return _NO_TURN
        with self._counts_lock:
            turns = self._turns.get(caller.uid)
            if turns is None:
                turns = self._turns[caller.uid] = threading.Semaphore(self.limits.requests_per_user)
        return turns

    def note(self, caller: handlers.Caller, action: str, outcome: str) -> None:
        """Audit what a connection was refused.

        A flood of these gets a few lines and a count (gbatch/head/refusals.py).
        """
        audit(self.daemon, caller, action, "daemon", outcome)

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                log.warning("cannot accept a connection (%s); waiting for descriptors", err)
                time.sleep(ACCEPT_BACKOFF_SECONDS)
            raise


def _take_lock(paths: Paths) -> IO[str]:
    make_private(paths.lock)
    handle = open(paths.lock, "a+")  # noqa: SIM115 (held open for the daemon's life)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as err:
        handle.seek(0)
        pid = handle.read().strip() or "?"
        handle.close()
        raise AlreadyRunning(f"a gbatch daemon (pid {pid}) already runs for {paths.home}") from err
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _socket_group_id(paths: Paths, config: Config) -> int | None:
    """The gid to hand the socket to, checked before anything starts: ConfigError when
    this process may not give a file to that group (it is neither root nor a member)."""
    if config.socket_group is None:
        return None
    where = f"{paths.config_file}: socket_group"
    try:
        gid = grp.getgrnam(config.socket_group).gr_gid
    except KeyError as err:
        raise ConfigError(
            f"{where}: group {config.socket_group!r} does not exist. Create it with "
            "groupadd, or fix the name"
        ) from err
    if os.geteuid() != 0 and gid != os.getegid() and gid not in os.getgroups():
        raise ConfigError(
            f"{where}: gbatchd runs as {user_name(os.geteuid())}, which is not in group "
            f"{config.socket_group} and so cannot hand the socket to it. Add it "
            f"(SupplementaryGroups={config.socket_group} in the systemd unit, or usermod -aG)"
        )
    if config.socket_mode & 0o060 != 0o060:
        raise ConfigError(
            f"{where}: socket_mode {config.socket_mode:o} gives group {config.socket_group} "
            "no access. Set socket_mode: '660'"
        )
    return gid


def _make_socket(paths: Paths, config: Config, gid: int | None) -> _Server:
    """Bind the socket (removing a stale one: we hold the lock) with its mode and group.
    When it lives outside the home, a link in the home points at it, so that commands
    run with GBATCH_HOME (`gbatch daemon stop`) find it."""
    outside = paths.socket != paths.home_socket
    if outside and _answers(paths.socket):
        # Our lock guards only our home: another home's daemon may serve this path.
        raise AlreadyRunning(f"another gbatch daemon serves {paths.socket}")
    try:
        paths.socket.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        for stale in {paths.socket, paths.home_socket}:
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        server = _Server(str(paths.socket))
        if gid is not None:
            os.chown(paths.socket, -1, gid)
        os.chmod(paths.socket, config.socket_mode)
        if outside:
            paths.home_socket.symlink_to(paths.socket)
    except OSError as err:
        raise ConfigError(
            f"cannot create the socket {paths.socket} ({err.strerror or err}). Point "
            f"socket_path in {paths.config_file} (or GBATCH_SOCKET) at a directory "
            "gbatchd's user may write to"
        ) from err
    return server


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _say_whom_jobs_run_as(config: Config, node_names: set[str]) -> None:
    """Log, once at start, whom jobs run as; ConfigError for root_in_containers naming a
    node the fleet does not have (a typo must not pass unseen)."""
    unknown = [name for name in config.root_in_containers.nodes if name not in node_names]
    if unknown:
        raise ConfigError(
            f"root_in_containers: node {unknown[0]} is not in the fleet "
            f"({', '.join(sorted(node_names))}). Fix the name or remove it"
        )
    if os.geteuid() == 0:
        log.info("jobs run as their submitters (bare jobs through the shim, containers --user)")
    else:
        log.info(
            "gbatchd is not root: it runs bare jobs of its own user only and refuses others' "
            "(containers run as their submitter with --user)"
        )
    where = config.root_in_containers
    if where:
        log.warning(
            "root_in_containers: containers of images %s and on nodes %s keep their image's "
            "user (often root) when they mount no host path: such a job has root's power "
            "over its container and the devices it is given. See docs/security.md",
            ", ".join(where.images) or "(none)",
            ", ".join(where.nodes) or "(none)",
        )


def serve(paths: Paths, config: Config, inventory: Inventory | None) -> None:
    """Run gbatchd in the foreground until SIGTERM/SIGINT or a shutdown request.

    The socket is GBATCH_SOCKET, else the config's socket_path, else the home's
    (daemon_paths). ConfigError when the socket's group cannot be used, or when other
    users may list the home."""
    paths = daemon_paths(paths, config)
    gid = _socket_group_id(paths, config)
    smtp_password(config)  # a one-line ConfigError now, not a failed mail later
    check_private_home(paths.home)
    check_socket_directory(paths.socket, config)
    paths.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = _take_lock(paths)
    try:
        events = open_event_log(
            config.event_log, paths.home, config.event_log_max_bytes, config.event_log_backups
        )
    except OSError as err:
        lock.close()
        raise LogUnwritable(
            f"cannot write the event log {config.event_log} ({err.strerror or err}). Let "
            "gbatchd's user write there, or set event_log to another file, stdout or off"
        ) from err
    store = Store(paths.store, Policy.from_config(config), events.write if events else None)
    daemon = Daemon(paths, config, store, inventory=inventory)
    try:
        _say_whom_jobs_run_as(config, set(daemon.fleet.nodes))
    except ConfigError:
        store.close()
        lock.close()
        raise
    daemon.fleet.start()
    daemon.sweep_finished_runs()
    daemon.watch_interactive()
    daemon.outbox.start()
    daemon.clusters.start(
        daemon.clock, lambda err: daemon.internal_errors.report(err, "cluster step")
    )
    server = _make_socket(paths, config, gid)
    server.daemon = daemon
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: daemon.stop())
    threading.Thread(target=server.serve_forever, name="socket", daemon=True).start()
    log.info("gbatchd %d serving %s", os.getpid(), paths.socket)
    try:
        daemon.run_loop()
    finally:
        server.shutdown()
        server.server_close()
        for path in {paths.socket, paths.home_socket}:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        daemon.close()
        store.close()
        if events is not None:
            events.close()
        lock.close()
        log.info("gbatchd %d stopped", os.getpid())
