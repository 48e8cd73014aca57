"""The GPU timeline's picture: the daemon's timeline reply laid out as SVG shapes. Pure.

Server-drawn: the page's template writes these shapes as inline SVG (presentation
attributes, no style attribute, no script), so the page's strict Content-Security-Policy
holds, and Jinja2 escapes every label (job names, users) as it does in the tables.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

# The range picker: its values, the span each stands for. 24 h by default.
RANGES: Mapping[str, float] = {
    "1h": 3600,
    "6h": 6 * 3600,
    "24h": 86400,
    "3d": 3 * 86400,
    "7d": 7 * 86400,
    "30d": 30 * 86400,
}
DEFAULT_RANGE = "24h"
LABEL_W = 150  # the lanes' names, left of the plot
PLOT_W = 1050
LANE_H = 14  # 50 nodes x 8 GPUs: 400 lanes, 5,600 px, scrolled as a table would be
NODE_GAP = 6
PENDING_H = 60
AXIS_H = 18
MIN_BAR_W = 3.0  # a run of seconds in a long range: still seen, and clicked
CHAR_W = 6.4  # a bar's label's characters at the stylesheet's 10.5px
OTHER_USER = "other user"
OTHER_FILL = "#9aa3ad"


def user_fill(user: str) -> str:
    """A user's bar colour, the same on every page and every day: a hue from their name."""
    if not user:
        return OTHER_FILL
    hue = int.from_bytes(hashlib.sha256(user.encode()).digest()[:2], "big") % 360
    return f"hsl({hue}, 62%, 52%)"


