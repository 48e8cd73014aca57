"""Model objects <-> the JSON the daemon and its clients exchange over the socket."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from gbatch.model import Event, Gpu, Job, JobSpec, JobState, NodeInfo, NodeState

# What a listing (squeue, sacct) prints of a spec; the rest (command, env, mounts)
# stays home, which makes a 1,000-job reply a third of the size.
_BRIEF_SPEC_FIELDS = ("name", "gpus", "time_limit", "retries", "priority", "nice", "image")
_brief_values = attrgetter(*_BRIEF_SPEC_FIELDS)


def job_to_wire(job: Job, *, brief: bool = False) -> dict[str, Any]:
    """`brief`: only the spec fields listings show (command comes back empty)."""
    spec = _brief_spec(job.spec) if brief else job.spec.to_dict()
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
    }


def jobs_to_table(jobs: Sequence[Job]) -> dict[str, Any]:
    """Brief jobs as a table, for a client that lists thousands every second (the TUI):
    `{"specs": [brief spec, ...], "rows": [[spec index, id, uid, user, state, ...], ...]}`
    (job_to_wire's fields in its order, the spec replaced by its index).
    Jobs alike in their brief spec (an array's tasks) share one entry of `specs`, and
    a row is a list, not a mapping: a third of job_to_wire's bytes to encode and parse."""
    specs: list[dict[str, Any]] = []
    spec_index: dict[tuple[Any, ...], int] = {}
    rows = []
    for job in jobs:
        spec = job.spec
        key = _brief_values(spec)
        at = spec_index.get(key)
        if at is None:
            at = spec_index[key] = len(specs)
            specs.append(_brief_spec(spec))
        rows.append(
            [
                at,
                job.id,
                job.uid,
                job.user,
                job.state.value,
                job.submit_time,
                job.reason,
                job.held,
                job.start_time,
                job.end_time,
                job.node,
                list(job.gpus),
                list(job.gpu_uuids),
                job.attempt,
                job.exit_code,
                job.exit_signal,
                job.stop_state.value if job.stop_state else None,
            ]
        )
    return {"specs": specs, "rows": rows}


def job_from_row(row: Sequence[Any], spec: JobSpec) -> Job:
    """One row of jobs_to_table's (its spec already decoded).

    Built without Job's __init__: a frozen dataclass sets each of its 18 fields through
    object.__setattr__, half of what decoding 10,000 rows costs the TUI at each read.
    The fields go straight into the new object's __dict__ instead, which gives an
    equal Job (tests/unit/test_wire.py checks every field against Job(...)).
    """
    (
        _,
        job_id,
        uid,
        user,
        state,
        submit_time,
        reason,
        held,
        start_time,
        end_time,
        node,
        gpus,
        gpu_uuids,
        attempt,
        exit_code,
        exit_signal,
        stop_state,
    ) = row
    job: Job = _new_object(Job)
    job.__dict__.update(
        id=job_id,
        uid=uid,
        user=user,
        spec=spec,
        state=_STATES[state],
        submit_time=submit_time,
        reason=reason,
        held=held,
        start_time=start_time,
        end_time=end_time,
        node=node,
        gpus=tuple(gpus),
        gpu_uuids=tuple(gpu_uuids),
        attempt=attempt,
        exit_code=exit_code,
        exit_signal=exit_signal,
        stop_state=_STATES[stop_state] if stop_state else None,
        secret_values=(),  # never on the wire
    )
    return job


_STATES = {state.value: state for state in JobState}
_new_object = object.__new__
# What job_from_row's shortcut relies on: a Job keeps its fields in its __dict__ and
# its __init__ does nothing but set them.
assert not hasattr(Job, "__slots__") and not hasattr(Job, "__post_init__")


def _brief_spec(spec: JobSpec) -> dict[str, Any]:
    return {**dict(zip(_BRIEF_SPEC_FIELDS, _brief_values(spec), strict=True)), "command": []}


def job_from_wire(data: Mapping[str, Any], spec: JobSpec | None = None) -> Job:
    """`spec`, when given, is data["spec"] already decoded (a client that meets the same
    spec in thousands of jobs decodes it once)."""
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
            }
            for g in node.gpus
        ],
        "allocations": {str(index): job for index, job in node.allocations.items()},
        "address": node.address,
    }


def node_from_wire(data: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(
        name=data["name"],
        state=NodeState(data["state"]),
        reason=data["reason"],
        gpus=tuple(Gpu(**g) for g in data["gpus"]),
        allocations={int(index): job for index, job in data["allocations"].items()},
        address=data.get("address", ""),
    )
