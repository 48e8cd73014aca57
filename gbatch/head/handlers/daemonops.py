"""Requests about the daemon itself: ping (is it up, what is it) and shutdown."""

from __future__ import annotations

import os
from typing import Any

from gbatch import __version__
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.auth import require_admin
from gbatch.head.handlers.caller import Caller
from gbatch.protocol import codec, requests


def on_ping(daemon: Daemon, caller: Caller, request: requests.Ping) -> dict[str, Any]:
    """Whether the daemon is up, and what it is: its pid, version, home, queue and nodes."""
    return {
        "pid": os.getpid(),
        "version": __version__,
        "started_at": daemon.started_at,
        "home": str(daemon.paths.home),
        "active": daemon.store.active_counts(),
        "nodes": [codec.node_to_wire(n) for n in daemon.fleet.node_infos()],
    }


def on_shutdown(daemon: Daemon, caller: Caller, request: requests.Shutdown) -> dict[str, Any]:
    """gbatch daemon stop: an admin's request that the daemon stop; its pid, to wait on."""
    require_admin(daemon, caller, "shutdown", "daemon", "stop the daemon")
    daemon.stop()
    return {"pid": os.getpid()}
