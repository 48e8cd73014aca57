"""Reservations (Slurm's `scontrol create reservation`): what one is, how it is written.

A reservation keeps nodes (`Nodes=`, whole nodes) or GPUs (`GPUs=N [GpuType=]`, picked
when it is made and kept as node -> GPU ids) for its users from StartTime to EndTime;
DAILY and WEEKLY repeat that window. MAINT marks a maintenance window (sinfo shows its
nodes `maint`); IGNORE_JOBS lets it be made over running jobs.

Pure: parsing scontrol's key=value words, the window at a moment, the record as
stored (to_dict/from_dict) and as `scontrol show reservation` prints it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gbatch.core import hostlist
from gbatch.core.timefmt import parse_begin, parse_time_limit

FLAGS = ("MAINT", "IGNORE_JOBS", "DAILY", "WEEKLY")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", re.ASCII)
USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?", re.ASCII)
# The pending reasons the planner gives (squeue's spelling, as Slurm's).
RESERVATION_REASON = "Reservation"
MAINT_REASON = "ReqNodeNotAvail, Reserved for maintenance"
_PERIOD = {"DAILY": 86400.0, "WEEKLY": 7 * 86400.0}
_KEYS = {
    "reservationname": "name",
    "reservation": "name",
    "starttime": "start",
    "endtime": "end",
    "duration": "duration",
    "users": "users",
    "user": "users",
    "groups": "groups",
    "group": "groups",
    "nodes": "nodes",
    "nodelist": "nodes",
    "gpus": "gpus",
    "gputype": "gpu_type",
    "flags": "flags",
    "partitionname": "partition",
    "partition": "partition",
}
# Slurm's spelling of each field, for error lines.
LABELS = {
    "name": "ReservationName",
    "start": "StartTime",
    "end": "EndTime",
    "duration": "Duration",
    "users": "Users",
    "groups": "Groups",
    "nodes": "Nodes",
    "gpus": "GPUs",
    "gpu_type": "GpuType",
    "flags": "Flags",
    "partition": "PartitionName",
}


class ReservationError(ValueError):
    """Bad input: str() is one line naming the field and the fix."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{LABELS.get(key, key)}: {message}")
        self.key = key


