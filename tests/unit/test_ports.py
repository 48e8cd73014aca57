"""Where a job's port is (gbatch/nodes/ports.py): the host's loopback where the job's own
user listens, or its container's address; never another user's socket."""

from __future__ import annotations

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.nodes.base import PortError
from gbatch.nodes.ports import (
    ContainerNetwork,
    container_address,
    jobs_listener,
    loopback_listeners,
    parse_network,
    port_address,
)

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
TCP = HEADER + (
    # 127.0.0.1:8888 listening, uid 1001; 0.0.0.0:5432 listening, uid 0; 127.0.0.1:8888
    # again but an established connection (st 01), uid 0: not a listener
    "   0: 0100007F:22B8 00000000:0000 0A 0:0 00:00000000 00000000  1001        0 1 1\n"
    "   1: 00000000:1538 00000000:0000 0A 0:0 00:00000000 00000000     0        0 2 1\n"
    "   2: 0100007F:22B8 0100007F:CDB6 01 0:0 00:00000000 00000000     0        0 3 1\n"
    # 10.0.0.5:9000 listening, uid 1001: not the loopback
    "   3: 0500000A:2328 00000000:0000 0A 0:0 00:00000000 00000000  1001        0 4 1\n"
)
TCP6 = HEADER + (
    # [::]:7000 uid 1002, [::1]:7001 uid 1001
    "   0: 00000000000000000000000000000000:1B58 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1002        0 5 1\n"
    "   1: 00000000000000000000000001000000:1B59 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000  1001        0 6 1\n"
)


def job(image: str | None = None) -> Job:
    return Job(
        id=12,
        uid=1001,
        user="alice",
        spec=JobSpec(name="nb", command=("jupyter", "lab"), image=image),
        state=JobState.RUNNING,
        submit_time=0.0,
    )


def test_listeners_on_the_loopback_are_found_with_their_owners() -> None:
    found = loopback_listeners([TCP, TCP6], 8888)
    assert [(f.address, f.uid) for f in found] == [("127.0.0.1", 1001)]
    assert [(f.address, f.uid) for f in loopback_listeners([TCP], 5432)] == [("127.0.0.1", 0)]
    assert [(f.address, f.uid) for f in loopback_listeners([TCP6], 7000)] == [("::1", 1002)]
    assert [(f.address, f.uid) for f in loopback_listeners([TCP6], 7001)] == [("::1", 1001)]
    assert loopback_listeners([TCP], 9000) == []  # bound to another interface only
    assert loopback_listeners(["garbage\nnot a line\n"], 8888) == []


def test_only_the_jobs_own_users_socket_counts() -> None:
    assert jobs_listener(job(), 8888, loopback_listeners([TCP], 8888), {1001}) == "127.0.0.1"
    with pytest.raises(PortError, match="is another user's") as other:
        jobs_listener(job(), 5432, loopback_listeners([TCP], 5432), {1001})  # root's service
    assert other.value.kind == "not_found"
    with pytest.raises(PortError, match="nothing in job 12 listens on port 4000"):
        jobs_listener(job(), 4000, loopback_listeners([TCP, TCP6], 4000), {1001})


def test_a_containers_port_is_its_address_on_its_network() -> None:
    bridge = parse_network(
        '"bridge" {"bridge":{"IPAddress":"172.17.0.3","GlobalIPv6Address":""}}\n'
    )
    assert bridge == ContainerNetwork("bridge", ("172.17.0.3",))
    read = []
    address = port_address(job("img"), 8888, bridge, lambda: read.append(1) or [TCP], {1001})
    assert address == "172.17.0.3" and read == []  # the host's sockets are not asked
    host = parse_network('"host" {"host":{"IPAddress":""}}')
    assert host.shares_host
    assert port_address(job("img"), 8888, host, lambda: [TCP], {1001}) == "127.0.0.1"
    with pytest.raises(PortError, match="is another user's"):
        port_address(job("img"), 5432, host, lambda: [TCP], {1001})
    none = parse_network('"none" {"none":{"IPAddress":""}}')
    with pytest.raises(PortError, match="has no network") as refused:
        container_address(job("img"), none)
    assert refused.value.kind == "invalid"
    with pytest.raises(ValueError):
        parse_network("[1] {}")
