"""scontrol update's rules: which of a job's fields change, to what, and who may change them.

Pure: the job, the changes as the user wrote them and the caller's rank in; the new spec (or
why not) out. The handler checks what needs the store and the fleet (dependencies' jobs, GPU
counts against the nodes) and writes the result.

As in Slurm: a pending job's fields may change; a running job's time limit too. A
user may lower their job's time limit and priority; raising either needs an admin.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from gbatch.core import dependency
from gbatch.core.gputypes import gres_text
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.qos import NORMAL
from gbatch.core.timefmt import TimeLimitError, format_duration, parse_time_limit, show_value
from gbatch.jobspec.nodeopts import check_nodes, settle_nodes
from gbatch.jobspec.optvalues import check_name as _check_name
from gbatch.jobspec.slurmopts import (
    check_comment,
    check_constraint,
    check_dependency,
    check_partition,
    check_qos,
    parse_gpus,
    parse_gres,
)
from gbatch.jobspec.spec import OVERRIDE_OPTION, SpecError
from gbatch.nodes.inventory import Partition
from gbatch.protocol import requests

# Keys a job that has started may still change (Slurm: the time limit).
RUNNING_KEYS = frozenset({"TimeLimit"})
RUNNING_STATES = frozenset({JobState.CONFIGURING, JobState.RUNNING})
PRIORITY_RANGE = (-10000, 10000)  # as the job file's priority and nice


class UpdateRefused(Exception):
    """The update cannot be made: `kind` is a wire error kind, `message` what to do."""

    def __init__(self, kind: Literal["invalid", "permission"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Update:
    """The spec after the changes, a note per change, and the states the job must still be in.

    `notes` say each change ("Priority 0 -> -5"); `states` are those the job must still be
    in when it is written.
    """

    spec: JobSpec
    notes: tuple[str, ...]
    states: frozenset[JobState]


def keys_listed() -> str:
    return ", ".join(requests.UPDATE_KEYS)


def plan_update(
    job: Job, changes: Mapping[str, str], *, admin: bool, partitions: Mapping[str, Partition]
) -> Update:
    """The update of `job` that `changes` (key -> value text; keys in any case) ask for.

    Raises UpdateRefused: an unknown key, a value that is not one, a job past the state the
    key allows, a raise a non-admin asked for, a partition the fleet lacks or whose max_time
    the time limit passes.
    """
    if not changes:
        raise UpdateRefused(
            "invalid", f"nothing to update. Give KEY=VALUE, KEY one of {keys_listed()}"
        )
    named: dict[str, str] = {}
    for text, value in changes.items():
        key = requests.update_key(text)
        if key is None:
            raise UpdateRefused(
                "invalid",
                f"{text}: not a key gbatch updates. Use one of {keys_listed()} (any case)",
            )
        named[key] = value
    if job.state.is_final or job.state is JobState.COMPLETING:
        raise UpdateRefused(
            "invalid",
            f"Job/step already completing or completed: job {job.id} is {job.state.value}",
        )
    running = job.state in RUNNING_STATES
    if running:
        late = sorted(set(named) - RUNNING_KEYS)
        if late:
            raise UpdateRefused(
                "invalid",
                f"{', '.join(late)}: Job is no longer pending execution: job {job.id} is "
                f"{job.state.value}. Only TimeLimit changes once a job has started",
            )
    spec, notes = job.spec, []
    for key, value in named.items():
        spec, note = _CHANGES[key](spec, value, admin)
        if note is not None:
            notes.append(f"{key} {note}")
    spec = _check_partition_time(spec, partitions, changed="Partition" in named)
    # A time limit may change while the job starts; the other keys only while it waits.
    states = (
        RUNNING_STATES | {JobState.PENDING} if set(named) <= RUNNING_KEYS else {JobState.PENDING}
    )
    return Update(spec, tuple(notes), frozenset(states))


def _spec_error(key: str, err: SpecError | TimeLimitError) -> UpdateRefused:
    return UpdateRefused("invalid", f"{key}: {err.message}")


def _integer(key: str, value: str) -> int:
    low, high = PRIORITY_RANGE
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise UpdateRefused(
            "invalid",
            f"{key}: {show_value(value)} is not a whole number from {low} to {high}. Give one",
        )
    return number


def _time_limit(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    try:
        limit = parse_time_limit(value, field="TimeLimit")
    except TimeLimitError as err:
        raise _spec_error("TimeLimit", err) from None
    old = spec.time_limit
    if not admin and (limit is None or (old is not None and limit > old)):
        raise UpdateRefused(
            "permission",
            f"TimeLimit: only root, the daemon's user or an admin may raise a job's time limit "
            f"(as in Slurm); it is {format_duration(old)}. Ask for at most that",
        )
    return replace(spec, time_limit=limit), _arrow(format_duration(old), format_duration(limit))


def _priority(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    priority = _integer("Priority", value)
    if not admin and priority > spec.priority:
        raise UpdateRefused(
            "permission",
            f"Priority: only an admin may raise a job's priority; it is {spec.priority}. "
            "Give at most that",
        )
    return replace(spec, priority=priority), _arrow(spec.priority, priority)


def _nice(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    nice = _integer("Nice", value)
    if not admin and nice < spec.nice:
        # A lower nice is a higher priority: the same rule as Priority's.
        raise UpdateRefused(
            "permission",
            f"Nice: only an admin may lower a job's nice value (raise its priority); it is "
            f"{spec.nice}. Give at least that",
        )
    return replace(spec, nice=nice), _arrow(spec.nice, nice)


def _name(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    try:
        name = _check_name(value, "JobName")
    except SpecError as err:
        raise _spec_error("JobName", err) from None
    return replace(spec, name=name), _arrow(spec.name, name)


def _dependency(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    """Dependency= (empty) clears it, as in Slurm. The jobs it names are the handler's
    to check against the store."""
    if not value.strip():
        return replace(spec, dependency=None), _arrow(spec.dependency or "(null)", "(null)")
    try:
        text = check_dependency(value, "Dependency")
    except SpecError as err:
        raise _spec_error("Dependency", err) from None
    return replace(spec, dependency=text), _arrow(spec.dependency or "(null)", text)


def _gpus(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    """NumGPUs=N changes the count and keeps the job's GPU type; NumGPUs=TYPE:N sets both."""
    try:
        kind, gpus = parse_gpus(value, "NumGPUs")
    except SpecError as err:
        raise _spec_error("NumGPUs", err) from None
    kind = spec.gpu_type if ":" not in value else kind
    if spec.gpu_mem_mb is not None and gpus != 1:
        raise UpdateRefused(
            "invalid",
            f"NumGPUs: the job asks for a share of one GPU (--gpu-mem), not {gpus} GPUs. "
            "Use Gres=gpu:N to ask for whole GPUs instead",
        )
    return _new_gpus(spec, kind, gpus, "NumGPUs")


