"""gbatchd's front door: the Unix socket, the caller's identity, and start-up.

Identity is the peer's uid from SO_PEERCRED, never anything the request says.
Requests are JSON lines; a connection may carry many.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import signal
import socket
import socketserver
import struct
import threading
from functools import cache
from typing import IO, Any

from gbatch import handlers
from gbatch.config import Config, Paths
from gbatch.daemon import Daemon
from gbatch.inventory import Inventory
from gbatch.store import Store

log = logging.getLogger("gbatchd")
MAX_REQUEST = 4 * 1024 * 1024


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


class _Connection(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        caller = peer_caller(self.request)
        while True:
            line = self.rfile.readline(MAX_REQUEST)
            if not line:
                return
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("not an object")
            except ValueError:
                reply: dict[str, Any] = {
                    "ok": False,
                    "kind": "invalid",
                    "error": "a request is one JSON object per line",
                }
            else:
                try:
                    reply = handlers.handle(self.server.daemon, caller, request)
                except Exception as err:  # the entry point of a request: report, never die
                    log.exception("request %r failed", request.get("op"))
                    reply = {
                        "ok": False,
                        "kind": "internal",
                        "error": f"internal error: {err}. See "
                        f"{self.server.daemon.paths.daemon_log}",
                    }
            try:
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return  # the client left before its reply (a timeout, ^C): nothing to tell


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 refuses a burst of CLI calls
    daemon: Daemon


def _take_lock(paths: Paths) -> IO[str]:
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


def serve(paths: Paths, config: Config, inventory: Inventory | None) -> None:
    """Run gbatchd in the foreground until SIGTERM/SIGINT or a shutdown request."""
    paths.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = _take_lock(paths)
    store = Store(paths.store)
    daemon = Daemon(paths, config, store, inventory=inventory)
    daemon.start_nodes()
    daemon.sweep_finished_runs()
    with contextlib.suppress(FileNotFoundError):
        paths.socket.unlink()  # stale: we hold the lock, so nobody else serves it
    server = _Server(str(paths.socket), _Connection)
    server.daemon = daemon
    os.chmod(paths.socket, config.socket_mode)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: daemon.stop())
    threading.Thread(target=server.serve_forever, name="socket", daemon=True).start()
    log.info("gbatchd %d serving %s", os.getpid(), paths.socket)
    try:
        daemon.run_loop()
    finally:
        server.shutdown()
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            paths.socket.unlink()
        daemon.close()
        store.close()
        lock.close()
        log.info("gbatchd %d stopped", os.getpid())
