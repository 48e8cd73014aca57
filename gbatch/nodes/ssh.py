"""The only module that talks SSH: one connection per node, strict host keys, bounded calls.

Contracts:
- Host keys are checked against the known_hosts file an admin controls, and only that file
  (never ~/.ssh/known_hosts, never the agent, never ~/.ssh/id_*). An unknown or changed key
  raises HostKeyError and the file is left untouched: keys are never added on the fly.
  `trust_host_key` and `replace_host_key` are the only writers, for `gbatch node trust`
  after a person has checked the fingerprint (`offered_host_key` shows it).
- Every remote command is an argv list, quoted once with `shlex.join` for the remote shell.
- Every call has a bound: `run` a deadline, `stream` a bound on opening and one per read,
  SFTP a timeout per request. At a deadline the channel is closed and RemoteTimeout raised;
  the remote process is NOT killed by that (OpenSSH sends no signal when a channel without
  a pty closes), so commands that must stop take their own `timeout` on the remote side.
- Reconnecting is the caller's loop: an error on a dead connection is a RemoteError, after
  which the caller waits `Backoff.next_delay()` and calls `connect()` again.
- Thread safety: a connection serves `run`, `stream` and `put_*` from several threads at
  once (paramiko multiplexes channels on one transport); `connect`/`close` are not meant
  to race with calls in flight.

Why paramiko and not fabric: fabric's `Connection.run` takes a command string (not argv),
runs each call through invoke's Runner (a thread per stream, pty/echo/watcher machinery),
and reads ssh_config and fabric config files that can silently change the identity or the
host-key policy. What gbatch needs (a fixed host-key policy, one exec channel per command
with a deadline, long-lived streams, atomic SFTP writes) is a thin layer over paramiko,
and fabric would only add a second configuration system in front of it.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import posixpath
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from gbatch.nodes.base import CommandResult, HostError

KEEPALIVE_SECONDS = 15
_CHUNK = 65536
_STDERR_TAIL = 64 * 1024  # bytes of a command's stderr kept for error messages
_TRUST_HINT = "run `gbatch node trust {name}` after checking the fingerprint"


class RemoteError(HostError):
    """A remote call failed: the host is unreachable, refused us, or the connection died.

    Its answer counts as lost: the command may have run.
    """


class HostKeyError(RemoteError):
    """The host offered a key that the known_hosts file does not vouch for.

    `kind` is "unknown" (no key for this host) or "changed" (another key is on file).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: Literal["unknown", "changed"],
        node: str,
        offered_fingerprint: str,
        expected_fingerprint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.node = node
        self.offered_fingerprint = offered_fingerprint
        self.expected_fingerprint = expected_fingerprint


class TunnelRefused(RemoteError):
    """The host refused a direct-tcpip channel.

    Nothing listens at that address and port, or its sshd forbids forwarding
    (AllowTcpForwarding)."""


class RemoteTimeout(RemoteError):
    """A remote call passed its deadline; its channel has been closed."""


class LoginRefused(RemoteError):
    """The host answered and refused our key (authentication failed).

    Nothing ran there. Unlike an unreachable host, the fault is the key's: its public
    half is not (or no longer) in the login's authorized_keys."""


@dataclass(frozen=True)
class SshTarget:
    """How to reach one node. `known_hosts` is the admin's file; it may not exist yet."""

    name: str
    host: str
    port: int
    user: str
    identity_file: Path | None
    known_hosts: Path
    connect_timeout: float = 10.0
    # A private key held in memory (a user's cluster link, unsealed from the store):
    # used in place of identity_file, never written to disk.
    pkey: paramiko.PKey | None = field(default=None, repr=False, compare=False)

    @property
    def address(self) -> str:
        return known_hosts_name(self.host, self.port)


# --- host keys -----------------------------------------------------------------------------