def _gres(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    """Gres=gpu[:TYPE]:N replaces the job's GPU request whole, as in Slurm (a share of
    one GPU, --gpu-mem, too: the job then asks for whole GPUs)."""
    try:
        kind, gpus = parse_gres(value)
    except SpecError as err:
        raise UpdateRefused("invalid", f"Gres: {err.message}") from None
    return _new_gpus(replace(spec, gpu_mem_mb=None), kind, gpus, "Gres")


def _new_gpus(spec: JobSpec, kind: str | None, gpus: int, key: str) -> tuple[JobSpec, str | None]:
    if kind is not None and gpus == 0:
        raise UpdateRefused(
            "invalid", f"{key}: GPU type {kind} but no GPUs. Ask for some ({kind}:1), or drop it"
        )
    new = replace(spec, gpus=gpus, gpu_type=kind)
    return new, _arrow(_gres_of(spec), _gres_of(new))


def _gres_of(spec: JobSpec) -> str:
    """A spec's GPUs as scontrol update takes them back: `gpu:a100:2`, `gpu:2`, `(null)`."""
    return gres_text(spec.gpus, spec.gpu_type) if spec.gpus else "(null)"


def _features(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    """Features= (Slurm's name for the job's constraint); empty clears it."""
    if not value.strip():
        constraint = None
    else:
        try:
            constraint = check_constraint(value, "Features")
        except SpecError as err:
            raise _spec_error("Features", err) from None
    return replace(spec, constraint=constraint), _arrow(
        spec.constraint or "(null)", constraint or "(null)"
    )


def _partition(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    try:
        name = check_partition(value.strip(), "Partition")
    except SpecError as err:
        raise _spec_error("Partition", err) from None
    if "," in name:
        raise UpdateRefused(
            "invalid",
            f"Partition: {show_value(name)} names two partitions; scontrol update takes one. "
            "Name one of them",
        )
    # A partition named now is the job's only one: -p gpu,uni's other goes.
    return replace(spec, partition=name, alternate=None), _arrow(spec.partition or "(null)", name)


def _comment(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    try:
        comment = check_comment(value, "Comment") or None
    except SpecError as err:
        raise _spec_error("Comment", err) from None
    # The comment's text is the user's: the event says only that it changed.
    return replace(spec, comment=comment), None if comment == spec.comment else "changed"


def _num_nodes(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    """NumNodes=N (Slurm's MIN-MAX taken as MIN): the nodes a pending job spans.

    Held to what a submit is: its tasks, -w and a share of one GPU must still fit the
    count. A container job runs on every node; a bare one keeps how it runs (a job
    submitted on one node runs its command on the first node, with srun in it)."""
    try:
        nodes = check_nodes(value.strip(), "NumNodes")
    except SpecError as err:
        raise _spec_error("NumNodes", err) from None
    fields: dict[str, object] = {
        "nodes": nodes,
        "nodelist": spec.nodelist,
        "exclude": spec.exclude,
        "exclusive": spec.exclusive,
        "ntasks": spec.ntasks,
        "ntasks_per_node": spec.ntasks_per_node,
    }
    for key in ("gpu_mem_mb", "gpu_shards", "gpu_type"):
        if getattr(spec, key) is not None:
            fields[key] = getattr(spec, key)
    labels = {**OVERRIDE_OPTION, "nodes": "NumNodes"}
    try:
        settle_nodes(fields, labels)
    except SpecError as err:
        raise UpdateRefused("invalid", str(err)) from None
    every_node = spec.every_node or (nodes > 1 and spec.image is not None)
    new = replace(spec, nodes=nodes, every_node=every_node)
    return new, _arrow(spec.nodes, nodes)


def _arrow(old: object, new: object) -> str | None:
    return None if old == new else f"{old} -> {new}"


def _qos(spec: JobSpec, value: str, admin: bool) -> tuple[JobSpec, str | None]:
    """QOS=: its name; whether the job's owner may use it, the daemon checks (update.py)."""
    try:
        name = check_qos(value.strip(), "QOS")
    except SpecError as err:
        raise _spec_error("QOS", err) from None
    return replace(spec, qos=name), _arrow(spec.qos or NORMAL, name)


_CHANGES = {
    "TimeLimit": _time_limit,
    "Priority": _priority,
    "Nice": _nice,
    "JobName": _name,
    "Dependency": _dependency,
    "NumGPUs": _gpus,
    "Gres": _gres,
    "Features": _features,
    "Partition": _partition,
    "QOS": _qos,
    "Comment": _comment,
    "NumNodes": _num_nodes,
}


def _check_partition_time(
    spec: JobSpec, partitions: Mapping[str, Partition], *, changed: bool
) -> JobSpec:
    """A partition named must exist; the time limit must not pass its max_time, nor an
    srun/salloc allocation's its max_interactive_time (as at submit: Slurm would leave the
    job pending for good)."""
    if not partitions or spec.partition is None:
        if changed:
            raise UpdateRefused("invalid", "Partition: this fleet has no partitions. Leave it out")
        return spec
    partition = partitions.get(spec.partition)
    if partition is None:
        raise UpdateRefused(
            "invalid",
            f"Partition: {show_value(spec.partition)} is not a partition here. Use one of: "
            f"{', '.join(partitions)}",
        )
    top = partition.max_time
    if top is not None and (spec.time_limit is None or spec.time_limit > top):
        raise UpdateRefused(
            "invalid",
            f"TimeLimit: {format_duration(spec.time_limit)} is over partition "
            f"{partition.name}'s max_time ({format_duration(top)}). Ask for at most that",
        )
    cap = partition.max_interactive_time
    over = spec.time_limit is None or (cap is not None and spec.time_limit > cap)
    if spec.interactive is not None and cap is not None and over:
        raise UpdateRefused(
            "invalid",
            f"TimeLimit: {format_duration(spec.time_limit)} is over partition "
            f"{partition.name}'s max_interactive_time ({format_duration(cap)}), the "
            f"longest an {spec.interactive} allocation may run. Ask for at most that",
        )
    return spec


def self_reference(job_id: int, text: str | None, array_id: int | None) -> bool:
    """Whether a dependency names the job itself (or its own array): it would wait for good."""
    if text is None:
        return False
    own: Collection[int] = {job_id} if array_id is None else {job_id, array_id}
    return any(ref.id in own for ref in dependency.parse(text).refs)
