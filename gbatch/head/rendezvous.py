"""Where a step's tasks meet: MASTER_ADDR (its first node as the others reach it) and MASTER_PORT.

The caller's environment wins: a batch script of a job across nodes has the job's own
(the dispatcher's: its first node's peer_address, multinode.master_port), and one that
set its own keeps them for its steps, as under Slurm, where srun sets neither. Else the
same rule as the dispatcher's, but for a step on the local node alone, which takes a
port the kernel says is free.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping

from gbatch.core.multinode import master_port
from gbatch.head.fleet import Fleet
from gbatch.nodes.local import LocalNode


def node_address(fleet: Fleet, name: str, *, alone: bool) -> str:
    """How the allocation's other nodes reach node `name`: its peer_address (MASTER_ADDR).

    The inventory's `peer_address`, else its `host`; the local node's loopback when the
    step is on it alone, else this machine's name."""
    node = fleet.nodes.get(name)
    if node is None:
        return name  # gone from the fleet: its name is the best guess (the step fails)
    if isinstance(node, LocalNode) and not alone:
        return socket.getfqdn()  # the local node with others: its loopback reaches none
    return node.peer_address


def free_local_port() -> int:
    """A TCP port free on this machine now (the kernel's pick)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def rendezvous(
    fleet: Fleet, nodes: tuple[str, ...], job_id: int, env: Mapping[str, str]
) -> tuple[tuple[str, ...], int]:
    """Each of `nodes`' address as the others reach it, and the port for the tasks' meeting.

    MASTER_ADDR/MASTER_PORT in `env` (the caller's) win. Else the job's own port
    (multinode.master_port, as the dispatcher gives the job's runs), but for a step on
    the local node alone: a port the kernel says is free there."""
    alone = len(nodes) == 1
    addresses = tuple(node_address(fleet, name, alone=alone) for name in nodes)
    given_addr = env.get("MASTER_ADDR", "").strip()
    if given_addr:
        addresses = (given_addr, *addresses[1:])
    given_port = env.get("MASTER_PORT", "").strip()
    if given_port.isdigit() and 0 < int(given_port) < 65536:
        return addresses, int(given_port)
    if alone and isinstance(fleet.nodes.get(nodes[0]), LocalNode):
        return addresses, free_local_port()
    return addresses, master_port(job_id)
