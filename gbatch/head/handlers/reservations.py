"""Reservations: `scontrol create|update|delete reservation`, `show reservation`, `sinfo -T`.

Admins make, change and delete them (Slurm's rule). A reservation over nodes where jobs
run into its window is refused unless IGNORE_JOBS (Slurm's "Requested nodes are busy"),
and so is one that shares a GPU with another at the same time. GPUs=N [GpuType=] is
placed here, once: on the GPUs of the partition (or fleet) that no job holds into the
window and no other reservation keeps, fewest nodes first; the record keeps them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from gbatch.core.gputypes import type_matches
from gbatch.core.model import ALLOCATED_STATES, Job
from gbatch.core.reservations import (
    Reservation,
    ReservationError,
    build,
    overlaps,
    parse_words,
)
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.auth import is_admin, require_admin
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.protocol import requests

log = logging.getLogger("gbatchd")

# How far ahead repeated windows (DAILY, WEEKLY) are compared with others.
OVERLAP_HORIZON_S = 366 * 86400.0


def on_reservations(
    daemon: Daemon, caller: Caller, request: requests.ListReservations
) -> dict[str, Any]:
    """Every reservation (or the one named), as records: anyone may read them (Slurm's too)."""
    found = [r for r in daemon.store.reservations() if request.name in (None, r.name)]
    if request.name is not None and not found:
        raise Refused("not_found", f"no reservation {request.name!r}")
    return {"reservations": [r.to_dict() for r in found], "now": daemon.clock()}


def on_reservation_change(
    daemon: Daemon, caller: Caller, request: requests.ChangeReservation
) -> dict[str, Any]:
    """scontrol create|update reservation."""
    if request.action not in ("create", "update"):
        raise Refused("invalid", f"{request.action!r}: give create or update")
    now = daemon.clock()
    try:
        asked = parse_words(list(request.words), now)
    except ReservationError as err:
        raise Refused("invalid", str(err)) from err
    known = {r.name: r for r in daemon.store.reservations()}
    old = known.get(asked.name)
    # Over the API (a token) no one acts as an admin: admins make reservations on the head.
    admin = is_admin(daemon, caller) and caller.scopes is None
    if not admin and not _own_booking(daemon, old, caller):
        if caller.scopes is not None:
            audit(daemon, caller, f"reservation_{request.action}", asked.name, "refused: token")
            raise Refused(
                "permission",
                "over the API only your own booking under user_reservations; admins make "
                "reservations on the head (gbatch scontrol)",
            )
        require_admin(
            daemon,
            caller,
            f"reservation_{request.action}",
            asked.name,
            f"{request.action} reservations (user_reservations lets users book GPUs for "
            "themselves)",
        )
    if request.action == "create" and old is not None:
        raise Refused("invalid", f"ReservationName: {asked.name} exists. Pick another name")
    if request.action == "update" and old is None:
        raise Refused("not_found", f"ReservationName: no reservation {asked.name!r}")
    try:
        made = build(asked, now, old)
    except ReservationError as err:
        raise Refused("invalid", str(err)) from err
    if not admin:
        made = _user_booking(daemon, caller, made, known.values(), now)
    _check_nodes(daemon, made)
    allocated = daemon.store.jobs_in(ALLOCATED_STATES)
    others = [r for name, r in known.items() if name != made.name]
    if not made.nodes and not made.gpus:
        made = _place_gpus(daemon, made, allocated, others)
    elif made.nodes and "IGNORE_JOBS" not in made.flags:
        busy = _busy_into(made, allocated)
        if busy:
            raise Refused(
                "invalid",
                f"Nodes: Requested nodes are busy (job {busy[0].id} on {busy[0].node} runs "
                "into the window). Pick a later StartTime, other Nodes, or Flags=IGNORE_JOBS",
            )
    for other in others:
        if overlaps(made, other, now + OVERLAP_HORIZON_S):
            raise Refused(
                "invalid",
                f"Nodes: the window shares GPUs with reservation {other.name} at the same "
                "time. Pick other Nodes or another StartTime",
            )
    what = f"{'created' if old is None else 'updated'} by {caller.user}: " + " ".join(request.words)
    daemon.store.put_reservation(made, what[:1000], now)
    audit(daemon, caller, f"reservation_{request.action}", made.name, "ok")
    log.info("reservation %s %s", made.name, what[:200])
    daemon.wake.set()
    return {"reservation": made.to_dict()}


def on_reservation_delete(
    daemon: Daemon, caller: Caller, request: requests.DeleteReservation
) -> dict[str, Any]:
    """scontrol delete ReservationName=NAME: its jobs still queued wait (Reservation)."""
    old = {r.name: r for r in daemon.store.reservations()}.get(request.name)
    own = old is not None and old.owner == caller.user and daemon.config.user_reservations > 0
    if not own:
        if caller.scopes is not None:
            raise Refused("permission", "delete reservations on the head (gbatch scontrol)")
        require_admin(daemon, caller, "reservation_delete", request.name, "delete reservations")
    if not daemon.store.delete_reservation(
        request.name, f"deleted by {caller.user}", daemon.clock()
    ):
        raise Refused("not_found", f"ReservationName: no reservation {request.name!r}")
    audit(daemon, caller, "reservation_delete", request.name, "ok")
    daemon.wake.set()
    return {}


def _own_booking(daemon: Daemon, old: Reservation | None, caller: Caller) -> bool:
    """Whether a user's request may go on to user_reservations' checks.

    The policy is on, and the reservation is new or their own booking."""
    return daemon.config.user_reservations > 0 and (old is None or old.owner == caller.user)


def _user_booking(
    daemon: Daemon,
    caller: Caller,
    made: Reservation,
    known: Iterable[Reservation],
    now: float,
) -> Reservation:
    """A user's own booking under `user_reservations: N`, checked, with its owner.

    GPUs=N for themselves alone, no flags, and their bookings within a week of it at
    most N GPU-hours."""
    cap = daemon.config.user_reservations
    if made.nodes:
        raise Refused("permission", "Nodes: users book GPUs=N; whole nodes are an admin's")
    if made.users != (caller.user,) or made.groups:
        raise Refused(
            "permission", f"Users: a user books for themselves alone: Users={caller.user}"
        )
    if made.flags:
        raise Refused(
            "permission", f"Flags: {','.join(made.flags)} are an admin's. Leave Flags out"
        )
    week = 7 * 86400.0
    hours = made.gpu_count * (made.end - made.start) / 3600
    for other in known:
        mine = other.owner == caller.user and other.name != made.name
        if mine and abs(other.start - made.start) < week and other.end > now:
            gpus = sum(len(ids) for _, ids in other.gpus)
            hours += gpus * (other.end - other.start) / 3600
    if hours > cap + 1e-9:
        raise Refused(
            "permission",
            f"GPUs: {hours:g} GPU-hours within a week of it, over user_reservations' {cap:g}. "
            "Book fewer GPUs or a shorter Duration",
        )
    return replace(made, owner=caller.user)


def _check_nodes(daemon: Daemon, made: Reservation) -> None:
    fleet = daemon.fleet
    if made.partition is not None and made.partition not in fleet.partitions:
        names = ", ".join(sorted(fleet.partitions)) or "none"
        raise Refused(
            "invalid", f"PartitionName: no partition {made.partition!r} (partitions: {names})"
        )
    unknown = [name for name in made.nodes if name not in fleet.nodes]
    if unknown:
        names = ", ".join(sorted(fleet.nodes)) or "none"
        raise Refused("invalid", f"Nodes: no node {unknown[0]!r} in the fleet (nodes: {names})")
    if made.partition is not None:
        members = set(fleet.partitions[made.partition].nodes)
        outside = [name for name in made.nodes if name not in members]
        if outside:
            raise Refused(
                "invalid",
                f"Nodes: {outside[0]} is not in partition {made.partition}. Name its nodes",
            )


def _end(job: Job) -> float:
    if job.start_time is None or job.time_limit is None:
        return math.inf
    return job.start_time + job.time_limit


def _busy_into(made: Reservation, allocated: Sequence[Job]) -> list[Job]:
    """The running jobs on its nodes that run into its (first) window; not its own."""
    nodes = set(made.nodes)
    return [
        job
        for job in allocated
        if _end(job) > made.start
        and job.spec.reservation != made.name
        and any(node in nodes for node, _ in job.placements)
    ]


def _place_gpus(
    daemon: Daemon, made: Reservation, allocated: Sequence[Job], others: Sequence[Reservation]
) -> Reservation:
    """GPUs=N [GpuType=]: N GPUs of the partition (or fleet), free of jobs into the window
    (unless IGNORE_JOBS) and of other reservations, fewest nodes first."""
    fleet = daemon.fleet
    names = (
        list(fleet.partitions[made.partition].nodes)
        if made.partition is not None
        else sorted(fleet.nodes)
    )
    drained = daemon.store.drained_nodes()
    held: dict[str, set[int]] = {}
    if "IGNORE_JOBS" not in made.flags:
        for job in allocated:
            if _end(job) > made.start and job.spec.reservation != made.name:
                for where, gpus in job.placements:
                    held.setdefault(where, set()).update(gpus)
    candidates: list[tuple[str, list[int]]] = []
    for name in names:
        node = fleet.nodes.get(name)
        if node is None:
            continue
        view = fleet.node_view(node, allocated, drained, now=daemon.clock())
        if not view.available:
            continue
        types = dict(view.gpu_types)
        ids = [
            i
            for i in range(view.gpus_total)
            if i not in held.get(name, ())
            and (made.gpu_type is None or type_matches(types.get(i, ""), made.gpu_type))
        ]
        for other in others:  # not a GPU another one keeps (checked again with times)
            if name in other.nodes:
                ids = []
            for node_name, taken in other.gpus:
                if node_name == name:
                    ids = [i for i in ids if i not in taken]
        if ids:
            candidates.append((name, ids))
    candidates.sort(key=lambda c: (-len(c[1]), c[0]))
    want = made.gpu_count
    picked: list[tuple[str, tuple[int, ...]]] = []
    for name, ids in candidates:
        if want <= 0:
            break
        take = ids[:want]
        picked.append((name, tuple(take)))
        want -= len(take)
    if want > 0:
        kind = f" of type {made.gpu_type}" if made.gpu_type else ""
        raise Refused(
            "invalid",
            f"GPUs: Requested nodes are busy: {made.gpu_count - want} GPU(s){kind} free of "
            f"running jobs into the window, {made.gpu_count} asked. Ask fewer, a later "
            "StartTime, or Flags=IGNORE_JOBS",
        )
    return replace(made, gpus=tuple(sorted(picked)))
