"""Quality of service: the head config's `qos:` block, validated, and who may use each.

Slurm's QOS, as a lab needs them (docs/priorities.md):

    qos:
      normal: {}                        # always there, open to everyone
      high:
        priority: 1000                  # added to the job's priority in the queue order
        max_gpus: 8                     # per user, GPUs held by their jobs of this QOS
        max_running_jobs: 2             # per user, their jobs of this QOS on nodes
        max_pending_jobs: 10            # per user, refused at submit past it
        max_wall: 1-00:00:00            # the longest time limit a job of it may ask
                                        #   (a number: minutes, as -t reads it)
        preempt: [scavenger]            # the QOS its jobs may push aside
        users: [alice]                  # who may use it: users and Unix groups,
        groups: [deadline]              #   or `users: ALL`
      scavenger:
        priority: -100
        preempt_mode: requeue           # what happens to ITS jobs when preempted
        grace_time: 60                  # seconds between the signal and the kill
        preempt_exempt_time: 600        # not preempted in its first 600 s (or 10:00)
        users: ALL

A QOS without `users:` or `groups:` is for admins only (they may use every QOS). The
per-user limits are Slurm's MaxTRESPerUser=gres/gpu, MaxJobsPerUser and
MaxSubmitJobsPerUser of the QOS, on top of the `limits:` block's (gbatch/core/limits.py),
with its wording. Pure but for the user and group look-ups of `parse_qos`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gbatch.core.constants import NORMAL_QOS
from gbatch.core.limits import LimitsError, _group_exists, _limit, _user_exists
from gbatch.core.model import Job
from gbatch.core.timefmt import format_duration, parse_time_limit

NORMAL = NORMAL_QOS
# What happens to a QOS's jobs when they are preempted (Slurm's PreemptMode).
PREEMPT_MODES = ("requeue", "cancel", "off")
DEFAULT_GRACE_TIME = 120
# A QOS's name, as `-q` spells it.
QOS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", re.ASCII)
# The word that opens a QOS to every user.
EVERYONE = "ALL"
# How a preempted job's reason begins (sacct's Reason, its events): "Preempted by 812 (QOS
# high)" (gbatch/head/loop/preempt.py).
PREEMPTED_BY = "Preempted by "
_PRIORITY_BOUND = 1_000_000


@dataclass(frozen=True)
class Qos:
    """One QOS. None is no limit; `users`/`groups` None: nobody named (admins only)."""

    name: str
    priority: int = 0
    max_gpus: int | None = None
    max_running_jobs: int | None = None
    max_pending_jobs: int | None = None
    max_wall: int | None = None  # seconds
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "requeue"
    grace_time: int = DEFAULT_GRACE_TIME
    preempt_exempt_time: int = 0
    everyone: bool = False
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    @property
    def limits_running(self) -> bool:
        """Whether the loop has any of this QOS's jobs to hold back per user."""
        return self.max_running_jobs is not None or self.max_gpus is not None

    def open_to(self, user: str, groups: Collection[str]) -> bool:
        """Whether `user`, a member of `groups`, may submit to this QOS (not admins')."""
        return self.everyone or user in self.users or any(g in self.groups for g in groups)

    def may_preempt(self, other: str) -> bool:
        return other in self.preempt


def _normal() -> Mapping[str, Qos]:
    return MappingProxyType({NORMAL: Qos(NORMAL, everyone=True)})


@dataclass(frozen=True)
class QosTable:
    """The whole `qos:` block, by name; `normal` is always in it."""

    by_name: Mapping[str, Qos] = field(default_factory=_normal)

    def get(self, name: str | None) -> Qos:
        """The QOS of a job: None, or a name the admin removed since, reads as `normal`."""
        return self.by_name.get(name or NORMAL) or self.by_name[NORMAL]

    def allowed(self, user: str, groups: Collection[str], *, admin: bool = False) -> list[str]:
        """The names `user` may submit to, in the config's order."""
        return [q.name for q in self.by_name.values() if admin or q.open_to(user, groups)]

    @property
    def names(self) -> list[str]:
        return list(self.by_name)

    @property
    def limits_running(self) -> bool:
        return any(q.limits_running for q in self.by_name.values())

    @property
    def needs_groups(self) -> bool:
        return any(q.groups for q in self.by_name.values())


