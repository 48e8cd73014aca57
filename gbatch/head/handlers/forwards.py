"""gbatch port-forward: a TCP connection carried to a port inside one's running job.

Each connection the forward accepts is a request of its own (requests.OpenForward), held
to the rules of steps (only the job's owner; admins where `admin_steps` says so; every
open audited; another user gets Slurm's `Access/permission denied`) and to the user's
share of gbatchd's forwarded connections (head/forwards.py). The port is connected to
after the caller's request turn (AFTER_TURN: an SSH channel may take a while), by the
job's node, from the node itself (gbatch/nodes/ports.py); once the answer is written
the connection is relayed there (STREAM) by threads of its own, never by the loop. A
forward's watch (`watch`) holds a connection open until the job's run ends.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from gbatch.core.loglines import loggable
from gbatch.core.model import Job, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.forwards import Slot, Tunnel
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.steps import AFTER_TURN, STREAM, may_open_step, not_running
from gbatch.head.handlers.targets import named_job
from gbatch.nodes.base import Node, PortError, PortStream
from gbatch.nodes.ports import PORT_MAX, PORT_MIN
from gbatch.protocol import requests

OP = "port_forward"
# How long connecting to a job's port may take (an SSH channel to a host included).
CONNECT_SECONDS = 15.0
# Ports one forward may name.
MAX_PORTS = 16


def on_port_forward(
    daemon: Daemon, caller: Caller, request: requests.OpenForward
) -> dict[str, Any]:
    """port-forward: a watch of a running job, or one connection to a port in it."""
    job = named_job(daemon, caller, request.job, OP, request.task)
    why = may_open_step(daemon, caller, job)
    if why is None:
        audit(daemon, caller, OP, job, "refused: not the owner")
        raise Refused(
            "permission",
            f"Access/permission denied: job {job.id} is {job.user}'s, and only its owner "
            "forwards ports to it",
        )
    if job.state is not JobState.RUNNING:
        raise Refused("invalid", not_running(job.id, job.state))
    ports = _ports(request)
    node = daemon.fleet.nodes.get(job.node or "")
    if node is None:
        raise Refused("unavailable", f"job {job.id}'s node {job.node} is not in the fleet now")
    slot = daemon.forwards.take(caller.uid)
    if slot is None:
        audit(daemon, caller, OP, job, "refused: too many forwarded connections")
        raise Refused(
            "unavailable",
            f"{caller.user} has {daemon.forwards.per_user} forwarded connections open, the "
            "most one user may. Close some (browser tabs, idle clients) and try again",
        )
    shown = ",".join(str(p) for p in ports)
    if request.watch:
        audit(daemon, caller, OP, job, f"allowed: {why}; forward to port {shown}")
        watch = Watch(daemon, job, slot)
        return {"job": job.id, "node": job.node, "ports": list(ports), STREAM: watch}
    if daemon.forwards.lines.admit((caller.party, f"job={job.id}")):
        audit(daemon, caller, OP, job, f"allowed: {why}; connection to port {shown}")
    forward = Forward(daemon, node, job, ports[0], slot)
    return {AFTER_TURN: forward.connect, STREAM: forward}


def _ports(request: requests.OpenForward) -> tuple[int, ...]:
    """The request's ports, checked: one for a connection, 1 to MAX_PORTS for a watch."""
    ports = request.ports
    for port in ports:
        if not PORT_MIN <= port <= PORT_MAX:
            raise Refused("invalid", f"ports: {port} is not a TCP port (1-65535)")
    if not ports or len(ports) > (MAX_PORTS if request.watch else 1):
        most = MAX_PORTS if request.watch else 1
        raise Refused("invalid", f"ports: name 1 to {most} ports, not {len(ports)}")
    return ports


def _ran_on(daemon: Daemon, job: Job) -> bool:
    """Whether `job` still runs the attempt it ran when the forward was asked for."""
    now = daemon.store.get(job.id)
    return now is not None and now.state is JobState.RUNNING and now.attempt == job.attempt


class Watch:
    """A forward's watch: the connection stays open until the job's run ends."""

    def __init__(self, daemon: Daemon, job: Job, slot: Slot) -> None:
        self.daemon = daemon
        self.job = job
        self.slot = slot

    def start(self, sock: socket.socket) -> None:
        tunnel = Tunnel(sock, None)
        forwards = self.daemon.forwards
        forwards.add(self.job.id, tunnel)
        try:
            # After being listed: a run that ended before is seen here, one that ends
            # after calls job_ended, which finds the watch.
            ended = self.daemon.store.get(self.job.id)
            if ended is not None and not _ran_on(self.daemon, self.job):
                tunnel.end(ended.state.value)
            tunnel.watch()
        finally:
            forwards.remove(self.job.id, tunnel)
            self.slot.release()

    def abandon(self) -> None:
        self.slot.release()


class Forward:
    """One connection to a job's port: connected after the caller's turn, then relayed."""

    def __init__(self, daemon: Daemon, node: Node, job: Job, port: int, slot: Slot) -> None:
        self.daemon = daemon
        self.node = node
        self.job = job
        self.port = port
        self.slot = slot
        self.target: PortStream | None = None

    def connect(self) -> dict[str, Any]:
        """The reply: once connected to the port, or why it could not be."""
        try:
            self.target = self.node.open_port(self.job, self.port, CONNECT_SECONDS)
        except PortError as err:
            self.slot.release()
            kind = err.kind if err.kind in requests.ERROR_KINDS else "unavailable"
            return requests.error_reply(requests.error_kind(kind), loggable(str(err), 400))
        return {"ok": True, "job": self.job.id, "node": self.job.node, "port": self.port}

    def start(self, sock: socket.socket) -> None:
        """Relay `sock` to the port until either side ends or the job's run does."""
        if self.target is None:
            return  # refused in connect(); the slot is back
        tunnel = Tunnel(sock, self.target)
        forwards = self.daemon.forwards
        forwards.add(self.job.id, tunnel)
        try:
            if not _ran_on(self.daemon, self.job):
                ended = self.daemon.store.get(self.job.id)
                tunnel.end(ended.state.value if ended is not None else "gone")
            tunnel.relay()
        finally:
            forwards.remove(self.job.id, tunnel)
            self.slot.release()

    def abandon(self) -> None:
        """The answer could not be written (the client left): close what was opened."""
        if self.target is not None:
            with contextlib.suppress(OSError, EOFError):
                self.target.close()
            self.target = None
            self.slot.release()
