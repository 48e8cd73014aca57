"""The head's reading of gbatch-agent reports (schema 1, see agent/README.md).

The agent is never imported: its JSON lines are the contract. Parsing is strict about
what schema 1 promises and ignores keys it does not know, so the agent may add fields
without a schema bump. Pure: values in, values out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gbatch.core.gputypes import MIG_UUID_RE, Rule, gpu_type, mig_profile, slice_type
from gbatch.core.model import Gpu

SUPPORTED_SCHEMA = 1
SOURCES = frozenset({"nvml", "simulation", "none"})


class ReportError(ValueError):
    """An agent report that is not valid schema-1 JSON; the message names the field."""


@dataclass(frozen=True)
class ProcessReport:
    pid: int
    sid: int | None  # session id; None when the agent could not read it
    used_memory_mib: int | None
    container: str | None  # full docker container id, or None outside docker


@dataclass(frozen=True)
class MigReport:
    """One MIG device of a card in MIG mode, as the agent listed it (in slot order)."""

    uuid: str  # `MIG-...`: what CUDA_VISIBLE_DEVICES and `docker --gpus device=` take
    profile: str  # as NVML names it: `1g.10gb`, `1g.10gb+me`
    memory_total_mib: int
    memory_used_mib: int
    processes: tuple[ProcessReport, ...]


@dataclass(frozen=True)
class GpuReport:
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: int | None
    simulated: bool
    processes: tuple[ProcessReport, ...]
    # Optional keys (agents before MIG leave them out): the card is in MIG mode, and
    # its MIG devices.
    mig_enabled: bool = False
    mig: tuple[MigReport, ...] = ()


@dataclass(frozen=True)
class ContainerReport:
    """One container labelled gbatch.job, as the agent's `docker inspect` saw it."""

    id: str  # full docker container id
    name: str  # without docker's leading "/"
    job: int
    attempt: int
    user: str
    state: str  # docker's: "created", "running", "exited", "dead", "paused", ...
    exit_code: int | None  # None until the container has finished ("exited" or "dead")
    oom_killed: bool
    started_at: float | None  # seconds since the epoch (host clock); None: not yet
    finished_at: float | None
    node: str | None = None  # label gbatch.node: the node it was started for, if labelled


@dataclass(frozen=True)
class NodeReport:
    schema: int
    time: float
    host: str
    source: str  # one of SOURCES
    note: str
    gpus: tuple[GpuReport, ...]
    disk_free_bytes: int | None  # None: the agent could not measure its log dir
    # Empty when the agent was not asked to look at docker (no --docker) or could not.
    containers: tuple[ContainerReport, ...] = ()
    docker_note: str = ""  # why containers are missing, else ""
    # Only from an agent watching with a lease: the report's number in its stream (the
    # head renews the lease by answering `renew <seq>`), and the lease's seconds left.
    seq: int | None = None
    lease_remaining: float | None = None
    # Why the host could not write its renewed lease (a read-only or failing disk):
    # its fence would stop the runs when the old lease runs out. "" when all is well.
    lease_problem: str = ""
    # Host facts an older agent leaves out (None: unknown, not counted by the planner).
    cpus: int | None = None
    memory_mb: int | None = None  # MemTotal in MiB


def _field(data: Mapping[str, object], key: str, where: str) -> object:
    if key not in data:
        raise ReportError(f"{where}: missing key {key!r}")
    return data[key]


def _int(data: Mapping[str, object], key: str, where: str) -> int:
    return _as_int(_field(data, key, where), f"{where}.{key}", "an integer")


def _opt_int(data: Mapping[str, object], key: str, where: str) -> int | None:
    value = _field(data, key, where)
    return None if value is None else _as_int(value, f"{where}.{key}", "an integer or null")


def _as_int(value: object, path: str, expected: str) -> int:
    # bool is an int to Python but never a count or an id in a report
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReportError(f"{path}: expected {expected}, got {_describe(value)}")
    return value