@dataclass(frozen=True)
class Reservation:
    """One reservation as stored.

    `gpus`: the reserved GPUs, node -> ids (GPUs=N, picked at creation); `nodes`: whole
    nodes reserved (Nodes=). One of the two is set."""

    name: str
    start: float
    end: float
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()
    gpu_count: int = 0
    gpu_type: str | None = None
    flags: tuple[str, ...] = ()
    partition: str | None = None
    owner: str = ""  # who made it (a user's own booking under user_reservations)

    @property
    def maint(self) -> bool:
        return "MAINT" in self.flags

    @property
    def period(self) -> float | None:
        for flag in ("DAILY", "WEEKLY"):
            if flag in self.flags:
                return _PERIOD[flag]
        return None

    @property
    def node_names(self) -> tuple[str, ...]:
        """Every node it touches: its whole nodes, or those its GPUs are on."""
        return self.nodes or tuple(node for node, _ in self.gpus)

    def window(self, now: float) -> tuple[float, float] | None:
        """The window on at `now` or the next to come (DAILY/WEEKLY repeat it); None: over."""
        start, end = self.start, self.end
        period = self.period
        if period is not None and end <= now:
            skip = int((now - end) // period) + 1
            start, end = start + skip * period, end + skip * period
        return None if end <= now else (start, end)

    def run_until(self, started: float, over_run: float | None) -> float | None:
        """When a job of it that started at `started` is ended, or None for never.

        The end of the window it started in plus `over_run` seconds (Slurm's
        ResvOverRun). None: over_run None (Slurm's UNLIMITED), or it started in no
        window of this reservation."""
        if over_run is None:
            return None
        window = self.window(started)
        if window is None or window[0] > started:
            return None
        return window[1] + over_run

    def admits(self, user: str, groups: Sequence[str] = ()) -> bool:
        """Whether `user` (in `groups`) may run jobs in it."""
        return user in self.users or any(group in self.groups for group in groups)

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"name": self.name, "start": self.start, "end": self.end}
        for key in ("users", "groups", "nodes", "flags"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
        if self.gpus:
            data["gpus"] = [[node, list(ids)] for node, ids in self.gpus]
            data["gpu_count"] = self.gpu_count
        for key in ("gpu_type", "partition"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.owner:
            data["owner"] = self.owner
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Reservation:
        def words(key: str) -> tuple[str, ...]:
            return tuple(str(w) for w in data.get(key) or ())  # type: ignore[attr-defined]

        return cls(
            name=str(data["name"]),
            start=float(data["start"]),  # type: ignore[arg-type]
            end=float(data["end"]),  # type: ignore[arg-type]
            users=words("users"),
            groups=words("groups"),
            nodes=words("nodes"),
            gpus=tuple(
                (str(node), tuple(int(i) for i in ids))
                for node, ids in data.get("gpus") or ()  # type: ignore[attr-defined]
            ),
            gpu_count=int(data.get("gpu_count", 0)),  # type: ignore[call-overload]
            gpu_type=data.get("gpu_type"),  # type: ignore[arg-type]
            flags=words("flags"),
            partition=data.get("partition"),  # type: ignore[arg-type]
            owner=str(data.get("owner", "")),
        )


@dataclass(frozen=True)
class Request:
    """What `scontrol create|update reservation` asked, read but not yet placed.

    GPUs=N is picked by the daemon (it knows what is free). Fields None: not given."""

    name: str
    start: float | None = None
    end: float | None = None
    duration: float | None = None
    users: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None
    nodes: tuple[str, ...] | None = None
    gpus: int | None = None
    gpu_type: str | None = None
    flags: tuple[str, ...] | None = None
    partition: str | None = None
    # Flags+=X / Flags-=X of an update: added and removed.
    add_flags: tuple[str, ...] = field(default=())
    drop_flags: tuple[str, ...] = field(default=())


def parse_words(words: Sequence[str], now: float) -> Request:
    """scontrol's `Key=Value` words of a reservation (keys in any case) as a Request.

    ReservationError (one line naming the field and the fix) for anything wrong.
    """
    values: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        plus = key.endswith(("+", "-"))
        bare = key[:-1] if plus else key
        name = _KEYS.get(bare.lower())
        if not equals or name is None:
            known = "ReservationName, StartTime, EndTime, Duration, Users, Groups, Nodes, "
            raise ReservationError(
                word, f"not a reservation field. Use Key=Value with {known}GPUs, GpuType, Flags"
            )
        if plus and name != "flags":
            raise ReservationError(name, f"{key}= is for Flags only. Write {bare}=VALUE")
        values[name + (key[-1] if plus else "")] = value.strip()
    name = values.pop("name", "")
    if not NAME.fullmatch(name):
        raise ReservationError("name", f"{name!r} is not a name. Give ReservationName=NAME")
    result = Request(name=name)
    changes: dict[str, object] = {}
    for key, value in values.items():
        if key == "start":
            changes["start"] = _time(key, value, now)
        elif key == "end":
            changes["end"] = _time(key, value, now)
        elif key == "duration":
            try:
                seconds = parse_time_limit(value, field="Duration")
            except ValueError as err:
                raise ReservationError(
                    key, f"{value!r} is not a duration. Use {_DURATIONS}"
                ) from err
            if seconds is None:
                raise ReservationError(key, f"give a finite duration. Use {_DURATIONS}")
            changes["duration"] = float(seconds)
        elif key in ("users", "groups"):
            names = tuple(w for w in value.split(",") if w)
            bad = [w for w in names if not USER.fullmatch(w)]
            if bad or not names:
                what = "user" if key == "users" else "group"
                raise ReservationError(
                    key,
                    f"{bad[0] if bad else value!r} is not a {what} name. "
                    f"List names: {LABELS[key]}=alice,bob",
                )
            changes[key] = names
        elif key == "nodes":
            try:
                changes["nodes"] = tuple(hostlist.expand(value))
            except ValueError as err:
                raise ReservationError(
                    key, f"{err}. Give a host list: Nodes=gpu01 or Nodes=gpu[01-02]"
                ) from err
        elif key == "gpus":
            count = value.rpartition(":")[2]
            if ":" in value:
                changes["gpu_type"] = value.split(":")[-2].rpartition("/")[2] or None
            if not count.isdigit() or not 0 < int(count) <= 4096:
                raise ReservationError(key, f"{value!r} is not a GPU count. Give GPUs=N, N >= 1")
            changes["gpus"] = int(count)
        elif key == "gpu_type":
            if not NAME.fullmatch(value):
                raise ReservationError(key, f"{value!r} is not a GPU type. Give e.g. GpuType=a100")
            changes["gpu_type"] = value
        elif key.startswith("flags"):
            flags = tuple(dict.fromkeys(w.upper() for w in value.split(",") if w))
            bad = [f for f in flags if f not in FLAGS]
            if bad:
                raise ReservationError(
                    "flags", f"{bad[0]} is not a flag gbatch knows. Use {','.join(FLAGS)}"
                )
            target = {"flags": "flags", "flags+": "add_flags", "flags-": "drop_flags"}[key]
            changes[target] = flags
        elif key == "partition":
            if not NAME.fullmatch(value):
                raise ReservationError(key, f"{value!r} is not a partition name")
            changes["partition"] = value
    return replace(result, **changes)  # type: ignore[arg-type]


_DURATIONS = "MM, HH:MM:SS or D-HH:MM:SS (e.g. Duration=2:00:00)"


def _time(key: str, value: str, now: float) -> float:
    try:
        return parse_begin(value, now, field=LABELS[key])
    except ValueError as err:
        raise ReservationError(
            key,
            f"{value!r} is not a time. Use YYYY-MM-DDTHH:MM[:SS], now or now+N[minutes|hours|days]",
        ) from err


def build(request: Request, now: float, old: Reservation | None = None) -> Reservation:
    """The reservation `request` makes (create: `old` None) or makes of `old` (update).

    Its GPUs are still to be placed where it asks GPUs=N (Reservation.gpus empty,
    gpu_count set). ReservationError for what is missing or contradicts."""
    if old is None:
        if request.start is None:
            raise ReservationError(
                "start", "give StartTime=YYYY-MM-DDTHH:MM (or now, now+10minutes)"
            )
        if request.end is None and request.duration is None:
            raise ReservationError("duration", "give Duration=HH:MM:SS or EndTime=...")
        if request.nodes is None and request.gpus is None:
            raise ReservationError("nodes", "give Nodes=HOSTLIST or GPUs=N [GpuType=TYPE]")
        if not request.users and not request.groups:
            raise ReservationError(
                "users", "give Users=NAME[,NAME...] or Groups=GROUP (Slurm asks one)"
            )
    if request.nodes is not None and request.gpus is not None:
        raise ReservationError("nodes", "give Nodes= or GPUs=, not both")
    start = request.start if request.start is not None else (old.start if old else now)
    if request.duration is not None:
        end = start + request.duration
    elif request.end is not None:
        end = request.end
    elif old is not None:
        end = start + (old.end - old.start) if request.start is not None else old.end
    else:  # pragma: no cover - build's first check
        raise ReservationError("duration", "give Duration=")
    if end <= start:
        raise ReservationError(
            "end", "EndTime must come after StartTime. Give a later EndTime or a Duration"
        )
    if end <= now and old is None:
        raise ReservationError("end", "that window is over already. Give a StartTime to come")
    flags = request.flags if request.flags is not None else (old.flags if old else ())
    flags = tuple(
        f for f in dict.fromkeys((*flags, *request.add_flags)) if f not in request.drop_flags
    )
    if "DAILY" in flags and "WEEKLY" in flags:
        raise ReservationError("flags", "DAILY and WEEKLY exclude each other. Keep one")
    period = _PERIOD.get("DAILY" if "DAILY" in flags else "WEEKLY" if "WEEKLY" in flags else "")
    if period is not None and end - start >= period:
        raise ReservationError("duration", "a repeated window must be shorter than its period")
    base = old or Reservation(name=request.name, start=start, end=end)
    nodes, gpus, gpu_count = base.nodes, base.gpus, base.gpu_count
    gpu_type = request.gpu_type if request.gpu_type is not None else base.gpu_type
    if request.nodes is not None:
        nodes, gpus, gpu_count, gpu_type = request.nodes, (), 0, None
    elif request.gpus is not None or (request.gpu_type is not None and old is not None):
        nodes, gpus = (), ()
        gpu_count = request.gpus if request.gpus is not None else base.gpu_count
    return replace(
        base,
        start=start,
        end=end,
        users=request.users if request.users is not None else base.users,
        groups=request.groups if request.groups is not None else base.groups,
        nodes=nodes,
        gpus=gpus,
        gpu_count=gpu_count,
        gpu_type=gpu_type,
        flags=flags,
        partition=request.partition if request.partition is not None else base.partition,
    )


def overlaps(a: Reservation, b: Reservation, horizon: float) -> bool:
    """Whether `a` and `b` share a node's GPUs at some time before `horizon`.

    Their repeats (DAILY, WEEKLY) are included."""
    mine = _held(a)
    theirs = _held(b)
    shared = any(
        node in theirs and (mine[node] is None or theirs[node] is None or mine[node] & theirs[node])  # type: ignore[operator]
        for node in mine
    )
    if not shared:
        return False
    return any(
        s1 < e2 and s2 < e1 for s1, e1 in _windows(a, horizon) for s2, e2 in _windows(b, horizon)
    )


def _held(r: Reservation) -> dict[str, set[int] | None]:
    if r.nodes:
        return {node: None for node in r.nodes}
    return {node: set(ids) for node, ids in r.gpus}


def _windows(r: Reservation, horizon: float) -> list[tuple[float, float]]:
    period = r.period
    if period is None:
        return [(r.start, r.end)]
    out: list[tuple[float, float]] = []
    start, end = r.start, r.end
    while start < horizon and len(out) < 800:
        out.append((start, end))
        start, end = start + period, end + period
    return out


def windows_between(r: Reservation, start: float, end: float) -> list[tuple[float, float]]:
    """`r`'s windows that overlap [start, end) (DAILY, WEEKLY: each repeat)."""
    period = r.period
    if period is None:
        return [(r.start, r.end)] if r.start < end and r.end > start else []
    skip = max(0, int((start - r.end) // period) + 1) if r.end <= start else 0
    first, last = r.start + skip * period, r.end + skip * period
    out: list[tuple[float, float]] = []
    while first < end:
        if last > start:
            out.append((first, last))
        first, last = first + period, last + period
    return out


def duration_text(seconds: float) -> str:
    """A window's length as Slurm prints it: `02:00:00`, `1-00:00:00`."""
    total = round(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def state(r: Reservation, now: float) -> str:
    window = r.window(now)
    return "ACTIVE" if window is not None and window[0] <= now else "INACTIVE"


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def windows_text(windows: Sequence[Sequence[object]]) -> str:
    """A node's reservation windows (NodeInfo.windows: name, start, end, MAINT) in a line.

    `maint MAINT 12-10 14:00-16:00, demo 12-11 09:00-11:00`: the TUI's node view and the
    web page's nodes table."""
    parts = []
    for name, start, end, maint in windows:
        first = time.strftime("%m-%d %H:%M", time.localtime(float(start)))  # type: ignore[arg-type]
        last = time.strftime("%H:%M", time.localtime(float(end)))  # type: ignore[arg-type]
        parts.append(f"{name}{' MAINT' if maint else ''} {first}-{last}")
    return ", ".join(parts)


def format_show(r: Reservation, now: float) -> str:
    """One reservation as `scontrol show reservation` prints it (Slurm's layout)."""
    window = r.window(now) or (r.start, r.end)
    start, end = window
    if r.nodes:
        nodes, tres = hostlist.compress(r.nodes), ""
    else:
        nodes = hostlist.compress(node for node, _ in r.gpus)
        kind = f"gres/gpu:{r.gpu_type}" if r.gpu_type else "gres/gpu"
        tres = f"{kind}={r.gpu_count}"
    gpus = ";".join(f"{node}:{','.join(map(str, ids))}" for node, ids in r.gpus)
    return "\n".join(
        [
            f"ReservationName={r.name} StartTime={_stamp(start)} EndTime={_stamp(end)} "
            f"Duration={duration_text(end - start)}",
            f"   Nodes={nodes or '(null)'} NodeCnt={len(r.node_names)} "
            f"PartitionName={r.partition or '(null)'} Flags={','.join(r.flags) or '(null)'}",
            f"   TRES={tres or 'node=' + str(len(r.node_names))}"
            + (f" GPUs={gpus}" if gpus else ""),
            f"   Users={','.join(r.users) or '(null)'} Groups={','.join(r.groups) or '(null)'} "
            f"State={state(r, now)}" + (f" Owner={r.owner}" if r.owner else ""),
        ]
    )