def refusal(name: str, table: QosTable, allowed: list[str]) -> str | None:
    """Why a submit to QOS `name` is refused for a user allowed `allowed`, or None."""
    if name in allowed:
        return None
    known = name in table.by_name
    why = "is not a QOS you may use" if known else "is not a QOS here"
    return (
        f"qos: {name!r} {why}. Use one of: {', '.join(allowed) or '(none)'} "
        "(gbatch scontrol show qos lists them)"
    )


def wall_refusal(qos: Qos, time_limit: int | None) -> str | None:
    """Why a time limit is over the QOS's max_wall, or None (None: no limit asked)."""
    cap = qos.max_wall
    if cap is None or (time_limit is not None and time_limit <= cap):
        return None
    asked = "no time limit" if time_limit is None else format_duration(time_limit)
    return (
        f"time_limit: {asked} is over QOS {qos.name}'s max_wall ({format_duration(cap)}). "
        "Ask for at most that (-t), or use another QOS (-q)"
    )


def gpus_refusal(qos: Qos, gpus: int) -> str | None:
    """Why a job of `gpus` GPUs could never start under the QOS's max_gpus, or None."""
    cap = qos.max_gpus
    if cap is None or gpus <= cap:
        return None
    return (
        f"limits: the job asks for {gpus} GPUs, QOS {qos.name}'s limit (max_gpus) is {cap}, "
        "so it could never start. Ask for fewer, or use another QOS (-q)"
    )


class QosError(LimitsError):
    """A bad `qos:` setting; str() names the key and the fix."""


_INT_KEYS = ("max_gpus", "max_running_jobs", "max_pending_jobs")
_KEYS = (
    "priority",
    *_INT_KEYS,
    "max_wall",
    "preempt",
    "preempt_mode",
    "grace_time",
    "preempt_exempt_time",
    "users",
    "groups",
)


def parse_qos(
    raw: object,
    *,
    user_exists: Callable[[str], bool] | None = None,
    group_exists: Callable[[str], bool] | None = None,
) -> QosTable:
    """The `qos:` block of config.yaml (null: `normal` only). Raises QosError."""
    user_exists = user_exists or _user_exists
    group_exists = group_exists or _group_exists
    if raw is None:
        return QosTable()
    if not isinstance(raw, Mapping):
        raise QosError(
            f"qos: {raw!r} is not a mapping of QOS names to settings like "
            "{high: {priority: 1000}}. Fix the value"
        )
    table: dict[str, Qos] = {}
    if NORMAL not in raw:
        table[NORMAL] = Qos(NORMAL, everyone=True)
    for name, settings in raw.items():
        if not isinstance(name, str) or not QOS_NAME.fullmatch(name):
            raise QosError(f"qos: {name!r} is not a QOS name (letters, digits, _.-). Fix it")
        table[name] = _one(name, settings, user_exists, group_exists)
    for qos in table.values():
        for other in qos.preempt:
            if other not in table:
                raise QosError(
                    f"qos.{qos.name}.preempt: {other!r} is not a QOS here. Use one of: "
                    f"{', '.join(table)}"
                )
            if other == qos.name:
                raise QosError(f"qos.{qos.name}.preempt: a QOS cannot preempt itself. Fix it")
    return QosTable(MappingProxyType(table))


def _one(
    name: str,
    raw: object,
    user_exists: Callable[[str], bool],
    group_exists: Callable[[str], bool],
) -> Qos:
    where = f"qos.{name}"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise QosError(f"{where}: {raw!r} is not a mapping of settings like {{priority: 10}}")
    values: dict[str, object] = {}
    for key, value in raw.items():
        here = f"{where}.{key}"
        if key not in _KEYS:
            import difflib  # deferred: only a mistyped key needs it

            near = difflib.get_close_matches(str(key), _KEYS, n=1)
            hint = f'Did you mean "{near[0]}"?' if near else f"Valid keys: {', '.join(_KEYS)}"
            raise QosError(f'{where}: unknown setting "{key}". {hint}')
        if key == "priority":
            if isinstance(value, bool) or not isinstance(value, int):
                raise QosError(f"{here}: {value!r} is not a whole number. Fix the value")
            if abs(value) > _PRIORITY_BOUND:
                raise QosError(f"{here}: {value!r} is past +-{_PRIORITY_BOUND}. Fix the value")
            values[key] = value
        elif key in _INT_KEYS:
            try:
                values[key] = _limit(value, here, 0)
            except LimitsError as err:
                raise QosError(str(err)) from None
        elif key in ("max_wall", "grace_time", "preempt_exempt_time"):
            values[key] = _seconds(value, here, nullable=key == "max_wall")
        elif key == "preempt":
            values[key] = _names(value, here)
        elif key == "preempt_mode":
            if value not in PREEMPT_MODES:
                raise QosError(f"{here}: {value!r} is not one of {', '.join(PREEMPT_MODES)}")
            values[key] = value
        elif key == "users" and value == EVERYONE:
            values["everyone"] = True
        else:
            exists = user_exists if key == "users" else group_exists
            what = "user" if key == "users" else "Unix group"
            names = _names(value, here)
            for each in names:
                if not exists(each):
                    raise QosError(f"{here}: {each!r} is not an existing {what}. Fix the name")
            values[key] = frozenset(names)
    if name == NORMAL and not raw.get("users") and not raw.get("groups"):
        values["everyone"] = True  # normal is everyone's unless the admin narrows it
    return Qos(name, **values)  # type: ignore[arg-type]


