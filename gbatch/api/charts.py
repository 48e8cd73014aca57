"""Small GPU charts for the web page: utilisation and memory over time as SVG polylines.

Pure; the templates write them as inline SVG (no script, no style attribute),
as the timeline's are written (gbatch/api/timeline.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def gpu_chart(
    points: Sequence[Sequence[Any]],
    start: float,
    end: float,
    width: float,
    height: float,
    memory_total_mib: int | None = None,
) -> dict[str, Any]:
    """One GPU's chart: its wire points over [start, end) as polylines in a box.

    The points are gpu_history's ([time, util, util max, MiB, MiB max]); the box is
    `width` x `height`: `util` (0-100 % full height) and `memory`
    polylines (full height: `memory_total_mib`, or the peak when the total is unknown),
    with the means and peaks the chart's caption says."""
    span = max(end - start, 1e-9)
    told = [p for p in points if p[1] is not None]
    peak_mem = max((int(p[4]) for p in points), default=0)
    scale_mem = memory_total_mib or peak_mem or 1

    def x(t: float) -> float:
        return width * (min(max(t, start), end) - start) / span

    def line(values: list[tuple[float, float | None]], full: float) -> str:
        """Steps: each value held until the next point (the last until the range's end).

        A point without a value (utilisation not told) draws nothing."""
        out: list[str] = []
        for i, (t, v) in enumerate(values):
            if v is None:
                continue
            y = f"{height - 1 - (height - 2) * min(v / full, 1.0):.1f}"
            until = values[i + 1][0] if i + 1 < len(values) else end
            out += [f"{x(t):.1f},{y}", f"{max(x(until), x(t) + 1):.1f},{y}"]
        return " ".join(out)

    return {
        "width": width,
        "height": height,
        "samples": len(points),
        "util": line([(float(p[0]), None if p[1] is None else float(p[1])) for p in points], 100.0),
        "memory": line([(float(p[0]), float(p[3])) for p in points], float(scale_mem)),
        "util_mean": sum(float(p[1]) for p in told) / len(told) if told else None,
        "util_peak": max((int(p[2]) for p in told if p[2] is not None), default=None),
        "mem_peak_mib": peak_mem,
        "mem_scale_mib": scale_mem,
    }
