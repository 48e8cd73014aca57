"""A port inside a job, reached for `gbatch port-forward`: where it is, who listens on it.

A bare job shares its host's network: its port is the host's 127.0.0.1:PORT, and only a
socket its own user listens on counts (read from the kernel's /proc/net/tcp and tcp6,
whose lines name each socket's owner), so that a forward through one's job never
reaches another user's job or a system service on the same host. A container job's
port is its container's address on its docker network (`docker inspect`), reached from
its host without publishing anything on the host's interfaces; a container on the
`host` network is held to the bare rule, and one with no network (`none`) cannot be
reached. The node kinds (local.py, remote.py) do the I/O; this module decides.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gbatch.core.model import Job
from gbatch.nodes.base import HostError, PortError
from gbatch.nodes.docker import DockerHost, container_name

# The kernel's files of TCP sockets, as `cat` reads them on a host (IPv4 then IPv6).
PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
# Local addresses a job's port answers on at the host's loopback, as /proc/net/tcp spells
# them (little-endian hex words): 127.0.0.1, 0.0.0.0, ::, ::1 and ::ffff:127.0.0.1.
_LOOPBACK_V4 = {"0100007F": "127.0.0.1", "00000000": "127.0.0.1"}
_LOOPBACK_V6 = {
    "00000000000000000000000000000000": "::1",  # ::, dual-stack or not
    "00000000000000000000000001000000": "::1",
    "0000000000000000FFFF00000100007F": "127.0.0.1",
}
PORT_MIN, PORT_MAX = 1, 65535


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket at the host's loopback: the address to connect to, its owner."""

    address: str
    uid: int


def loopback_listeners(texts: Sequence[str], port: int) -> list[Listener]:
    """The sockets listening on `port` at the loopback (or every address) in `texts`.

    `texts`: the contents of /proc/net/tcp and /proc/net/tcp6."""
    found = []
    for text in texts:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            try:
                if int(hex_port, 16) != port:
                    continue
                uid = int(fields[7])
            except ValueError:
                continue
            connect_to = _LOOPBACK_V4.get(address) or _LOOPBACK_V6.get(address)
            if connect_to is not None:
                found.append(Listener(connect_to, uid))
    return found


def jobs_listener(job: Job, port: int, listeners: Sequence[Listener], uids: Collection[int]) -> str:
    """The loopback address to reach `job`'s `port` at, when one of `uids` listens there.

    PortError (not_found) when nothing does, or only another user's socket."""
    own = [listener for listener in listeners if listener.uid in uids]
    if own:
        return own[0].address
    if listeners:
        raise PortError(
            f"nothing of job {job.id} listens on port {port}: the socket on its host's "
            f"127.0.0.1:{port} is another user's",
            "not_found",
        )
    raise PortError(nothing_listens(job, port), "not_found")


def nothing_listens(job: Job, port: int) -> str:
    """The refusal of a port nothing listens on (as ssh -L's `connect failed`)."""
    return (
        f"nothing in job {job.id} listens on port {port} (connection refused). Start the "
        f"server there first, listening on 127.0.0.1:{port} (or 0.0.0.0 in a container)"
    )


def read_proc_net_tcp() -> list[str]:
    """This machine's /proc/net/tcp and tcp6 (a missing one, no IPv6, reads empty)."""
    texts = []
    for path in PROC_NET_TCP:
        try:
            with open(path, encoding="ascii", errors="replace") as handle:
                texts.append(handle.read())
        except OSError:
            texts.append("")
    return texts


# -- containers --------------------------------------------------------------------------

_NETWORK_FORMAT = "{{json .HostConfig.NetworkMode}} {{json .NetworkSettings.Networks}}"


def network_inspect_argv(name: str, *, docker: str = "docker") -> list[str]:
    """`docker inspect` of a container's network mode and addresses (parse_network)."""
    return [docker, "inspect", "--type", "container", "--format", _NETWORK_FORMAT, name]


@dataclass(frozen=True)
class ContainerNetwork:
    """Where a container's ports are: its network mode and its addresses on its networks."""

    mode: str
    addresses: tuple[str, ...]

    @property
    def shares_host(self) -> bool:
        return self.mode == "host"


def parse_network(output: str) -> ContainerNetwork:
    """network_inspect_argv's output; ValueError for anything else."""
    mode_text, _, networks_text = output.strip().partition(" ")
    mode = json.loads(mode_text)
    networks = json.loads(networks_text) if networks_text else None
    if not isinstance(mode, str):
        raise ValueError(f"not a network mode: {mode_text[:80]!r}")
    addresses = []
    for settings in (networks or {}).values():
        if isinstance(settings, dict):
            for key in ("IPAddress", "GlobalIPv6Address"):
                value = settings.get(key)
                if isinstance(value, str) and value:
                    addresses.append(value)
    return ContainerNetwork(mode, tuple(addresses))


def container_address(job: Job, network: ContainerNetwork) -> str:
    """The address `job`'s container is reached at on its host (not for `host` mode).

    PortError when it has none: no network, or one docker gave no address."""
    if network.addresses:
        return network.addresses[0]
    if network.mode == "none":
        raise PortError(
            f"job {job.id}'s container has no network (network: none): nothing can reach "
            "its ports. Run it on a network (the site's job_network, or `network:` in the "
            "job file)",
            "invalid",
        )
    raise PortError(f"job {job.id}'s container has no address on its network {network.mode}")


def container_network(
    host: DockerHost, job: Job, *, docker: str, timeout: float
) -> ContainerNetwork:
    """How `job`'s running container is networked, asked of its host's docker engine."""
    name = container_name(job.id, job.attempt)
    try:
        result = host.run(network_inspect_argv(name, docker=docker), timeout=timeout)
    except HostError as err:
        raise PortError(f"cannot tell where job {job.id}'s container listens: {err}") from err
    if result.exit_status != 0:
        raise PortError(f"job {job.id}'s container {name} is not there (it is ending?)")
    try:
        return parse_network(result.stdout.decode(errors="replace"))
    except ValueError as err:
        raise PortError(f"docker described {name}'s network unreadably: {err}") from err


def port_address(
    job: Job,
    port: int,
    network: ContainerNetwork | None,
    read_tcp: Callable[[], Sequence[str]],
    uids: Collection[int],
) -> str:
    """Where on its host `job`'s `port` is.

    Its container's address; or, for a bare job or a container on the host's network,
    the loopback address one of `uids` listens on."""
    if network is None or network.shares_host:
        return jobs_listener(job, port, loopback_listeners(read_tcp(), port), uids)
    return container_address(job, network)


def connect(address: str, port: int, job: Job, timeout: float) -> socket.socket:
    """A blocking TCP connection to `address`:`port` (a job's), made within `timeout`."""
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except ConnectionRefusedError:
        raise PortError(nothing_listens(job, port), "not_found") from None
    except OSError as err:
        raise PortError(f"cannot reach job {job.id}'s port {port}: {err}") from err
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def check_port(value: int) -> int:
    """`value` as a TCP port; ValueError outside 1-65535."""
    if not PORT_MIN <= value <= PORT_MAX:
        raise ValueError(f"{value} is not a TCP port (1-65535)")
    return value
