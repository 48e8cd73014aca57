"""sinfo and the admin's node requests: drain, resume, install the agent, pin host keys."""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from gbatch.core import qos
from gbatch.core.model import NodeInfo, PartitionInfo
from gbatch.core.timefmt import show_value
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit, loggable
from gbatch.head.handlers.auth import allowed_qos, require_admin
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.nodes.inventory import SlurmCluster
from gbatch.protocol import codec, requests

log = logging.getLogger("gbatchd")


# Agent installs at once: `node install --all` on a large fleet is a bounded burst of SSH
# handshakes and SFTP copies from the head, not one per host.
INSTALL_WORKERS = 8


def on_nodes(daemon: Daemon, caller: Caller, request: requests.ListNodes) -> dict[str, Any]:
    """sinfo: the fleet's nodes as last reported, and its partitions."""
    default = daemon.fleet.default_partition()
    return {
        "nodes": [codec.node_to_wire(n) for n in _with_windows(daemon, daemon.fleet.node_infos())],
        "default_partition": None if default is None else default.name,
        "partitions": [
            codec.partition_to_wire(
                PartitionInfo(
                    p.name,
                    p.max_time,
                    p.default,
                    tuple(p.nodes),
                    p.default_time,
                    p.max_interactive_time,
                    None if p.slurm is None else _cluster_address(p.slurm),
                    daemon.clusters.down.get(p.name),
                    # Read, never asked, here: the cluster step's thread asks sinfo.
                    daemon.clusters.nodes.get(p.name) if p.slurm is not None else None,
                )
            )
            for p in daemon.fleet.partitions.values()
        ],
        # scontrol show qos: every QOS, and those the caller may use.
        "qos": [qos.describe(q) for q in daemon.config.qos.by_name.values()],
        "qos_allowed": allowed_qos(daemon, caller),
    }


def _cluster_address(cluster: SlurmCluster) -> str:
    """Where a cluster partition's jobs go: user@login:port (per-user: each user's own)."""
    who = "" if cluster.identity == "per_user" else f"{cluster.user}@"
    return f"{who}{cluster.login}:{cluster.port}"


def _with_windows(daemon: Daemon, infos: list[NodeInfo]) -> list[NodeInfo]:
    """The nodes with the reservations' windows on them now or to come."""
    now = daemon.clock()
    windows: dict[str, list[tuple[str, float, float, bool]]] = {}
    for reservation in daemon.store.reservations():
        window = reservation.window(now)
        if window is None:
            continue
        for name in reservation.node_names:
            windows.setdefault(name, []).append(
                (reservation.name, window[0], window[1], reservation.maint)
            )
    if not windows:
        return infos
    out = []
    for info in infos:
        mine = sorted(windows.get(info.name, ()), key=lambda w: w[1])
        if mine:
            maint = any(w[3] and w[1] <= now < w[2] for w in mine)
            info = replace(info, windows=tuple(mine), maint=maint)
        out.append(info)
    return out


def _admin_node(daemon: Daemon, caller: Caller, name: str, what: str) -> str:
    """The node `name` an admin's drain or resume names; Refused otherwise (audited)."""
    require_admin(daemon, caller, f"node_{what}", f"node {name}", f"{what} nodes")
    if name not in daemon.fleet.nodes:
        known = ", ".join(sorted(daemon.fleet.nodes))
        raise Refused("not_found", f"no node {show_value(name)} in the fleet (nodes: {known})")
    return name


def on_node_drain(daemon: Daemon, caller: Caller, request: requests.DrainNode) -> dict[str, Any]:
    """gbatch node drain: stop placing jobs on a node; its running jobs carry on (DRAIN)."""
    name = _admin_node(daemon, caller, request.name, "drain")
    reason = request.reason
    if not reason.strip():
        raise Refused("invalid", "--reason: say why the node is drained (Slurm asks too)")
    daemon.store.drain_node(name, f"{reason.strip()} [{caller.user}]", daemon.clock())
    log.info("node %s drained by %s: %s", name, caller.user, loggable(reason))
    daemon.wake.set()
    return {}


def on_node_resume(daemon: Daemon, caller: Caller, request: requests.ResumeNode) -> dict[str, Any]:
    """gbatch node resume: place jobs on a drained node again."""
    name = _admin_node(daemon, caller, request.name, "resume")
    if not daemon.store.resume_node(name):
        raise Refused("invalid", f"node {name} is not drained")
    log.info("node %s resumed by %s", name, caller.user)
    daemon.wake.set()
    return {}


def on_node_install(
    daemon: Daemon, caller: Caller, request: requests.InstallAgent
) -> dict[str, Any]:
    """gbatch node install: copy the agent to hosts over SFTP and check it runs.

    One result per node, in the order named. Hosts are installed concurrently, at most
    INSTALL_WORKERS at once, each within install_agent's own bounds (connect timeout,
    SFTP timeouts, probe deadline)."""
    from gbatch.nodes.remote import RemoteNode

    require_admin(daemon, caller, "node_install", "nodes", "install agents")
    names = request.names or [
        n for n, node in daemon.fleet.nodes.items() if isinstance(node, RemoteNode)
    ]
    with ThreadPoolExecutor(INSTALL_WORKERS, thread_name_prefix="node-install") as pool:
        results = list(pool.map(functools.partial(_install_one, daemon), names))
    log.info("agent install by %s: %s", caller.user, loggable(results, limit=4000))
    return {"results": results}


