"""Model objects to and from the JSON the socket carries.

Jobs (whole, or the brief records listings send), events, nodes, partitions and
fair-share rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter

from gbatch.core.model import (
    ClusterNodes,
    Event,
    Gpu,
    Job,
    JobSpec,
    JobState,
    NodeInfo,
    NodeState,
    PartitionInfo,
)
from gbatch.core.shares import CardShares

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:  # only sshare's replies carry these (start-up)
    from typing import Any

    from gbatch.core.limits import UserShare

# What a listing (squeue, sacct) prints of a spec; the rest (command, env, mounts)
# stays home, which makes a 1,000-job reply a third of the size.
BRIEF_SPEC_FIELDS = (
    "name",
    "gpus",
    "time_limit",
    "retries",
    "priority",
    "nice",
    "image",
    "partition",  # squeue's PARTITION column and -p
    "array_throttle",  # squeue's N_[4-15%2]
)
# Sent only when set (most jobs ask any GPU on any node): squeue's %b and %f; a share
# of a GPU (%b) under its stored key, gpu_mem; squeue's %v.
_BRIEF_IF_SET = (
    "gpu_type",
    "constraint",
    "gpu_mem_mb",
    "gpu_shards",
    "qos",
    "reservation",
    "alternate",  # -p gpu,uni: squeue shows both while it waits
)
# Sent only when not the default: squeue's NODES (%D) and sacct's NNodes (issue 32).
_BRIEF_IF_NOT_ONE = ("nodes",)
_BRIEF_KEYS = {"gpu_mem_mb": "gpu_mem"}
brief_values = attrgetter(*BRIEF_SPEC_FIELDS, *_BRIEF_IF_SET, *_BRIEF_IF_NOT_ONE)
_BRIEF_COUNT = len(BRIEF_SPEC_FIELDS)


def job_to_wire(job: Job, *, brief: bool = False) -> dict[str, Any]:
    """`brief`: only the spec fields listings show (command comes back empty)."""
    spec = brief_spec(job.spec) if brief else job.spec.to_dict()
    if brief and job.spec.array_task is not None:
        # Listings show an array task as N_K. Not in jobs_to_table's shared specs: there
        # an array's tasks would no longer share one.
        spec.update(array_task=job.spec.array_task, array_pos=job.spec.array_pos)
    return {
        "id": job.id,
        "uid": job.uid,
        "user": job.user,
        "spec": spec,
        "state": job.state.value,
        "submit_time": job.submit_time,
        "reason": job.reason,
        "held": job.held,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "node": job.node,
        "gpus": list(job.gpus),
        "gpu_uuids": list(job.gpu_uuids),
        "attempt": job.attempt,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "stop_state": job.stop_state.value if job.stop_state else None,
        **({"array_more": [list(span) for span in job.array_more]} if job.array_more else {}),
        **({"peers": [[name, list(gpus)] for name, gpus in job.peers]} if job.peers else {}),
    }


def brief_spec(spec: JobSpec) -> dict[str, Any]:
    values = brief_values(spec)
    brief = {**dict(zip(BRIEF_SPEC_FIELDS, values[:_BRIEF_COUNT], strict=True)), "command": []}
    ends = _BRIEF_COUNT + len(_BRIEF_IF_SET)
    for name, value in zip(_BRIEF_IF_SET, values[_BRIEF_COUNT:ends], strict=True):
        if value is not None:
            brief[_BRIEF_KEYS.get(name, name)] = value
    for name, value in zip(_BRIEF_IF_NOT_ONE, values[ends:], strict=True):
        if value != 1:
            brief[name] = value
    return brief


def job_from_wire(data: Mapping[str, Any], spec: JobSpec | None = None) -> Job:
    """The Job a job's wire form `data` holds.

    `spec`, when given, is data["spec"] already decoded (a client that meets the same
    spec in thousands of jobs decodes it once).
    """
    return Job(
        id=data["id"],
        uid=data["uid"],
        user=data["user"],
        spec=JobSpec.from_dict(data["spec"]) if spec is None else spec,
        state=JobState(data["state"]),
        submit_time=data["submit_time"],
        reason=data["reason"],
        held=data["held"],
        start_time=data["start_time"],
        end_time=data["end_time"],
        node=data["node"],
        gpus=tuple(data["gpus"]),
        gpu_uuids=tuple(data.get("gpu_uuids", ())),
        attempt=data["attempt"],
        exit_code=data["exit_code"],
        exit_signal=data["exit_signal"],
        stop_state=JobState(data["stop_state"]) if data["stop_state"] else None,
        array_more=tuple((a, b) for a, b in data.get("array_more", ())),
        peers=tuple((str(name), tuple(gpus)) for name, gpus in data.get("peers", ())),
    )


def event_to_wire(event: Event) -> dict[str, Any]:
    return {
        "job_id": event.job_id,
        "time": event.time,
        "state": event.state.value,
        "reason": event.reason,
    }


def event_from_wire(data: Mapping[str, Any]) -> Event:
    return Event(data["job_id"], data["time"], JobState(data["state"]), data["reason"])


def node_to_wire(node: NodeInfo) -> dict[str, Any]:
    return {
        "name": node.name,
        "state": node.state.value,
        "reason": node.reason,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "memory_total_mib": g.memory_total_mib,
                "memory_used_mib": g.memory_used_mib,
                "utilization_pct": g.utilization_pct,
                "foreign_processes": g.foreign_processes,
                "simulated": g.simulated,
                "type": g.type,
                # MIG keys only where they say something: a card in MIG mode, a slice.
                **({"mig": True} if g.mig else {}),
                **({"parent": g.parent, "profile": g.profile} if g.parent is not None else {}),
                **({"foreign_memory_mib": g.foreign_memory_mib} if g.foreign_memory_mib else {}),
            }
            for g in node.gpus
        ],
        "allocations": {str(index): job for index, job in node.allocations.items()},
        "free_gpus": None if node.free_gpus is None else list(node.free_gpus),
        "address": node.address,
        "partitions": list(node.partitions),
        "cpus_total": node.cpus_total,
        "mem_total_mb": node.mem_total_mb,
        "cpus_allocated": node.cpus_allocated,
        "mem_allocated_mb": node.mem_allocated_mb,
        "reason_time": node.reason_time,
        "reason_user": node.reason_user,
        "features": list(node.features),
        **({"shares": [_card_to_wire(card) for card in node.shares]} if node.shares else {}),
        **({"windows": [list(w) for w in node.windows]} if node.windows else {}),
        **({"maint": True} if node.maint else {}),
    }


def _card_to_wire(card: CardShares) -> dict[str, Any]:
    return {
        "index": card.index,
        "total_mib": card.total_mib,
        "foreign_mib": card.foreign_mib,
        "jobs": list(card.jobs),
        "budgets_mib": card.budgets_mib,
        "room_mib": card.room_mib,
        "exclusive": card.exclusive,
    }


def _card_from_wire(data: Mapping[str, Any]) -> CardShares:
    return CardShares(
        index=data["index"],
        total_mib=data["total_mib"],
        foreign_mib=data["foreign_mib"],
        jobs=tuple(data["jobs"]),
        budgets_mib=data["budgets_mib"],
        room_mib=data["room_mib"],
        exclusive=data.get("exclusive", False),
    )


def node_from_wire(data: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(
        name=data["name"],
        state=NodeState(data["state"]),
        reason=data["reason"],
        gpus=tuple(Gpu(**g) for g in data["gpus"]),
        allocations={int(index): job for index, job in data["allocations"].items()},
        free_gpus=None if data.get("free_gpus") is None else tuple(data["free_gpus"]),
        address=data.get("address", ""),
        partitions=tuple(data.get("partitions", ())),
        cpus_total=data.get("cpus_total"),
        mem_total_mb=data.get("mem_total_mb"),
        cpus_allocated=data.get("cpus_allocated", 0),
        mem_allocated_mb=data.get("mem_allocated_mb", 0),
        reason_time=data.get("reason_time"),
        reason_user=data.get("reason_user", ""),
        features=tuple(data.get("features", ())),
        shares=tuple(_card_from_wire(card) for card in data.get("shares", ())),
        windows=tuple(
            (str(w[0]), float(w[1]), float(w[2]), bool(w[3])) for w in data.get("windows", ())
        ),
        maint=bool(data.get("maint", False)),
    )


def partition_to_wire(partition: PartitionInfo) -> dict[str, Any]:
    return {
        "name": partition.name,
        "max_time": partition.max_time,
        "default": partition.default,
        "nodes": list(partition.nodes),
        "default_time": partition.default_time,
        "max_interactive_time": partition.max_interactive_time,
        "cluster": partition.cluster,
        "down_reason": partition.down_reason,
        # Absent from an older head's reply: read as not known.
        "cluster_nodes": None
        if partition.cluster_nodes is None
        else [_cluster_nodes_to_wire(group) for group in partition.cluster_nodes],
    }


def _cluster_nodes_to_wire(group: ClusterNodes) -> dict[str, Any]:
    return {
        "names": group.names,
        "count": group.count,
        "state": group.state,
        "state_long": group.state_long,
        "avail": group.avail,
        "max_time": group.max_time,
        "cpus": group.cpus,
        "mem_mb": group.mem_mb,
        "gres": group.gres,
        "reason": group.reason,
    }


def _cluster_nodes_from_wire(data: Mapping[str, Any]) -> ClusterNodes:
    return ClusterNodes(
        str(data["names"]),
        int(data["count"]),
        str(data["state"]),
        str(data["state_long"]),
        str(data.get("avail", "up")),
        data.get("max_time"),
        data.get("cpus"),
        data.get("mem_mb"),
        str(data.get("gres", "(null)")),
        str(data.get("reason", "")),
    )


def partition_from_wire(data: Mapping[str, Any]) -> PartitionInfo:
    nodes = data.get("nodes")
    groups = data.get("cluster_nodes")
    return PartitionInfo(
        data["name"],
        data.get("max_time"),
        bool(data.get("default", False)),
        tuple(str(n) for n in nodes) if isinstance(nodes, list) else (),
        data.get("default_time"),
        data.get("max_interactive_time"),
        data.get("cluster"),
        data.get("down_reason"),
        None
        if not isinstance(groups, list)
        else tuple(_cluster_nodes_from_wire(group) for group in groups),
    )


def share_to_wire(share: UserShare) -> dict[str, Any]:
    limits = share.limits
    return {
        "user": share.user,
        "usage": share.usage,
        "effective_usage": share.effective_usage,
        "fairshare": share.fairshare,
        "pending": share.pending,
        "running": share.running,
        "gpus": share.gpus,
        "limits": {
            "max_pending_jobs": limits.max_pending_jobs,
            "max_running_jobs": limits.max_running_jobs,
            "max_gpus": limits.max_gpus,
            "max_array_size": limits.max_array_size,
        },
    }


def share_from_wire(data: Mapping[str, Any]) -> UserShare:
    from gbatch.core.limits import UserLimits, UserShare  # deferred: only sshare reads these

    limits = data["limits"]
    return UserShare(
        user=data["user"],
        usage=data["usage"],
        effective_usage=data["effective_usage"],
        fairshare=data["fairshare"],
        pending=data["pending"],
        running=data["running"],
        gpus=data["gpus"],
        limits=UserLimits(
            max_pending_jobs=limits["max_pending_jobs"],
            max_running_jobs=limits["max_running_jobs"],
            max_gpus=limits["max_gpus"],
            max_array_size=limits["max_array_size"],
        ),
    )