def _str(data: Mapping[str, object], key: str, where: str) -> str:
    return _as_str(_field(data, key, where), f"{where}.{key}", "a string")


def _opt_str(data: Mapping[str, object], key: str, where: str) -> str | None:
    value = _field(data, key, where)
    return None if value is None else _as_str(value, f"{where}.{key}", "a string or null")


def _as_str(value: object, path: str, expected: str) -> str:
    if not isinstance(value, str):
        raise ReportError(f"{path}: expected {expected}, got {_describe(value)}")
    return value


def _bool(data: Mapping[str, object], key: str, where: str) -> bool:
    value = _field(data, key, where)
    if not isinstance(value, bool):
        raise ReportError(f"{where}.{key}: expected true or false, got {_describe(value)}")
    return value


def _opt_number(data: Mapping[str, object], key: str, where: str) -> float | None:
    value = _field(data, key, where)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"{where}.{key}: expected a number or null, got {_describe(value)}")
    return float(value)


def _list(data: Mapping[str, object], key: str, where: str) -> list[object]:
    value = _field(data, key, where)
    if not isinstance(value, list):
        raise ReportError(f"{where}.{key}: expected a list, got {_describe(value)}")
    return value


def _object(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ReportError(f"{where}: expected an object, got {_describe(value)}")
    return value


def _describe(value: object) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _parse_process(value: object, where: str) -> ProcessReport:
    data = _object(value, where)
    return ProcessReport(
        pid=_int(data, "pid", where),
        sid=_opt_int(data, "sid", where),
        used_memory_mib=_opt_int(data, "used_memory_mib", where),
        container=_opt_str(data, "container", where),
    )


def _parse_container(value: object, where: str) -> ContainerReport:
    data = _object(value, where)
    return ContainerReport(
        id=_str(data, "id", where),
        name=_str(data, "name", where),
        job=_int(data, "job", where),
        attempt=_int(data, "attempt", where),
        user=_str(data, "user", where),
        state=_str(data, "state", where),
        exit_code=_opt_int(data, "exit_code", where),
        oom_killed=_bool(data, "oom_killed", where),
        started_at=_opt_number(data, "started_at", where),
        finished_at=_opt_number(data, "finished_at", where),
        # Optional key (agents before the lease leave it out).
        node=_opt_str(data, "node", where) if "node" in data else None,
    )


def _parse_processes(data: Mapping[str, object], where: str) -> tuple[ProcessReport, ...]:
    return tuple(
        _parse_process(p, f"{where}.processes[{i}]")
        for i, p in enumerate(_list(data, "processes", where))
    )


def _parse_mig(value: object, where: str) -> MigReport:
    data = _object(value, where)
    uuid = _str(data, "uuid", where)
    # It goes into jobs' CUDA_VISIBLE_DEVICES and docker's --gpus device list.
    if not MIG_UUID_RE.fullmatch(uuid):
        raise ReportError(f"{where}.uuid: expected a MIG device UUID (MIG-...), got {uuid!r:.60}")
    return MigReport(
        uuid=uuid,
        profile=_str(data, "profile", where),
        memory_total_mib=_int(data, "memory_total_mib", where),
        memory_used_mib=_int(data, "memory_used_mib", where),
        processes=_parse_processes(data, where),
    )


def _parse_gpu(value: object, where: str) -> GpuReport:
    data = _object(value, where)
    simulated = _bool(data, "simulated", where)
    mig_enabled = _bool(data, "mig_enabled", where) if "mig_enabled" in data else False
    mig = _list(data, "mig", where) if mig_enabled and "mig" in data else []
    return GpuReport(
        index=_int(data, "index", where),
        uuid=_str(data, "uuid", where),
        name=_str(data, "name", where),
        memory_total_mib=_int(data, "memory_total_mib", where),
        memory_used_mib=_int(data, "memory_used_mib", where),
        utilization_pct=_opt_int(data, "utilization_pct", where),
        simulated=simulated,
        processes=_parse_processes(data, where),
        mig_enabled=mig_enabled,
        mig=tuple(_parse_mig(m, f"{where}.mig[{i}]") for i, m in enumerate(mig)),
    )


def parse_report(data: Mapping[str, object]) -> NodeReport:
    """Validate one decoded report and return it as values.

    Raises ReportError naming the first offending field (`report.gpus[1].uuid: ...`),
    or the schema version when it is not one this head reads.
    """
    where = "report"
    data = _object(data, where)
    schema = _int(data, "schema", where)
    if schema != SUPPORTED_SCHEMA:
        raise ReportError(
            f"report schema {schema} is not supported (this gbatch reads schema "
            f"{SUPPORTED_SCHEMA}); install the agent that ships with this gbatch "
            "(gbatch node install)"
        )
    timestamp = _field(data, "time", where)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise ReportError(f"report.time: expected a number, got {_describe(timestamp)}")
    source = _str(data, "source", where)
    if source not in SOURCES:
        raise ReportError(
            f"report.source: expected one of {', '.join(sorted(SOURCES))}, got {source!r}"
        )
    listed = _list(data, "gpus", where)
    gpus = tuple(_parse_gpu(g, f"report.gpus[{i}]") for i, g in enumerate(listed))
    if source == "none" and gpus:
        raise ReportError('report.gpus: a report with source "none" must list no GPUs')
    _check_unique(gpus)
    containers = tuple(
        _parse_container(c, f"report.containers[{i}]")
        for i, c in enumerate(_list(data, "containers", where))
    )
    # Optional: an agent started without --docker, or an older one, leaves it out.
    docker_note = data.get("docker_note", "")
    if not isinstance(docker_note, str):
        raise ReportError(f"report.docker_note: expected a string, got {_describe(docker_note)}")
    facts = _object(_field(data, "facts", where), "report.facts")
    seq = data.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise ReportError(f"report.seq: expected an integer, got {_describe(seq)}")
    lease = data.get("lease")
    remaining: float | None = None
    lease_problem = ""
    if lease is not None:
        lease_fields = _object(lease, "report.lease")
        value = lease_fields.get("remaining")
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ReportError(
                    f"report.lease.remaining: expected a number or null, got {_describe(value)}"
                )
            remaining = float(value)
        problem = lease_fields.get("problem", "")
        if not isinstance(problem, str):
            raise ReportError(f"report.lease.problem: expected a string, got {_describe(problem)}")
        lease_problem = problem
    return NodeReport(
        schema=schema,
        time=float(timestamp),
        host=_str(data, "host", where),
        source=source,
        note=_str(data, "note", where),
        gpus=gpus,
        disk_free_bytes=_opt_int(facts, "disk_free_bytes", "report.facts"),
        containers=containers,
        docker_note=docker_note,
        seq=seq,
        lease_remaining=remaining,
        lease_problem=lease_problem,
        cpus=_opt_positive(facts, "cpus", "report.facts"),
        memory_mb=_mib(_opt_positive(facts, "memory_bytes", "report.facts")),
    )


def _opt_positive(data: Mapping[str, object], key: str, where: str) -> int | None:
    """An optional count: absent, null or a whole number; 0 or less reads as unknown."""
    value = _opt_int(data, key, where) if key in data else None
    return value if value is not None and value > 0 else None


def _mib(value: int | None) -> int | None:
    return None if value is None else value // (1 << 20)


def _check_unique(gpus: tuple[GpuReport, ...]) -> None:
    # The head keys GPUs by UUID and hands out indices: either repeated is a broken report.
    for attribute in ("index", "uuid"):
        seen: set[object] = set()
        for position, gpu in enumerate(gpus):
            value = getattr(gpu, attribute)
            if value in seen:
                raise ReportError(f"report.gpus[{position}].{attribute}: {value!r} repeats")
            seen.add(value)
    uuids = {gpu.uuid for gpu in gpus}
    for position, gpu in enumerate(gpus):
        for slot, device in enumerate(gpu.mig):
            if device.uuid in uuids:
                raise ReportError(
                    f"report.gpus[{position}].mig[{slot}].uuid: {device.uuid!r} repeats"
                )
            uuids.add(device.uuid)


def parse_report_line(line: str | bytes) -> NodeReport:
    """Parse one line the agent printed (trailing newline allowed)."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ReportError(f"report is not UTF-8: {error}") from None
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise ReportError(f"report is not JSON: {error}: {line[:80]!r}") from None
    return parse_report(_object(data, "report"))


def gbatch_container_ids(report: NodeReport) -> frozenset[str]:
    """The full ids of the gbatch containers the report lists, in any state.

    They are what the head passes to `to_gpus` as `gbatch_containers`.
    """
    return frozenset(c.id for c in report.containers)


def _same_container(a: str, b: str) -> bool:
    # Docker shows 12-character ids and keeps 64: a prefix of either names the same one.
    a, b = a.lower(), b.lower()
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def is_foreign(
    process: ProcessReport,
    *,
    gbatch_sessions: Collection[int],
    gbatch_containers: Collection[str],
    gbatch_pids: Collection[int] = (),
) -> bool:
    """True for a compute process gbatch did not start.

    Not in its sessions, its containers, nor `gbatch_pids` (processes found in a run's
    cgroup: a job's, whatever its session)."""
    if process.sid is not None and process.sid in gbatch_sessions:
        return False
    if process.pid in gbatch_pids:
        return False
    container = process.container
    return container is None or not any(_same_container(container, c) for c in gbatch_containers)


Run = tuple[int, int]  # (job id, attempt)


@dataclass(frozen=True)
class RunOwner:
    """How a run's processes are known in a report: by session, or by container.

    `sessions`: the sessions of a bare run (its shim's, its steps'); `containers`: the
    ids (full or 12-character) of its container; `pids`: processes found in its cgroup
    (one the job moved to a session of its own is still there).
    """

    sessions: frozenset[int] = frozenset()
    containers: frozenset[str] = frozenset()
    pids: frozenset[int] = frozenset()

    def owns(self, process: ProcessReport) -> bool:
        """Whether `process` is this run's: in one of its sessions, its cgroup or container."""
        if process.sid is not None and process.sid in self.sessions:
            return True
        if process.pid in self.pids:
            return True
        container = process.container
        return container is not None and any(_same_container(container, c) for c in self.containers)


def container_owners(report: NodeReport, node: str) -> dict[Run, RunOwner]:
    """Each run's container among the report's gbatch containers started for `node`.

    A container labelled for another node (an engine serving another head) is no run of
    this one's.
    """
    owners: dict[Run, RunOwner] = {}
    for c in report.containers:
        if c.node in (None, node):
            run = (c.job, c.attempt)
            had = owners.get(run, RunOwner())
            owners[run] = RunOwner(had.sessions, had.containers | {c.id})
    return owners


def run_gpu_memory(report: NodeReport, gpus: Collection[int], owner: RunOwner) -> int | None:
    """MiB the run's own processes use on its `gpus` in this report; None if none is listed.

    The sum over the processes on those GPUs that `owner` owns, of those whose use the
    driver tells (NVML may not: such a process counts 0). Processes on GPUs the run does
    not hold are left out.
    """
    used: int | None = None
    on = processes_by_gpu(report)
    for index in set(gpus):
        for process in on.get(index, ()):
            if owner.owns(process):
                used = (used or 0) + (process.used_memory_mib or 0)
    return used


def processes_by_gpu(report: NodeReport) -> dict[int, tuple[ProcessReport, ...]]:
    """Each GPU's compute processes by the index a job holds it by (to_gpus' numbering).

    A card's under its index; a card in MIG mode's slices' under theirs, after the cards.
    """
    found = {g.index: g.processes for g in report.gpus}
    if any(g.mig_enabled for g in report.gpus):
        index = max(g.index for g in report.gpus) + 1
        for g in report.gpus:
            for device in g.mig:
                found[index] = device.processes
                index += 1
    return found


def to_gpus(
    report: NodeReport,
    *,
    gbatch_sessions: Collection[int],
    gbatch_containers: Collection[str],
    type_rules: tuple[Rule, ...] = (),
    gbatch_pids: Collection[int] = (),
) -> tuple[Gpu, ...]:
    """The report's GPUs as the model's Gpu values, counting processes gbatch did not start.

    `gbatch_sessions` are the session ids of bare-process jobs on this node;
    `gbatch_containers` the ids (full or 12-character) of its gbatch containers;
    `gbatch_pids` processes found in a run's cgroup. Each GPU's type comes from its
    name, by `type_rules` (the config's gpu_types) first; its foreign memory is its
    memory in use less what gbatch's processes hold.

    A card in MIG mode comes as itself (`mig`: never handed out) and each of its MIG
    devices as a GPU of its own after all the cards: its index the next after the
    highest card's, in card then slot order; its type the card's and its profile
    (`a100_1g.10gb`, Slurm's naming; the profile alone on a card of no type).
    """

    def foreign(processes: tuple[ProcessReport, ...]) -> list[bool]:
        return [
            is_foreign(
                p,
                gbatch_sessions=gbatch_sessions,
                gbatch_containers=gbatch_containers,
                gbatch_pids=gbatch_pids,
            )
            for p in processes
        ]

    def foreign_memory(used_mib: int, processes: tuple[ProcessReport, ...]) -> int:
        # What gbatch's own processes hold; the rest of the memory in use is foreign,
        # a process NVML cannot list (another namespace's) included.
        outside = foreign(processes)
        own = sum(
            p.used_memory_mib or 0 for p, out in zip(processes, outside, strict=True) if not out
        )
        return max(0, used_mib - own)

    cards = tuple(
        Gpu(
            index=g.index,
            uuid=g.uuid,
            name=g.name,
            memory_total_mib=g.memory_total_mib,
            memory_used_mib=g.memory_used_mib,
            utilization_pct=g.utilization_pct,
            foreign_processes=sum(foreign(g.processes)),
            simulated=g.simulated,
            foreign_memory_mib=foreign_memory(g.memory_used_mib, g.processes),
            type=gpu_type(g.name, type_rules),
            mig=g.mig_enabled,
        )
        for g in report.gpus
    )
    if not any(g.mig_enabled for g in report.gpus):
        return cards
    # Each MIG slice is a GPU of its own, numbered after the node's cards in card then
    # slot order: the numbers stay while the MIG layout does.
    slices = []
    index = max(g.index for g in report.gpus) + 1
    for card, g in zip(cards, report.gpus, strict=True):
        for device in g.mig:
            profile = mig_profile(device.profile) or _type_spelling(device.profile)
            slices.append(
                Gpu(
                    index=index,
                    uuid=device.uuid,
                    name=f"{card.name} MIG {profile}",
                    memory_total_mib=device.memory_total_mib,
                    memory_used_mib=device.memory_used_mib,
                    utilization_pct=None,  # NVML gives none per MIG device
                    foreign_processes=sum(foreign(device.processes)),
                    simulated=card.simulated,
                    foreign_memory_mib=foreign_memory(device.memory_used_mib, device.processes),
                    type=slice_type(card.type, profile),
                    parent=card.index,
                    profile=profile,
                )
            )
            index += 1
    return cards + tuple(slices)


def _type_spelling(profile: str) -> str:
    """A profile gbatch does not know as a MIG one, in a type's characters (a job can
    still ask for it whole as `CARD_PROFILE`)."""
    return re.sub(r"[^a-z0-9_.-]", "-", profile.lower()) or "unknown"
