"""The usage chart's picture (/ui/usage): GPU-hours per day or week as stacked SVG bars. Pure.

Server-drawn as the timeline is (gbatch/api/timeline.py): the template writes these
shapes as inline SVG (presentation attributes, no style attribute, no script), so the
page's strict Content-Security-Policy holds, and Jinja2 escapes every name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from gbatch.api.timeline import OTHER_FILL, OTHER_USER, user_fill

# The period picker: its values, as (step, how many steps). 30 days by default.
PERIODS: Mapping[str, tuple[str, int]] = {
    "14d": ("day", 14),
    "30d": ("day", 30),
    "12w": ("week", 12),
    "26w": ("week", 26),
}
DEFAULT_PERIOD = "30d"
AXIS_W = 60  # the GPU-hours axis, left of the plot
PLOT_W = 900
PLOT_H = 220
TOP = 10
LABELS_H = 30  # the steps' dates, under the plot
NO_PARTITION = "(none)"


def edges(period: str, now: float) -> list[float]:
    """The steps' bounds of `period` up to `now`, at local midnights (weeks: Mondays).

    The last step is the one under way: from today's (or this week's) start to now."""
    step, count = PERIODS[period]
    today = datetime.fromtimestamp(now).date()
    if step == "week":
        today -= timedelta(days=today.weekday())
    days = 7 if step == "week" else 1
    starts = [today - timedelta(days=days * k) for k in range(count - 1, -1, -1)]
    out = [float(int(_midnight(d))) for d in starts]
    return [*out, max(float(int(now)), out[-1] + 1.0)]


def _midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day).timestamp()


def _nice(peak: float) -> float:
    """The axis's top: the smallest 1, 2, 2.5 or 5 x 10^k at or above `peak` (1 when 0)."""
    if peak <= 0:
        return 1.0
    scale = 10.0 ** int(f"{peak:e}".split("e")[1])
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * scale >= peak:
            return step * scale
    return 10 * scale


def chart(
    rows: Sequence[Sequence[Any]], edges_: Sequence[float], kind: str, step: str
) -> dict[str, Any]:
    """Stacked bars of `rows` over the steps between `edges_`, with their legend.

    `rows`: [[name, [GPU-seconds per step]], ...], largest first (the bottom of each
    stack); `kind` "user" or "partition"."""
    steps = len(edges_) - 1
    hours = [[float(v) / 3600 for v in values] for _, values in rows]
    totals = [sum(h[i] for h in hours) for i in range(steps)]
    top = _nice(max(totals, default=0.0))
    slot = PLOT_W / max(steps, 1)
    width = max(slot * 0.8, 1.0)

    def y(value: float) -> float:
        return TOP + PLOT_H * (1 - value / top)

    def label(name: str) -> str:
        if kind == "user":
            return name or OTHER_USER
        return name or NO_PARTITION

    def fill(name: str) -> str:
        return OTHER_FILL if kind == "user" and not name else user_fill(name)

    bars = []
    for i in range(steps):
        base = 0.0
        day = _day(edges_[i], step)
        for (name, _), h in zip(rows, hours, strict=True):
            if h[i] <= 0:
                continue
            bars.append(
                {
                    "x": round(AXIS_W + slot * i + (slot - width) / 2, 1),
                    "y": round(y(base + h[i]), 2),
                    "w": round(width, 1),
                    "h": round(PLOT_H * h[i] / top, 2),
                    "fill": fill(name),
                    "name": name,
                    "step": i,
                    "gpu_seconds": f"{h[i] * 3600:.3f}",
                    "title": f"{label(name)}: {h[i]:.2f} GPU-hours, {day}",
                }
            )
            base += h[i]
    ticks = [{"y": round(y(top * k / 4), 1), "text": _hours(top * k / 4)} for k in range(5)]
    every = max(1, steps // 10)  # a date under every bar up to 10, then every few
    dates = [
        {"x": round(AXIS_W + slot * (i + 0.5), 1), "text": _day(edges_[i], step)}
        for i in range(0, steps, every)
    ]
    legend = [
        {
            "name": name,
            "label": label(name),
            "fill": fill(name),
            "gpu_seconds": f"{sum(float(v) for v in values):.3f}",
            "gpu_hours": _total(sum(float(v) for v in values)),
        }
        for name, values in rows
    ]
    return {
        "width": AXIS_W + PLOT_W + 10,
        "height": TOP + PLOT_H + LABELS_H,
        "plot_left": AXIS_W,
        "plot_right": AXIS_W + PLOT_W,
        "plot_bottom": TOP + PLOT_H,
        "bars": bars,
        "ticks": ticks,
        "dates": dates,
        "legend": legend,
        "total_hours": _total(sum(totals) * 3600),
    }


def _day(stamp: float, step: str) -> str:
    text = time.strftime("%m-%d", time.localtime(stamp))
    return f"week of {text}" if step == "week" else text


def _hours(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.3g}"


def _total(seconds: float) -> str:
    """GPU-hours to the hundredth; a few seconds' worth to the ten-thousandth (not 0.00)."""
    hours = seconds / 3600
    return f"{hours:.2f}" if hours >= 0.01 or hours == 0 else f"{hours:.4f}"


def layout(reply: Mapping[str, Any], step: str) -> dict[str, Any]:
    """Both charts of a usage_series reply (by user, by partition) and the factors beside."""
    edges_ = [float(e) for e in reply["edges"]]
    users = chart(reply["users"], edges_, "user", step)
    factors = dict(reply["shares"])
    for row in users["legend"]:
        row["factor"] = factors.pop(row["name"], None)
    # Users with a factor and no usage in the period (waiting, or used none lately).
    users["idle"] = [{"name": name, "factor": factor} for name, factor in sorted(factors.items())]
    return {
        "start": edges_[0],
        "end": edges_[-1],
        "users": users,
        "partitions": chart(reply["partitions"], edges_, "partition", step),
        "hidden": bool(reply["hidden"]),
    }
