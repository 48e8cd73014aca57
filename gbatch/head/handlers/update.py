"""scontrol update: change a job's fields, or an array's throttle, checked and written.

gbatch/head/jobupdate.py plans the change (which fields, in which states, who may);
this module checks it against the fleet, the queue and the caller's limits, and writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gbatch.core import qos
from gbatch.core.limits import gpus_refusal
from gbatch.core.model import IllegalTransition, Job, JobSpec, JobState
from gbatch.core.timefmt import show_value
from gbatch.head import jobupdate
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.auth import allowed_qos, is_admin, submit_limits
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.submit import (
    check_dependency,
    check_fits_some_node,
    check_nodes_there,
)
from gbatch.head.handlers.targets import MAX_ARRAY, named_job, stored_job
from gbatch.protocol import requests


def on_update(daemon: Daemon, caller: Caller, request: requests.UpdateJob) -> dict[str, Any]:
    """scontrol update: change a job's fields, or its array's ArrayTaskThrottle.

    gbatch/head/jobupdate.py says which fields, when and who may. The owner or an admin
    only; raises need an admin. One transaction, one event per job; the planner sees it
    at its next pass, which this starts. An array's id (N, no task) changes each of its
    tasks that may still change, its tasks still waiting as one record too, as Slurm's
    `update JobId=N` of an array does."""
    found = named_job(daemon, caller, request.id, "update", request.task)
    admin = is_admin(daemon, caller)
    if not admin and caller.uid != found.uid:
        audit(daemon, caller, "update", found, "refused: not the owner")
        raise Refused(
            "permission",
            f"Access/permission denied: job {found.id} is {found.user}'s; only its owner "
            "or an admin may update it",
        )
    changes = dict(request.changes)
    throttled = [key for key in changes if requests.update_key(key) == "ArrayTaskThrottle"]
    notes: list[str] = []
    if throttled:
        notes.append(_update_throttle(daemon, caller, found, changes.pop(throttled[-1])))
        for key in throttled:
            changes.pop(key, None)
        if not changes:
            daemon.wake.set()
            return {"id": found.id, "changes": notes}
    if request.task is None and found.array_job_id == found.id:
        notes.extend(_update_array(daemon, caller, found, changes, admin))
        daemon.wake.set()
        return {"id": found.id, "changes": notes}
    if daemon.store.materialise([found.id]):  # a task still in its array's tail
        found = stored_job(daemon, found.id)
    spec, change = _planned_update(daemon, caller, found, changes, admin)
    if change.notes:
        _write_update(daemon, caller, found, spec, change)
        daemon.wake.set()
    return {"id": found.id, "changes": [*notes, *change.notes]}


def _in_qos(daemon: Daemon, caller: Caller, found: Job, spec: JobSpec) -> JobSpec:
    """QOS= (or a new time limit): the spec with its QOS's weight; Refused where not allowed.

    A QOS the job's owner may use (any, for an admin), whose max_wall the time limit
    keeps under."""
    table = daemon.config.qos
    name = spec.qos or qos.NORMAL
    if spec.qos != found.spec.qos:
        refused = qos.refusal(name, table, allowed_qos(daemon, caller, found.user))
        if refused is not None:
            audit(daemon, caller, "update", found, f"refused: {refused}")
            raise Refused("permission", refused.replace("qos:", "QOS:", 1))
    chosen = table.get(name)
    wall = qos.wall_refusal(chosen, spec.time_limit)
    if wall is not None and not is_admin(daemon, caller):
        raise Refused("invalid", wall)
    return spec.replace(qos_priority=chosen.priority)


def _planned_update(
    daemon: Daemon, caller: Caller, found: Job, changes: Mapping[str, str], admin: bool
) -> tuple[JobSpec, jobupdate.Update]:
    """The spec `changes` make of `found`'s, checked against the fleet and the queue."""
    try:
        change = jobupdate.plan_update(
            found, changes, admin=admin, partitions=daemon.fleet.partitions
        )
    except jobupdate.UpdateRefused as err:
        if err.kind == "permission":
            audit(daemon, caller, "update", found, f"refused: {err.message}")
        raise Refused(err.kind, err.message) from None
    spec = change.spec
    if spec.partition != found.spec.partition:
        sent = daemon.store.cluster_job(found.id)
        if sent is not None and sent.open:
            raise Refused(
                "invalid",
                f"Partition: job {found.id} was sent to cluster partition {sent.partition}; "
                "its partition cannot change there. Cancel it and submit it again",
            )
    if spec.qos != found.spec.qos or spec.time_limit != found.spec.time_limit:
        spec = _in_qos(daemon, caller, found, spec)
    if spec.total_gpus != found.spec.total_gpus:
        _check_update_gpus(daemon, caller, spec.total_gpus)
    if spec.nodes != found.spec.nodes:
        check_nodes_there(daemon, spec, "NumNodes")
    if (spec.gpus, spec.gpu_type, spec.constraint) != (
        found.spec.gpus,
        found.spec.gpu_type,
        found.spec.constraint,
    ):
        # What no node of the job's own partition holds, as submit refuses it: a count
        # the fleet's largest node holds may still be more than the partition has.
        typed = any(requests.update_key(key) == "NumGPUs" for key in changes)
        labels = {"gpus": "NumGPUs" if typed else "Gres", "constraint": "Features"}
        check_fits_some_node(daemon, spec, labels)
    if spec.dependency is not None and spec.dependency != found.spec.dependency:
        if jobupdate.self_reference(found.id, spec.dependency, found.array_job_id):
            raise Refused(
                "invalid",
                f"Dependency: job {found.id} cannot wait for itself (or its own array). "
                "Name other jobs",
            )
        spec = replace(spec, dependency=check_dependency(daemon, caller, spec.dependency))
    return spec, change


