"""gbatch cluster link / unlink / status: users' own logins on per-user cluster partitions.

A link is made on the head: a key pair whose private half is sealed in the store
(gbatch/head/store/clusterlinks.py) and never leaves the head, and whose public half
the user adds to ~/.ssh/authorized_keys on the cluster. Linking a login proves nothing
by itself: only a cluster that takes the key lets jobs run as that login.
"""

from __future__ import annotations

from typing import Any

from gbatch.core.timefmt import show_value
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.auth import require_admin
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.linkkeys import make_key_pair
from gbatch.nodes.cluster import login_problem
from gbatch.nodes.inventory import Partition
from gbatch.protocol import requests


def per_user_partition(daemon: Daemon, name: str) -> Partition:
    """The per-user cluster partition `name`; Refused (one line) for any other."""
    partition = daemon.fleet.partitions.get(name)
    if partition is None or partition.slurm is None:
        clusters = [p.name for p in daemon.fleet.partitions.values() if p.slurm is not None]
        known = (
            f"Cluster partitions here: {', '.join(clusters)}"
            if clusters
            else ("This head has no cluster partition")
        )
        raise Refused("invalid", f"{show_value(name)} is not a cluster partition. {known}")
    if partition.slurm.identity != "per_user":
        raise Refused(
            "invalid",
            f"partition {name} runs every job as the lab's account {partition.slurm.user} "
            "(identity: shared): there is nothing to link",
        )
    return partition


def on_cluster_link(
    daemon: Daemon, caller: Caller, request: requests.LinkCluster
) -> dict[str, Any]:
    """A new key pair for the caller's login on `partition`'s cluster; the public half."""
    partition = per_user_partition(daemon, request.partition)
    problem = login_problem(request.login)
    if problem is not None:
        raise Refused("invalid", f"--login: {problem}")
    private, public = make_key_pair(f"gbatch:{partition.name}:{caller.user}")
    daemon.store.link_cluster(
        partition.name, caller.user, request.login, private, public, daemon.clock()
    )
    audit(daemon, caller, "cluster_link", f"partition {partition.name}", f"login {request.login}")
    daemon.clusters.poke()  # jobs waiting for the link are sent now
    return {
        "partition": partition.name,
        "user": caller.user,
        "login": request.login,
        "public": public,
    }


def on_cluster_unlink(
    daemon: Daemon, caller: Caller, request: requests.UnlinkCluster
) -> dict[str, Any]:
    """Forget a link to `partition`, the caller's or (admins) `user`'s: its key is deleted."""
    partition = per_user_partition(daemon, request.partition)
    user = caller.user if request.user is None else request.user
    own = user == caller.user
    target = f"partition {partition.name}" if own else f"partition {partition.name} user {user}"
    if not own:
        require_admin(daemon, caller, "cluster_unlink", target, "unlink another user's login")
    links = [link for link in daemon.store.cluster_links(user) if link.partition == partition.name]
    if not links:
        raise Refused("not_found", f"{show_value(user)} has no link to partition {partition.name}")
    open_there = daemon.store.cluster_jobs_of(partition.name, user)
    if open_there:
        # Without the link nobody could watch, cancel or read them there.
        shown = ",".join(str(i) for i in open_there[:10]) + (",..." if len(open_there) > 10 else "")
        whose = "your jobs" if own else f"{user}'s jobs"
        raise Refused(
            "invalid",
            f"{len(open_there)} of {whose} are on partition {partition.name} ({shown}): "
            f"gbatch watches and cancels them as {'your' if own else 'that'} login. scancel "
            "them or let them end, then unlink",
        )
    daemon.store.unlink_cluster(partition.name, user)
    outcome = f"login {links[0].login}" if own else f"allowed: admin, login {links[0].login}"
    audit(daemon, caller, "cluster_unlink", target, outcome)
    return {"partition": partition.name, "user": user, "login": links[0].login}


def on_cluster_status(
    daemon: Daemon, caller: Caller, request: requests.ClusterStatus
) -> dict[str, Any]:
    """Each cluster partition, up or down and why; the caller's links (admins: all)."""
    if request.all_users:
        require_admin(daemon, caller, "cluster_status", "links", "see everyone's links")
    partitions = []
    for p in daemon.fleet.partitions.values():
        if p.slurm is None:
            continue
        down = daemon.clusters.down.get(p.name)
        at = f"{p.slurm.login}:{p.slurm.port}"
        partitions.append(
            {
                "name": p.name,
                "identity": p.slurm.identity,
                "login": at if p.slurm.identity == "per_user" else f"{p.slurm.user}@{at}",
                "state": "down" if down is not None else "up",
                "reason": down or "",
            }
        )
    links = daemon.store.cluster_links(None if request.all_users else caller.user)
    return {
        "partitions": partitions,
        "links": [
            {
                "partition": link.partition,
                "user": link.user,
                "login": link.login,
                "state": link.state,
                "reason": link.reason,
                "since": link.since,
                "linked": link.linked,
                "public": link.public,
            }
            for link in links
        ],
    }