def known_hosts_name(host: str, port: int) -> str:
    """The name OpenSSH files a host's key under: `host`, or `[host]:port` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64, no padding>` of the key blob, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def fetch_host_key(
    host: str, port: int, timeout: float, *, prefer: str | None = None
) -> paramiko.PKey:
    """The key the server offers, read without authenticating (for `gbatch node trust`).

    With `prefer` None, offers the same key preference as a connection to a host with no
    key on file, so the fingerprint matches the one a HostKeyError("unknown") showed.
    `prefer` (a key type on file for the host) puts that type first, as SshConnection's
    connect does when the file holds keys for the host.
    """
    address = known_hosts_name(host, port)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError as e:
        raise RemoteTimeout(f"connecting to {address} timed out after {timeout:g} s") from e
    except OSError as e:
        raise RemoteError(f"cannot reach {address}: {e.strerror or e}") from e
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    if prefer is not None:
        options = transport.get_security_options()
        # paramiko's connect asks for an RSA key on file as rsa-sha2-*; so do we.
        names = ("rsa-sha2-512", "rsa-sha2-256", prefer) if prefer == "ssh-rsa" else (prefer,)
        wanted = [t for t in names if t in options.key_types]
        if wanted:
            options.key_types = [wanted[0], *(t for t in options.key_types if t != wanted[0])]
    try:
        transport.start_client(timeout=timeout)
        key: paramiko.PKey = transport.get_remote_server_key()
        return key
    except (paramiko.SSHException, EOFError, OSError) as e:
        raise RemoteError(f"SSH handshake with {address} failed: {e}") from e
    finally:
        transport.close()


def trust_host_key(known_hosts: Path, host: str, port: int, key: paramiko.PKey) -> None:
    """Append `key` for host:port to `known_hosts` in OpenSSH format.

    The file is mode 0600; missing directories are created 0700. Only call this once a
    person has checked the key's fingerprint. A changed key's old line is not removed:
    do that first, or the old key stays trusted too.
    """
    known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{known_hosts_name(host, port)} {key.get_name()} {key.get_base64()}\n".encode()
    fd = os.open(known_hosts, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


PinState = Literal["none", "same", "different"]


@dataclass(frozen=True)
class OfferedKey:
    """The key a host offers now, and how the known_hosts file stands on it.

    `pinned` is "none" (no key on file for the host), "same" (this key is on file) or
    "different" (the file holds other keys: a connection would be refused as a changed
    key). `pinned_keys` are the keys on file for the host, in file order.
    """

    key: paramiko.PKey
    pinned: PinState
    pinned_keys: tuple[paramiko.PKey, ...]

    @property
    def key_type(self) -> str:
        return str(self.key.get_name())

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


def _keys_on_file(known_hosts: Path, address: str) -> dict[str, paramiko.PKey]:
    """Key type -> key that `known_hosts` holds for `address`, as SshConnection reads
    them (paramiko's parser: hashed names match, unreadable lines are skipped)."""
    if not known_hosts.exists():
        return {}
    try:
        keys = paramiko.HostKeys(str(known_hosts)).lookup(address)
    except OSError as e:
        raise RemoteError(f"cannot read {known_hosts}: {e.strerror or e}") from e
    return dict(keys or {})


def offered_host_key(target: SshTarget) -> OfferedKey:
    """Ask the host for its key (no login) and compare it with the known_hosts file.

    The way SshConnection.connect would: the key type first on file is asked for first,
    and a key of another type than those on file counts as different. Writes nothing.
    """
    on_file = _keys_on_file(target.known_hosts, target.address)
    prefer = next(iter(on_file), None)
    key = fetch_host_key(target.host, target.port, target.connect_timeout, prefer=prefer)
    pinned: PinState = "none"
    if on_file:
        same = on_file.get(key.get_name())
        pinned = "same" if same is not None and same.asbytes() == key.asbytes() else "different"
    return OfferedKey(key, pinned, tuple(on_file.values()))


def _names_host(names: str, address: str) -> bool:
    """Whether a known_hosts line's comma-separated names include `address` (plain or
    hashed `|1|salt|hash`)."""
    for name in names.split(","):
        if name == address:
            return True
        if name.startswith("|1|") and paramiko.HostKeys.hash_host(address, name) == name:
            return True
    return False


def replace_host_key(known_hosts: Path, host: str, port: int, key: paramiko.PKey) -> None:
    """Make `key` the only key `known_hosts` trusts for host:port.

    Every line naming the host is dropped (a line that names other hosts too keeps
    them), then the key is added. The file is replaced atomically (mode 0600); other
    hosts' lines are kept as they are. Only call this once a person has checked the new
    key's fingerprint.
    """
    address = known_hosts_name(host, port)
    kept: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        for line in known_hosts.read_text().splitlines():
            fields = line.split()
            if not fields or fields[0].startswith("#") or fields[0].startswith("@"):
                kept.append(line)
                continue
            if not _names_host(fields[0], address):
                kept.append(line)
                continue
            others = [n for n in fields[0].split(",") if not _names_host(n, address)]
            if others:
                kept.append(" ".join([",".join(others), *fields[1:]]))
    kept.append(f"{address} {key.get_name()} {key.get_base64()}")
    known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = known_hosts.with_name(f".{known_hosts.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, ("\n".join(kept) + "\n").encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink()
        raise
    os.close(fd)
    os.replace(temporary, known_hosts)


class _RefuseUnknownKey(paramiko.RejectPolicy):  # type: ignore[misc]
    """RejectPolicy that says which key was refused and what to do about it."""

    def __init__(self, target: SshTarget) -> None:
        self._target = target

    def missing_host_key(self, client: Any, hostname: str, key: paramiko.PKey) -> None:
        t = self._target
        offered = fingerprint(key)
        raise HostKeyError(
            f"host key of node {t.name} ({t.address}) is unknown: it offered {key.get_name()} "
            f"{offered}, and {t.known_hosts} has no key for it; refusing to connect. "
            f"If that is the host's key, {_TRUST_HINT.format(name=t.name)}",
            kind="unknown",
            node=t.name,
            offered_fingerprint=offered,
        )


def _changed_key_error(target: SshTarget, offered: paramiko.PKey, expected: Any) -> HostKeyError:
    t = target
    offered_fp, expected_fp = fingerprint(offered), fingerprint(expected)
    return HostKeyError(
        f"host key of node {t.name} ({t.address}) has CHANGED: {t.known_hosts} holds "
        f"{expected.get_name()} {expected_fp} but the host offered {offered.get_name()} "
        f"{offered_fp}; refusing to connect. The host may have been reinstalled, or someone "
        f"may be intercepting the connection. If the change is expected, remove the old "
        f"line from {t.known_hosts} and {_TRUST_HINT.format(name=t.name)}",
        kind="changed",
        node=t.name,
        offered_fingerprint=offered_fp,
        expected_fingerprint=expected_fp,
    )


# --- reconnect pacing ----------------------------------------------------------------------


# --- channels ------------------------------------------------------------------------------


class _ClosedOnExit:
    """`with x:` closes x when the block ends, however it ends."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Watchdog:
    """Closes a channel if a paramiko call on it outlives its bound.

    Needed for the calls paramiko itself waits on without a timeout (exec_command,
    invoke_subsystem). Stop it before the channel's fileno() is taken: Channel.close()
    closes that pipe, which must not happen under a select() in another thread.
    """

    def __init__(self, channel: Any, timeout: float) -> None:
        self._channel = channel
        self._lock = threading.Lock()
        self._armed = True
        self.fired = False
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self._armed = False
            self.fired = True
        # Over a connection already gone paramiko raises EOFError: closed is closed.
        with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
            self._channel.close()

    def stop(self) -> bool:
        """Stop the timer; True when it had already fired (the channel is closed)."""
        self._timer.cancel()
        with self._lock:
            self._armed = False
        return self.fired


def _drain(channel: Any, out: bytearray, err: bytearray | None) -> bool:
    """Move what has arrived into `out` / `err` (stderr dropped when err is None); True when
    the remote side has finished sending. The EOF flag is read first: data that arrived
    before the EOF is then surely drained too."""
    finished = bool(channel.eof_received or channel.closed)
    while channel.recv_ready():
        out += channel.recv(_CHUNK)
    while channel.recv_stderr_ready():
        data = channel.recv_stderr(_CHUNK)
        if err is not None:
            err += data
            del err[:-_STDERR_TAIL]
    return finished


def _wait_readable(fd: int, timeout: float) -> None:
    """Return once `fd` is readable or after `timeout` seconds, whichever comes first.

    poll(), not select(): a head with a hundred hosts holds past 1024 descriptors (a
    pipe per channel), and select() refuses any numbered past 1023."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll(max(0, int(timeout * 1000) + 1))


def _send_stdin(channel: Any, data: bytes) -> None:
    """Feed stdin from a thread, so a remote that writes before reading cannot deadlock us."""
    try:
        channel.sendall(data)
        channel.shutdown_write()
    except (OSError, EOFError, paramiko.SSHException):
        pass  # the command ended or the channel closed before reading all its input


class RemoteStream(_ClosedOnExit):
    """A long-lived remote command (the agent's `watch`, `docker logs -f`), read by lines.

    Read stdout to its end (readline returns b"") before asking for the exit status: a
    command blocked on a full channel never exits. Stderr is drained alongside and
    dropped (combine_stderr keeps it). Use it as a context manager, or call close().
    """

    def __init__(self, channel: Any, description: str) -> None:
        self._channel = channel
        self._description = description
        self._fd = channel.fileno()
        self._buffer = bytearray()
        self._eof = False

    def readline(self, timeout: float) -> bytes | None:
        """The next line with its b"\\n" (the last may lack it); b"" at end of stream.

        None when no whole line arrived within `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                return line
            if self._eof:
                rest = bytes(self._buffer)
                self._buffer.clear()
                return rest
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            _wait_readable(self._fd, remaining)
            self._eof = _drain(self._channel, self._buffer, None)

    def lines(self, idle_timeout: float) -> Iterator[bytes]:
        """Lines until the end of the stream; RemoteTimeout when one is slower than `idle_timeout`.

        `idle_timeout` is in seconds, counted afresh for each line.
        """
        while True:
            line = self.readline(idle_timeout)
            if line is None:
                raise RemoteTimeout(f"{self._description}: no line within {idle_timeout:g} s")
            if not line:
                return
            yield line

    def write(self, data: bytes, timeout: float = 10.0) -> None:
        """Send to the command's stdin; RemoteTimeout when it does not take the data in time."""
        self._channel.settimeout(timeout)
        try:
            self._channel.sendall(data)
        except TimeoutError as e:
            raise RemoteTimeout(f"{self._description}: stdin not taken in {timeout:g} s") from e
        except (OSError, EOFError, paramiko.SSHException) as e:
            raise RemoteError(f"{self._description}: writing stdin failed: {e}") from e
        finally:
            self._channel.settimeout(None)

    @property
    def exit_status(self) -> int | None:
        """The command's exit status once it has ended (-1: ended without one), else None."""
        if not self._channel.exit_status_ready():
            return None
        status: int = self._channel.exit_status
        return status

    def close(self) -> None:
        # Over a connection already gone paramiko raises EOFError: closed is closed.
        with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
            self._channel.close()


class AttachedCommand(_ClosedOnExit):
    """A remote command attached both ways, as a step is: input sent, output read as it comes.

    `fileno()` turns readable when output, the end of output or the channel's close
    arrives (select on it; `read()` then never blocks). `send` takes what the channel's
    window has room for now and never blocks; `resize` sets the terminal's size
    (`resize_pty`); `end_input` closes the command's stdin. Once `read()` says finished,
    `exit_status` waits a moment for the command's status, and `lost` tells a channel
    closed without an end of output (the connection died under it). `on_close` runs
    once, at close (a pool's connection given back).
    """

    def __init__(self, channel: Any, description: str) -> None:
        self._channel = channel
        self.description = description
        self._fd = channel.fileno()
        channel.settimeout(0.0)
        self.on_close: Any = None

    def fileno(self) -> int:
        return int(self._fd)

    def read(self) -> tuple[bytes, bytes, bool]:
        """What stdout and stderr hold now, and whether the command's output has ended."""
        out, err = bytearray(), bytearray()
        finished = bool(self._channel.eof_received or self._channel.closed)
        with contextlib.suppress(TimeoutError):
            while self._channel.recv_ready():
                out += self._channel.recv(_CHUNK)
            while self._channel.recv_stderr_ready():
                err += self._channel.recv_stderr(_CHUNK)
        return bytes(out), bytes(err), finished

    def send(self, data: bytes) -> int:
        """Send what the channel takes now of `data`; how many bytes it took (0: none).

        RemoteError when the channel is closed."""
        if not data:
            return 0
        try:
            return int(self._channel.send(data))
        except TimeoutError:
            return 0
        except (OSError, EOFError, paramiko.SSHException) as e:
            raise RemoteError(f"{self.description}: sending input failed: {e}") from e

    def resize(self, rows: int, cols: int) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._channel.resize_pty(width=cols, height=rows)

    def end_input(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._channel.shutdown_write()

    def exit_status(self, timeout: float) -> int | None:
        """The command's exit status, waited for up to `timeout` seconds.

        None without one (it died of a signal, or the channel closed first)."""
        if not self._channel.status_event.wait(timeout):
            return None
        status = int(self._channel.exit_status)
        return None if status < 0 else status

    @property
    def lost(self) -> bool:
        """Closed without an end of output, or its connection is down."""
        transport = self._channel.get_transport()
        down = transport is None or not transport.is_active()
        cut = bool(self._channel.closed and not self._channel.eof_received)
        # A channel's close sets its status event: -1 then means no status came.
        return cut or (down and int(self._channel.exit_status) < 0)

    def close(self) -> None:
        # Over a connection already gone paramiko raises EOFError: closed is closed.
        with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
            self._channel.close()
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()


# --- the connection ------------------------------------------------------------------------


# OpenSSH refuses more than MaxSessions (default 10) channels on one connection. Short
# commands take at most this many at once (the rest wait their turn), leaving room for
# a long-lived stream (the agent's) and SFTP; long-lived streams per run go to a
# StreamPool's own connections, at most STREAMS_PER_CONNECTION each.
# sshd counts a session until its teardown is done, a moment after the client closed
# it: the limits leave room for that, and a refused channel is asked for again, for up
# to CHANNEL_PATIENCE seconds (on a loaded host that teardown takes seconds; a host that
# refuses for longer must not hold up the daemon's loop for a whole call's timeout).
COMMAND_SESSIONS = 4
STREAMS_PER_CONNECTION = 6
CHANNEL_PATIENCE = 10.0
_CHANNEL_RETRY_DELAYS = (0.1, 0.3, 1.0)  # then every second


class SshConnection(_ClosedOnExit):
    """One persistent SSH connection to one node. Call connect() before anything else."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_lock = threading.Lock()
        self._command_slots = threading.BoundedSemaphore(COMMAND_SESSIONS)
        # (seconds, time.monotonic() then) of the latest channel opened: opening one is a
        # single round trip to sshd (CHANNEL_OPEN, its confirmation), so this is the
        # connection's round-trip time, measured on traffic it has anyway (metrics).
        self.round_trip: tuple[float, float] | None = None

    # connecting ------------------------------------------------------------------------

    def connect(self) -> None:
        """(Re)connect and authenticate; any previous connection is closed first.

        Raises HostKeyError (unknown or changed key: mark the node, tell the admin),
        RemoteTimeout, or RemoteError (refused, unreachable, authentication failed).
        """
        self.close()
        t = self.target
        client = paramiko.SSHClient()
        try:
            if t.known_hosts.exists():
                client.load_host_keys(str(t.known_hosts))
            client.set_missing_host_key_policy(_RefuseUnknownKey(t))
            client.connect(
                hostname=t.host,
                port=t.port,
                username=t.user,
                key_filename=str(t.identity_file) if t.identity_file else None,
                pkey=t.pkey,
                timeout=t.connect_timeout,
                banner_timeout=t.connect_timeout,
                auth_timeout=t.connect_timeout,
                channel_timeout=t.connect_timeout,
                look_for_keys=False,
                allow_agent=False,
            )
            transport = client.get_transport()
            transport.set_keepalive(KEEPALIVE_SECONDS)
            # Each command is a few small packets each way: Nagle would hold them back.
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException as e:
            client.close()
            raise self._connect_error(e) from e
        self._client = client

    def _connect_error(self, e: BaseException) -> BaseException:
        t = self.target
        where = f"node {t.name} ({t.user}@{t.address})"
        if isinstance(e, RemoteError):
            return e
        if isinstance(e, paramiko.BadHostKeyException):
            return _changed_key_error(t, e.key, e.expected_key)
        if isinstance(e, paramiko.PasswordRequiredException):
            return RemoteError(
                f"cannot log in to {where}: the identity file {t.identity_file} needs a "
                f"passphrase; give gbatch a key without one"
            )
        if isinstance(e, paramiko.AuthenticationException):
            key = "the linked key" if t.pkey is not None else f"the key {t.identity_file}"
            return LoginRefused(
                f"cannot log in to {where}: the host refused {key} "
                f"({e}); check that its public half is in {t.user}'s authorized_keys"
            )
        if isinstance(e, NoValidConnectionsError):
            refused = all(
                getattr(err, "errno", None) == errno.ECONNREFUSED for err in e.errors.values()
            )
            reason = "connection refused (is sshd running there?)" if refused else str(e)
            return RemoteError(f"cannot reach {where}: {reason}")
        if isinstance(e, TimeoutError):
            return RemoteTimeout(f"connecting to {where} timed out after {t.connect_timeout:g} s")
        if isinstance(e, (paramiko.SSHException, EOFError)):
            return RemoteError(f"SSH handshake with {where} failed: {e}")
        if isinstance(e, OSError):
            return RemoteError(f"cannot reach {where}: {e.strerror or e}")
        return e

    @property
    def connected(self) -> bool:
        """True while the transport is up (a dead peer may still look up until a write)."""
        if self._client is None:
            return False
        transport = self._client.get_transport()
        return transport is not None and bool(transport.is_active())

    @property
    def transport(self) -> Any:
        """The live paramiko Transport; RemoteError when not connected."""
        transport = self._client.get_transport() if self._client is not None else None
        if transport is None or not transport.is_active():
            raise RemoteError(
                f"not connected to node {self.target.name}; connect() (again) first", busy=True
            )
        return transport

    def close(self) -> None:
        """Close the connection and every channel on it. Safe to call twice."""
        with self._sftp_lock:
            if self._sftp is not None:
                self._sftp.close()
                self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # commands -----------------------------------------------------------------------------

    def _open_session(self, timeout: float, what: str) -> Any:
        """A new session channel, within `timeout` seconds. sshd refuses one
        (ChannelException) while it still counts sessions just closed against
        MaxSessions: ask again, for up to CHANNEL_PATIENCE seconds.

        Raises RemoteError with busy set (nothing was started on the node): refused to
        the end, or the connection could not open a channel at all."""
        patience = min(timeout, CHANNEL_PATIENCE)
        deadline = time.monotonic() + timeout
        give_up = time.monotonic() + patience
        delays = iter(_CHANNEL_RETRY_DELAYS)
        while True:
            asked = time.monotonic()
            remaining = deadline - asked
            try:
                channel = self.transport.open_session(timeout=max(remaining, 0.1))
                answered = time.monotonic()
                self.round_trip = (answered - asked, answered)
                return channel
            except paramiko.ChannelException as e:
                delay = next(delays, 1.0)
                if time.monotonic() + delay >= give_up:
                    raise RemoteError(
                        f"node {self.target.name}: sshd refused a channel for {what} for "
                        f"{patience:g} s ({e}; its MaxSessions?); nothing was started there",
                        busy=True,
                    ) from e
                time.sleep(delay)
            except (paramiko.SSHException, EOFError, OSError) as e:
                raise RemoteError(
                    f"node {self.target.name}: opening a channel for {what} failed: "
                    f"{e or type(e).__name__}; the connection is probably lost: reconnect",
                    busy=True,
                ) from e

    def _open_exec(
        self,
        command: str,
        timeout: float,
        *,
        combine_stderr: bool = False,
        pty: tuple[str, int, int] | None = None,
    ) -> Any:
        """An exec channel running `command`, started within `timeout` seconds.

        `pty`: (TERM, rows, cols) of a pseudo-terminal sshd makes for it first."""
        channel = self._open_session(timeout, f"`{command}`")
        channel.set_combine_stderr(combine_stderr)  # only takes effect before exec
        watchdog = _Watchdog(channel, timeout)
        try:
            if pty is not None:
                term, rows, cols = pty
                channel.get_pty(term=term, width=cols, height=rows)
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as e:
            channel.close()
            if watchdog.stop():
                raise RemoteTimeout(self._not_started(command, timeout)) from e
            raise self._lost(f"starting `{command}`", e) from e
        if watchdog.stop():
            channel.close()
            raise RemoteTimeout(self._not_started(command, timeout))
        return channel

    def _not_started(self, command: str, timeout: float) -> str:
        return f"node {self.target.name}: `{command}` not started within {timeout:g} s"

    def _lost(self, what: str, e: BaseException) -> RemoteError:
        return RemoteError(
            f"node {self.target.name}: {what} failed: {e or type(e).__name__}; "
            f"the connection is probably lost: reconnect"
        )

    def run(
        self, argv: Sequence[str], *, timeout: float, stdin: bytes | None = None
    ) -> CommandResult:
        """Run argv (quoted with shlex.join) and collect its output and exit status.

        `timeout` bounds the whole call; past it the channel is closed and RemoteTimeout is
        raised. Without `stdin` the command reads an empty stdin.
        """
        command = shlex.join(argv)
        deadline = time.monotonic() + timeout
        if not self._command_slots.acquire(timeout=timeout):
            raise RemoteTimeout(
                f"node {self.target.name}: `{command}` not started within {timeout:g} s: "
                f"{COMMAND_SESSIONS} other commands were running there",
                busy=True,
            )
        try:
            return self._run(command, deadline, timeout, stdin)
        finally:
            self._command_slots.release()

    def _run(
        self, command: str, deadline: float, timeout: float, stdin: bytes | None
    ) -> CommandResult:
        channel = self._open_exec(command, max(0.0, deadline - time.monotonic()))
        try:
            if stdin:
                writer = threading.Thread(target=_send_stdin, args=(channel, stdin), daemon=True)
                writer.start()
            else:
                channel.shutdown_write()
            out, err = bytearray(), bytearray()
            fd = channel.fileno()
            while not _drain(channel, out, err):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                _wait_readable(fd, remaining)
            if channel.closed and not channel.eof_received:
                # OpenSSH sends EOF before closing a channel: without one, the connection
                # (or the server's session process) died under the command.
                raise self._lost(f"running `{command}`", EOFError("channel closed without EOF"))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not channel.status_event.wait(remaining):
                raise RemoteTimeout(
                    f"node {self.target.name}: `{command}` did not finish within {timeout:g} s; "
                    f"its channel was closed (the remote process may still run)"
                )
            return CommandResult(int(channel.exit_status), bytes(out), bytes(err))
        finally:
            channel.close()

    def open_tunnel(self, address: str, port: int, *, timeout: float) -> Any:
        """A direct-tcpip channel to `address`:`port` as the host sees it (ssh -L's).

        The host's sshd makes the connection; nothing listens anywhere for it. The
        channel is a blocking socket-like object (recv, sendall, shutdown, close).
        TunnelRefused: the host could not connect (nothing listens there)."""
        try:
            channel = self.transport.open_channel(
                "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as e:
            raise TunnelRefused(
                f"node {self.target.name}: {address}:{port}: {e.text or 'connect failed'}",
                busy=True,
            ) from e
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise self._lost(f"opening a channel to {address}:{port}", e) from e
        channel.settimeout(None)
        return channel

    def stream(
        self, argv: Sequence[str], *, open_timeout: float = 10.0, combine_stderr: bool = False
    ) -> RemoteStream:
        """Start a long-lived command; read it through the returned RemoteStream.

        `open_timeout` bounds starting it; each read has its own bound. With
        `combine_stderr` the command's stderr is interleaved into the lines.
        """
        command = shlex.join(argv)
        channel = self._open_exec(command, open_timeout, combine_stderr=combine_stderr)
        return RemoteStream(channel, f"node {self.target.name}: `{command}`")

    def attach(
        self,
        argv: Sequence[str],
        *,
        pty: tuple[str, int, int] | None = None,
        open_timeout: float = 10.0,
    ) -> AttachedCommand:
        """Start a command attached both ways (a step): see AttachedCommand.

        `pty`: (TERM, rows, cols) of a pseudo-terminal sshd gives it (`get_pty`), else
        it runs on pipes with stdout and stderr apart. `open_timeout` bounds starting it."""
        command = shlex.join(argv)
        channel = self._open_exec(command, open_timeout, pty=pty)
        return AttachedCommand(channel, f"node {self.target.name}: `{command}`")

    # files --------------------------------------------------------------------------------

    def put_bytes(self, data: bytes, remote_path: str, mode: int, *, timeout: float = 60.0) -> None:
        """Write `data` to `remote_path` with `mode`, atomically.

        Readers see the old file or the whole new one. Parent directories are created.
        `timeout` bounds each step.
        """
        parent = posixpath.dirname(remote_path) or "."
        made = self.run(["mkdir", "-p", "--", parent], timeout=timeout)
        if made.exit_status != 0:
            raise RemoteError(
                f"node {self.target.name}: cannot create {parent}: "
                f"{made.stderr.decode(errors='replace').strip()}"
            )
        name = posixpath.basename(remote_path)
        temporary = posixpath.join(parent, f".{name}.{secrets.token_hex(6)}.gbatch-tmp")
        with self._sftp_lock:
            sftp = self._open_sftp(timeout)
            try:
                with sftp.open(temporary, "wb") as remote_file:
                    # Mode first: the content never sits under the server's default mode.
                    remote_file.chmod(mode)
                    remote_file.set_pipelined(True)
                    remote_file.write(data)
                # paramiko keeps a pipelined write's error (a full disk) to itself at
                # close: check the whole file arrived before it replaces the old one.
                arrived = sftp.stat(temporary).st_size
                if arrived != len(data):
                    raise OSError(f"only {arrived} of {len(data)} bytes arrived")
                sftp.posix_rename(temporary, remote_path)
            except (OSError, EOFError, paramiko.SSHException) as e:
                self._discard_sftp(temporary)
                kind = RemoteTimeout if isinstance(e, TimeoutError) else RemoteError
                raise kind(
                    f"node {self.target.name}: writing {remote_path} over SFTP failed: {e}"
                ) from e

    def put_file(self, local: Path, remote_path: str, mode: int, *, timeout: float = 60.0) -> None:
        """put_bytes with a local file's content.

        The file is read whole: meant for small files such as the agent.
        """
        self.put_bytes(local.read_bytes(), remote_path, mode, timeout=timeout)

    def _open_sftp(self, timeout: float) -> Any:
        """The cached SFTP session (opened on first use); hold _sftp_lock."""
        if self._sftp is not None:
            self._sftp.get_channel().settimeout(timeout)
            return self._sftp
        channel = self._open_session(timeout, "SFTP")
        watchdog = _Watchdog(channel, timeout)
        try:
            channel.invoke_subsystem("sftp")
            fired = watchdog.stop()
            if not fired:
                channel.settimeout(timeout)
                self._sftp = paramiko.SFTPClient(channel)
        except (paramiko.SSHException, EOFError, OSError) as e:
            channel.close()
            if watchdog.stop() or isinstance(e, TimeoutError):
                raise RemoteTimeout(self._not_started("sftp", timeout)) from e
            raise self._lost("starting SFTP", e) from e
        if fired:
            channel.close()
            raise RemoteTimeout(self._not_started("sftp", timeout))
        return self._sftp

    def _discard_sftp(self, temporary: str) -> None:
        """After a failed write: remove the temp file if the session still works, then drop
        the session (its state is unknown). Hold _sftp_lock."""
        sftp, self._sftp = self._sftp, None
        if sftp is None:
            return
        # Best effort: a stale `.*.gbatch-tmp` file is harmless.
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            sftp.remove(temporary)
        sftp.close()


class StreamPool:
    """Connections for many long-lived streams to one node (a `docker logs -f` per run).

    Each carries at most STREAMS_PER_CONNECTION, and another is opened when all are
    full, since sshd refuses channels past its MaxSessions. Connections are made on
    demand and dropped once idle and broken; close() ends every stream at once.
    """

    def __init__(self, target: SshTarget) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._open: dict[SshConnection, int] = {}  # connection -> streams on it

    @contextlib.contextmanager
    def stream(
        self, argv: Sequence[str], *, combine_stderr: bool = False
    ) -> Iterator[RemoteStream]:
        """SshConnection.stream on a connection with room; closed when the block ends."""
        conn = self._acquire()
        try:
            stream = conn.stream(argv, combine_stderr=combine_stderr)
        except BaseException:
            self._release(conn)
            raise
        try:
            yield stream
        finally:
            stream.close()
            self._release(conn)

    def attach(
        self, argv: Sequence[str], *, pty: tuple[str, int, int] | None = None
    ) -> AttachedCommand:
        """SshConnection.attach on a connection with room; its close gives the room back."""
        conn = self._acquire()
        try:
            attached = conn.attach(argv, pty=pty)
        except BaseException:
            self._release(conn)
            raise
        attached.on_close = partial(self._release, conn)
        return attached

    def _acquire(self) -> SshConnection:
        with self._lock:
            for conn, count in self._open.items():
                if count < STREAMS_PER_CONNECTION and conn.connected:
                    self._open[conn] = count + 1
                    return conn
            conn = SshConnection(self._target)
            self._open[conn] = 1
        try:
            conn.connect()  # outside the lock: a slow host must not hold up other streams
        except BaseException:
            self._release(conn)
            raise
        return conn

    def _release(self, conn: SshConnection) -> None:
        with self._lock:
            count = self._open.get(conn, 1) - 1
            if count > 0:
                self._open[conn] = count
                return
            self._open.pop(conn, None)
            spare = [c for c in self._open if c.connected]
            if conn.connected and not spare:
                self._open[conn] = 0  # keep one idle connection for the next run
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns = list(self._open)
            self._open.clear()
        for conn in conns:
            conn.close()