def _natural(name: str) -> list[Any]:
    """gpu2 before gpu10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _clock(stamp: float, span: float) -> str:
    return time.strftime("%H:%M" if span <= 86400 else "%m-%d %H:%M", time.localtime(stamp))


def layout(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The shapes of the timeline over the reply's [start, end), and the picture's size.

    Lanes, bars, idle strips, windows, the pending queue as a polyline, the time axis.

    One lane per GPU, grouped by node (the fleet's GPUs now, and any a run in the range
    held since); each run a bar on each of its GPUs, from its start to its end (or now).
    """
    start, end, now = float(reply["start"]), float(reply["end"]), float(reply["now"])
    span = end - start

    def x(stamp: float) -> float:
        return LABEL_W + PLOT_W * (min(max(stamp, start), end) - start) / span

    gpus_of: dict[str, set[int]] = {}
    parent_of: dict[tuple[str, int], int] = {}
    for node, gpus in reply["lanes"]:
        for index, parent in gpus:
            gpus_of.setdefault(node, set()).add(index)
            if parent is not None:
                parent_of[(node, index)] = parent
    spans: list[tuple[dict[str, Any], float, float]] = []
    for run in reply["runs"]:
        for node, ids in run["placements"]:
            gpus_of.setdefault(node, set()).update(ids)
        right = x(now if run["end"] is None else float(run["end"]))
        # drawn back from its end, inside the range: a run of seconds in a long range
        spans.append((run, min(x(float(run["start"])), right - MIN_BAR_W), right))
    placed = _row_of(spans)
    rows = _rows(placed)
    lanes, groups, labels, y = {}, [], [], AXIS_H
    for node in sorted(gpus_of, key=_natural):
        top = y

        def card_first(index: int, node: str = node) -> tuple[int, int, int]:
            parent = parent_of.get((node, index))
            return (index, 0, 0) if parent is None else (parent, 1, index)

        for gpu in sorted(gpus_of[node], key=card_first):
            lanes[(node, gpu)] = y
            parent = parent_of.get((node, gpu))
            text = f"GPU {gpu}" if parent is None else f"MIG {gpu} of {parent}"
            labels.append({"node": node, "gpu": gpu, "y": y, "text": text})
            y += LANE_H * rows.get((node, gpu), 1)  # runs sharing a card: a sub-lane each
        groups.append({"node": node, "y": top, "h": y - top, "gpus": sorted(gpus_of[node])})
        y += NODE_GAP
    lanes_bottom = y
    bars = []
    for (run, left, right), row in zip(spans, placed, strict=True):
        width = right - left
        user = run["user"] or OTHER_USER
        label = f"{run['id']} {run['name']}" if run["id"] else OTHER_USER
        chars = int((width - 4) // CHAR_W)
        until = "now" if run["end"] is None else _clock(float(run["end"]), span)
        for node, ids in run["placements"]:
            for gpu in ids:
                bars.append(
                    {
                        "x": round(left, 1),
                        "y": lanes[(node, gpu)] + LANE_H * row.get((node, gpu), 0) + 1,
                        "w": round(width, 1),
                        "h": LANE_H - 2,
                        "fill": user_fill(run["user"]),
                        "href": f"/ui/jobs/{run['id']}" if run["id"] else "",
                        "job": run["id"],
                        "attempt": run.get("attempt", 0),  # absent from an older daemon's
                        "node": node,
                        "gpu": gpu,
                        "start": run["start"],
                        "end": run["end"],
                        "text": label[:chars] if chars >= 3 else "",
                        "title": f"{label} ({user}), {_state(run)}, "
                        f"{_clock(float(run['start']), span)} to {until}, {node} GPU {gpu}",
                    }
                )
    idle = []
    for (run, _, _), row in zip(spans, placed, strict=True):
        for node, gpu, first, last in run.get("idle", ()):
            if (node, gpu) not in lanes:
                continue
            minutes = (float(last) - float(first)) / 60
            idle.append(
                {
                    "x": round(x(float(first)), 1),
                    "y": lanes[(node, gpu)] + LANE_H * (row.get((node, gpu), 0) + 1) - 5,
                    "w": round(max(x(float(last)) - x(float(first)), 1.0), 1),
                    "h": 4,
                    "job": run["id"],
                    "node": node,
                    "gpu": gpu,
                    "title": f"idle while held: {minutes:.0f} min from "
                    f"{_clock(float(first), span)}, {node} GPU {gpu}",
                }
            )
    windows = []
    for name, node, ids, first, last, maint in reply["windows"]:
        held = ids or sorted(gpus_of.get(node, ()))
        for g in [g for g in held if (node, g) in lanes]:
            windows.append(
                {
                    "x": round(x(first), 1),
                    "y": lanes[(node, g)],
                    "w": round(max(x(last) - x(first), 1.0), 1),
                    "h": LANE_H * rows.get((node, g), 1),
                    "maint": bool(maint),
                    "title": f"reservation {name}{' (MAINT)' if maint else ''}, {node}",
                }
            )
    pending = _pending(reply["pending"], x, lanes_bottom + 8, min(now, end))
    ticks = [
        {"x": round(x(start + span * i / 6), 1), "text": _clock(start + span * i / 6, span)}
        for i in range(7)
    ]
    return {
        "start": start,
        "end": end,
        "now": now,
        "groups": groups,
        "lanes": labels,
        "bars": bars,
        "idle": idle,
        "windows": windows,
        "pending": pending,
        "ticks": ticks,
        "now_x": round(x(now), 1) if start <= now <= end else None,
        "width": LABEL_W + PLOT_W + 10,
        "height": pending["y"] + PENDING_H + AXIS_H,
        "plot_left": LABEL_W,
        "plot_right": LABEL_W + PLOT_W,
        "lanes_bottom": lanes_bottom,
    }


def _state(run: Mapping[str, Any]) -> str:
    """A run's state as its bar's title says it: a requeued run with the requeue's why."""
    if run["state"] != "REQUEUED":
        return str(run["state"])
    why = run.get("reason") or ""
    return f"requeued ({why})" if why else "requeued"


def _pending(steps: Sequence[Sequence[float]], x: Any, top: float, last: float) -> dict[str, Any]:
    """The pending queue's length as a step polyline in a band PENDING_H high at `top`."""
    peak = max((int(count) for _, count in steps), default=0)
    scale = (PENDING_H - 4) / peak if peak else 0.0
    bottom = top + PENDING_H
    points: list[tuple[float, float]] = []
    for when, count in steps:
        level = bottom - int(count) * scale
        if points:
            points.append((x(float(when)), points[-1][1]))
        points.append((x(float(when)), level))
    if points:
        points.append((x(last), points[-1][1]))
    return {
        "y": top,
        "h": PENDING_H,
        "peak": peak,
        "now": int(steps[-1][1]) if steps else 0,
        "points": " ".join(f"{px:.1f},{py:.1f}" for px, py in points),
    }


def _row_of(spans: Sequence[tuple[dict[str, Any], float, float]]) -> list[dict[Any, int]]:
    """For each run, its sub-lane on each of its GPUs: the first free when it begins.

    Runs that share a card at the same time (shares of its memory) get a row each, so
    no bar hides another; runs one after the other keep one row, however close."""
    ends: dict[tuple[str, int], list[float]] = {}  # each sub-lane's last run's end
    out: list[dict[Any, int]] = [{} for _ in spans]
    times = [
        (float(run["start"]), float("inf") if run["end"] is None else float(run["end"]))
        for run, _, _ in spans
    ]
    order = sorted(range(len(spans)), key=lambda i: times[i][0])
    for i in order:
        run = spans[i][0]
        left, right = times[i]
        for node, ids in run["placements"]:
            for gpu in ids:
                taken = ends.setdefault((node, gpu), [])
                row = next((r for r, end in enumerate(taken) if end <= left), len(taken))
                if row == len(taken):
                    taken.append(right)
                else:
                    taken[row] = right
                out[i][(node, gpu)] = row
    return out


def _rows(placed: Sequence[dict[Any, int]]) -> dict[tuple[str, int], int]:
    """How many sub-lanes each GPU needs (1 where no runs overlap on it)."""
    rows: dict[tuple[str, int], int] = {}
    for runs_rows in placed:
        for key, row in runs_rows.items():
            rows[key] = max(rows.get(key, 1), row + 1)
    return rows
