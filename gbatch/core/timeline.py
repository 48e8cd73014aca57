"""The GPU timeline's figures over a range: pending queue, reservations, idle stretches.

The pending queue's length as steps, reservations' windows inside the range, and the
stretches a held GPU sat idle. Pure: the head reads the store and the web
page draws what these return."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gbatch.core.reservations import Reservation, windows_between

# The most points a pending-queue series carries: past it, each of this many equal
# slices of the range keeps its largest count (a chart is this many pixels wide at most).
MAX_POINTS = 600
# The longest range the timeline draws: its picker's 30 days and an eighth ahead.
MAX_RANGE_S = 34 * 86400


def pending_steps(
    spans: Iterable[tuple[float, float | None]], start: float, end: float
) -> list[tuple[float, int]]:
    """How many jobs wait at each change inside [start, end): [(time, count), ...].

    `spans` are (entered the queue, left it or None); the first point is at `start`.
    Past MAX_POINTS changes, each of MAX_POINTS slices of the range keeps its largest
    count, at the slice's start.
    """
    waiting = 0
    changes: list[tuple[float, int]] = []
    for entered, left in spans:
        if left is not None and left <= start:
            continue
        if entered <= start:
            waiting += 1
        elif entered < end:
            changes.append((entered, 1))
        if left is not None and start < left < end:
            changes.append((left, -1))
    changes.sort()
    steps = [(start, waiting)]
    for when, delta in changes:
        waiting += delta
        if when == steps[-1][0]:
            steps[-1] = (when, waiting)
        else:
            steps.append((when, waiting))
    if len(steps) <= MAX_POINTS:
        return steps
    width = (end - start) / MAX_POINTS
    out: list[tuple[float, int]] = []
    i, current = 0, 0
    for slot in range(MAX_POINTS):
        slot_start = start + slot * width
        peak = current  # what waits as the slice begins
        while i < len(steps) and steps[i][0] < slot_start + width:
            current = steps[i][1]
            peak = max(peak, current)
            i += 1
        out.append((slot_start, peak))
    return out


def reservation_windows(
    reservations: Sequence[Reservation], start: float, end: float
) -> list[tuple[str, str, tuple[int, ...], float, float, bool]]:
    """Each window of `reservations` that overlaps [start, end), per node.

    (name, node, GPU ids (empty: the whole node), window start, window end, MAINT),
    repeating ones (DAILY, WEEKLY) once per window."""
    out: list[tuple[str, str, tuple[int, ...], float, float, bool]] = []
    for r in reservations:
        held: list[tuple[str, tuple[int, ...]]] = [(node, ()) for node in r.nodes]
        held = held or [(node, tuple(ids)) for node, ids in r.gpus]
        for first, last in windows_between(r, start, end):
            out.extend((r.name, node, ids, first, last, r.maint) for node, ids in held)
    return out


def idle_stretches(
    points: Sequence[tuple[float, int | None]], threshold: float, least_s: float, step: float
) -> list[tuple[float, float]]:
    """The stretches a held GPU read under `threshold` percent for `least_s` or longer.

    `points` are (time, peak utilisation or None: not told) in time order, each standing
    for `step` seconds (1 s or 1 min: the history's). A point not told ends a stretch, as
    the idle_gpu policy counts a GPU that cannot tell as busy, and so does a gap of more
    than two steps without a point (the node was silent). [(start, end), ...]."""
    out: list[tuple[float, float]] = []
    since: float | None = None
    until = 0.0
    for when, util in [*points, (float("inf"), None)]:
        idle = util is not None and util < threshold
        if since is not None and (not idle or when - until > step):
            if until - since >= least_s:
                out.append((since, until))
            since = None
        if idle:
            since = when if since is None else since
            until = when + step
    return out
