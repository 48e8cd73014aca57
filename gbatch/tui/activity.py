"""The nodes view's pictures at terminal resolution: GPU sparklines and run lanes. Pure.

Each GPU's utilisation sparkline and a compact timeline of the runs that held it; no
textual, no clock.

Fed by the head's GPU sample history (`gpu_history`) and the timeline (`timeline`), the
same requests the web page's charts read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gbatch.core.labels import printable

SPARK_S = 600.0  # the sparkline's span: the last 10 minutes
SPARK_W = 20  # its cells: 30 s each
LANE_S = 6 * 3600.0  # the timeline's span: the last 6 hours
LANE_W = 36  # its cells: 10 minutes each
LEVELS = "▁▂▃▄▅▆▇█"  # 0 % the lowest: a sample shown; no sample a blank
EMPTY = "·"
# Users' colours in a terminal's 16: the same user the same colour on every refresh.
USER_STYLES = ("cyan", "green", "yellow", "magenta", "blue", "red", "bright_cyan", "bright_green")
OTHER_STYLE = "dim"
ACTIVITY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("gpu", "GPU"),
    ("spark", "UTIL, LAST 10 MIN"),
    ("lane", "RUNS, LAST 6 H"),
    ("users", "USERS"),
)


@dataclass(frozen=True)
class Held:
    """A run on a GPU: from `start` to `end` (None: still on), its job id and user.

    0 and "" for another user's run under private_data."""

    start: float
    end: float | None
    job: int
    user: str


@dataclass(frozen=True)
class GpuActivity:
    """One GPU's recent figures: utilisation samples and the runs that held it."""

    node: str
    index: int
    samples: tuple[tuple[float, float | None], ...]  # (time, mean utilisation %)
    runs: tuple[Held, ...]


@dataclass(frozen=True)
class Activity:
    """Every GPU's, as read at `now` (the daemon's clock)."""

    now: float
    gpus: tuple[GpuActivity, ...]


def sparkline(
    samples: Iterable[tuple[float, float | None]],
    end: float,
    span: float = SPARK_S,
    width: int = SPARK_W,
) -> str:
    """Utilisation over [end - span, end) in `width` cells, each its samples' mean.

    A cell with no sample (or none told) is a blank; 0 % is the lowest bar."""
    start = end - span
    cell = span / width
    sums = [0.0] * width
    counts = [0] * width
    for when, util in samples:
        if util is None or not start <= when < end:
            continue
        i = min(int((when - start) // cell), width - 1)
        sums[i] += util
        counts[i] += 1
    out = []
    for total, n in zip(sums, counts, strict=True):
        if not n:
            out.append(" ")
            continue
        level = min(int(total / n * len(LEVELS) / 100), len(LEVELS) - 1)
        out.append(LEVELS[max(level, 0)])
    return "".join(out)


def lane(
    runs: Sequence[Held], end: float, span: float = LANE_S, width: int = LANE_W
) -> list[tuple[str, str]]:
    """The runs over [end - span, end) in `width` cells: (character, user) each.

    A cell is held by the run that held most of it ("█" and its user; "" for another
    user's run), else EMPTY and user None ("")."""
    start = end - span
    cell = span / width
    out: list[tuple[str, str]] = []
    for i in range(width):
        lo, hi = start + i * cell, start + (i + 1) * cell
        best, user = 0.0, None
        for run in runs:
            overlap = min(hi, end if run.end is None else run.end) - max(lo, run.start)
            if overlap > best:
                best, user = overlap, run.user
        out.append(("█", user) if user is not None else (EMPTY, ""))
    return out


def user_style(user: str) -> str:
    """A user's colour: from their name, the same on every refresh ("" : other user)."""
    if not user:
        return OTHER_STYLE
    digest = hashlib.sha256(user.encode()).digest()
    return USER_STYLES[digest[0] % len(USER_STYLES)]


def users_text(runs: Sequence[Held], end: float, span: float = LANE_S) -> str:
    """Who held the GPU over the span, latest first, "other" for a hidden user."""
    seen: list[str] = []
    for run in sorted(runs, key=lambda r: -r.start):
        if (run.end is None or run.end > end - span) and run.start < end:
            name = printable(run.user) if run.user else "other"
            if name not in seen:
                seen.append(name)
    return ",".join(seen)


def activity_from_wire(
    history: Mapping[str, Any], timeline: Mapping[str, Any], now: float
) -> Activity:
    """The gpu_history and timeline replies as each GPU's Activity (the history's GPUs)."""
    runs: dict[tuple[str, int], list[Held]] = {}
    for run in timeline["runs"]:
        held = Held(float(run["start"]), run["end"], int(run["id"]), str(run["user"]))
        for node, ids in run["placements"]:
            for index in ids:
                runs.setdefault((node, int(index)), []).append(held)
    gpus = []
    for series in history["series"]:
        key = (str(series["node"]), int(series["index"]))
        samples = tuple(
            (float(p[0]), None if p[1] is None else float(p[1])) for p in series["points"]
        )
        gpus.append(GpuActivity(key[0], key[1], samples, tuple(runs.get(key, ()))))
    return Activity(now, tuple(gpus))