def _seconds(value: object, where: str, *, nullable: bool) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QosError(f"{where}: {value!r} is not a duration (seconds, or like 1:00:00)")
    if isinstance(value, int) and not nullable:  # grace times: seconds, as Slurm's
        if value < 0:
            raise QosError(f"{where}: {value!r} is below zero. Fix the value")
        return value
    try:
        seconds = parse_time_limit(value, field=where)
    except ValueError as err:
        raise QosError(str(err)) from None
    if seconds is None:
        if nullable:
            return None
        raise QosError(f"{where}: {value!r} is not a duration (seconds, or like 1:00:00)")
    return seconds


def _names(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise QosError(f"{where}: {value!r} is not a list of names. Fix the value")
    return tuple(value)


def describe(qos: Qos) -> dict[str, object]:
    """A QOS as the wire and `scontrol show qos` carry it."""
    return {
        "name": qos.name,
        "priority": qos.priority,
        "max_gpus": qos.max_gpus,
        "max_running_jobs": qos.max_running_jobs,
        "max_pending_jobs": qos.max_pending_jobs,
        "max_wall": qos.max_wall,
        "preempt": list(qos.preempt),
        "preempt_mode": qos.preempt_mode,
        "grace_time": qos.grace_time,
        "preempt_exempt_time": qos.preempt_exempt_time,
        "users": EVERYONE if qos.everyone else sorted(qos.users),
        "groups": sorted(qos.groups),
    }


# Pending reasons of the per-user QOS limits, Slurm's words (the `limits:` block's too).
MAX_JOBS_REASON = "QOSMaxJobsPerUserLimit"
MAX_GPUS_REASON = "QOSMaxGRESPerUser"


def over_qos_limits(
    pending: Sequence[Job], allocated: Iterable[Job], table: QosTable
) -> dict[int, str]:
    """The `pending` jobs their QOS's per-user limits hold back, and the reason of each.

    max_running_jobs and max_gpus, per (user, QOS): the jobs on nodes count
    (`allocated`), then the pending ones that are not held, by priority (then age, then
    id), go while they fit in the room left; the rest wait. As an array's %MAX: what
    goes may still wait for GPUs."""
    limited = {q.name for q in table.by_name.values() if q.limits_running}
    if not limited:
        return {}
    held_now: dict[tuple[str, str], list[int]] = {}
    for job in allocated:
        name = table.get(job.spec.qos).name
        if name in limited:
            count = held_now.setdefault((job.user, name), [0, 0])
            count[0] += 1
            count[1] += job.spec.total_gpus
    waiting: dict[int, str] = {}
    ordered = sorted(
        (j for j in pending if not j.held and table.get(j.spec.qos).name in limited),
        key=lambda j: (-j.spec.effective_priority, j.submit_time, j.id),
    )
    for job in ordered:
        qos = table.get(job.spec.qos)
        count = held_now.setdefault((job.user, qos.name), [0, 0])
        if qos.max_running_jobs is not None and count[0] >= qos.max_running_jobs:
            waiting[job.id] = MAX_JOBS_REASON
        elif qos.max_gpus is not None and count[1] + job.spec.total_gpus > qos.max_gpus:
            waiting[job.id] = MAX_GPUS_REASON
        else:
            count[0] += 1
            count[1] += job.spec.total_gpus
    return waiting
