"""Where a step's tasks meet: MASTER_ADDR (its first node as the others reach it) and MASTER_PORT.

One small function, so that the job's own rendezvous (the dispatcher's, once it records
one for the job's run) can take its place: until then a step picks its own. The
caller's environment wins: a batch script that set MASTER_ADDR/MASTER_PORT (or a run
whose environment has them) keeps them for its steps, as under Slurm, where srun sets
neither.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping

from gbatch.head.fleet import Fleet

# Where a port is picked when the first node cannot be asked for a free one.
PORT_BASE = 29500
PORT_SPAN = 1000


def node_address(fleet: Fleet, name: str, *, alone: bool) -> str:
    """How the allocation's other nodes reach node `name`.

    The node's own word for it (`peer_address`, where the dispatcher's nodes have one),
    else an inventory host's `host` (its DNS name or address, as the head reaches it);
    this machine's name for the local node (its loopback when the step is on it alone)."""
    node = fleet.nodes.get(name)
    peer = getattr(node, "peer_address", None)
    if isinstance(peer, str) and peer:
        return peer
    host = getattr(getattr(node, "node", None), "host", None)
    if isinstance(host, str) and host:
        return host
    return "127.0.0.1" if alone else socket.getfqdn()


def free_local_port() -> int:
    """A TCP port free on this machine now (the kernel's pick)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def rendezvous(
    fleet: Fleet, nodes: tuple[str, ...], job_id: int, env: Mapping[str, str]
) -> tuple[tuple[str, ...], int]:
    """Each of `nodes`' address as the others reach it, and the port for the tasks' meeting.

    MASTER_ADDR/MASTER_PORT in `env` (the caller's) win. A local first node's port is
    one the kernel says is free; a host's is the job's own, PORT_BASE + its id mod
    PORT_SPAN (as the dispatcher gives the job's runs: docs/multinode.md)."""
    alone = len(nodes) == 1
    addresses = tuple(node_address(fleet, name, alone=alone) for name in nodes)
    given_addr = env.get("MASTER_ADDR", "").strip()
    if given_addr:
        addresses = (given_addr, *addresses[1:])
    given_port = env.get("MASTER_PORT", "").strip()
    if given_port.isdigit() and 0 < int(given_port) < 65536:
        return addresses, int(given_port)
    first = fleet.nodes.get(nodes[0])
    if getattr(getattr(first, "node", None), "host", None) is None:
        return addresses, free_local_port()
    return addresses, PORT_BASE + job_id % PORT_SPAN  # the job's own (docs/multinode.md)