def _install_one(daemon: Daemon, name: str) -> dict[str, Any]:
    """Install the agent on node `name`: its result, ok or why not."""
    from gbatch.nodes.local import agent_script
    from gbatch.nodes.remote import RemoteNode, install_agent
    from gbatch.nodes.ssh import RemoteError

    node = daemon.fleet.nodes.get(name)
    if not isinstance(node, RemoteNode):
        why = "the local node needs no install" if node else "no such node in the fleet"
        return {"name": name, "ok": False, "error": why}
    try:
        summary = install_agent(node.node, agent_script())
    except RemoteError as err:
        return {"name": name, "ok": False, "error": str(err)}
    node.retry_now()  # its report stream need not wait out the backoff
    return {"name": name, "ok": True, "summary": summary}


def _trust_node(daemon: Daemon, caller: Caller, name: str, op: str) -> Any:
    """The RemoteNode a node_hostkey/node_trust request names; refusals are audited."""
    from gbatch.nodes.remote import RemoteNode

    require_admin(daemon, caller, op, f"node {name}", "trust host keys")
    node = daemon.fleet.nodes.get(name)
    if not isinstance(node, RemoteNode):
        if node is not None:
            raise Refused(
                "invalid", f"node {show_value(name)} is this machine, reached without SSH: no key"
            )
        known = ", ".join(sorted(daemon.fleet.nodes))
        raise Refused("not_found", f"no node {show_value(name)} in the fleet (nodes: {known})")
    return node


def _offered_key(node: Any) -> Any:
    """The host key `node`'s host offers now (ssh.OfferedKey); Refused when it cannot be asked."""
    from gbatch.nodes.remote import target_of
    from gbatch.nodes.ssh import RemoteError, offered_host_key

    try:
        return offered_host_key(target_of(node.node))
    except RemoteError as err:
        raise Refused("unavailable", f"cannot ask node {node.name} for its key: {err}") from err


def _hostkey_reply(node: Any, offered: Any) -> dict[str, Any]:
    """The reply's fields for `offered`: the key, its fingerprint and known_hosts' keys."""
    from gbatch.nodes.ssh import fingerprint

    return {
        "name": node.name,
        "address": f"{node.node.host}:{node.node.port}",
        "known_hosts": str(node.node.known_hosts),
        "key_type": offered.key_type,
        "fingerprint": offered.fingerprint,
        "pinned": offered.pinned,
        "pinned_keys": [
            {"key_type": k.get_name(), "fingerprint": fingerprint(k)} for k in offered.pinned_keys
        ],
    }


def on_node_hostkey(daemon: Daemon, caller: Caller, request: requests.GetHostKey) -> dict[str, Any]:
    """The key a node's host offers now, and how known_hosts stands on it; reads only.

    known_hosts holds none, the same key, or a different one: for `gbatch node trust` to
    show the admin."""
    node = _trust_node(daemon, caller, request.name, "node_hostkey")
    return _hostkey_reply(node, _offered_key(node))


def on_node_trust(daemon: Daemon, caller: Caller, request: requests.TrustHostKey) -> dict[str, Any]:
    """gbatch node trust: pin the key a node's host offers in known_hosts.

    Only when it is still the one whose `fingerprint` the admin checked; a different key
    already pinned is replaced only with `replace: true`. Then the node reconnects at
    once, not after its backoff."""
    from gbatch.nodes.ssh import replace_host_key, trust_host_key

    node = _trust_node(daemon, caller, request.name, "node_trust")
    wanted = request.fingerprint
    if not wanted.startswith("SHA256:"):
        raise Refused("invalid", f"fingerprint: {wanted!r} is not a fingerprint like SHA256:...")
    offered = _offered_key(node)
    target = f"node {node.name}"
    if offered.fingerprint != wanted:
        audit(daemon, caller, "node_trust", target, f"refused: host offers {offered.fingerprint}")
        raise Refused(
            "invalid",
            f"fingerprint: node {node.name} now offers {offered.key_type} "
            f"{offered.fingerprint}, not {wanted}: the key changed while you looked (or the "
            f"fingerprint is mistyped); nothing was trusted. Check the key on the host and run "
            f"`gbatch node trust {node.name}` again",
        )
    reply = _hostkey_reply(node, offered)
    if offered.pinned == "different" and not request.replace:
        audit(daemon, caller, "node_trust", target, "refused: a different key is pinned")
        old = ", ".join(f"{k['key_type']} {k['fingerprint']}" for k in reply["pinned_keys"])
        raise Refused(
            "invalid",
            f"replace: {node.node.known_hosts} holds a DIFFERENT key for node {node.name} "
            f"({old}); nothing was trusted. If the host was reinstalled, trust the new key "
            f"with `gbatch node trust {node.name} --replace`",
        )
    config = node.node
    if offered.pinned == "different":
        replace_host_key(config.known_hosts, config.host, config.port, offered.key)
    elif offered.pinned == "none":
        trust_host_key(config.known_hosts, config.host, config.port, offered.key)
    audit(daemon, caller, "node_trust", target, f"allowed: pinned {offered.fingerprint}")
    node.retry_now()  # the key is on file now: reconnect without waiting out the backoff
    return {**reply, "was_pinned": offered.pinned}