def _write_update(
    daemon: Daemon, caller: Caller, found: Job, spec: JobSpec, change: jobupdate.Update
) -> None:
    """Store `found`'s new `spec` with one event, or Refused when the job moved meanwhile."""
    what = "; ".join(change.notes)
    try:
        daemon.store.update_spec(
            found.id,
            found.spec,
            spec,
            change.states,
            f"updated {what} by {caller.user}",
            daemon.clock(),
        )
    except IllegalTransition:
        now = daemon.store.get(found.id)
        state = now.state.value if now is not None else "gone"
        raise Refused(
            "invalid",
            f"job {found.id} changed meanwhile (it is {state}); nothing was updated. "
            "Look at it (scontrol show job) and try again",
        ) from None
    audit(daemon, caller, "update", found, f"allowed: {what}")


def _update_array(
    daemon: Daemon, caller: Caller, array: Job, changes: Mapping[str, str], admin: bool
) -> list[str]:
    """`update JobId=N` of array N: each task that may take the changes gets them.

    A running task takes only a TimeLimit; the record of its tasks still waiting takes
    them too. Refused as a single job's update when no task could take them."""
    last = daemon.store.array_ends([array.id], MAX_ARRAY).get(array.id, array.id)
    tasks = [
        job
        for job in daemon.store.jobs(id_ranges=[(array.id, last)], finished=False)
        if job.state is not JobState.COMPLETING
    ]
    notes: list[str] = []
    refused: Refused | None = None
    for job in tasks:
        try:
            spec, change = _planned_update(daemon, caller, job, changes, admin)
        except Refused as err:
            refused = refused or err
            continue
        if not change.notes:
            continue
        if job.array_more:  # the tasks still waiting as one record
            daemon.store.update_tail_spec(array.id, spec)
        else:
            _write_update(daemon, caller, job, spec, change)
        notes = notes or list(change.notes)
    if not notes and refused is not None:
        raise refused
    return notes


def _update_throttle(daemon: Daemon, caller: Caller, found: Job, value: str) -> str:
    """ArrayTaskThrottle=M of the array `found` belongs to; the note the reply carries.

    At most M of its tasks run at once from the next pass (0: no limit, as Slurm). Tasks
    running already carry on."""
    array_id = found.array_job_id
    if array_id is None:
        raise Refused(
            "invalid",
            f"ArrayTaskThrottle: job {found.id} is not an array task. Name an array (N or N_K)",
        )
    text = value.strip()
    if not text.isdigit() or len(text) > 7:
        raise Refused(
            "invalid",
            f"ArrayTaskThrottle: {show_value(value)} is not a number of tasks. Give 0 (no "
            "limit) or more",
        )
    throttle = int(text) or None
    last = daemon.store.array_ends([array_id], MAX_ARRAY).get(array_id, array_id)
    old = found.spec.array_throttle
    daemon.store.set_array_throttle(array_id, last, throttle)
    note = f"ArrayTaskThrottle {old or 0} -> {throttle or 0}"
    audit(daemon, caller, "update", found, f"allowed: {note}")
    return note


def _check_update_gpus(daemon: Daemon, caller: Caller, gpus: int) -> None:
    """Refuse a new GPU count (on all the job's nodes) over the caller's max_gpus (the
    nodes: check_fits_some_node)."""
    limits = submit_limits(daemon, caller)
    refusal = None if limits is None else gpus_refusal(gpus, limits.max_gpus)
    if refusal is not None:
        raise Refused("invalid", refusal)
