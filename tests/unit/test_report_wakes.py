"""Which agent reports wake the daemon's loop at once (nodes/base.Reports).

Every report of every host used to wake it: at 100 hosts reporting each second, a pass
over the whole queue a hundred times a second (bench_fleet.py --scale). A report that
says nothing the loop acts on waits for the loop's tick instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gbatch.nodes.base import Reports

SAMPLE = json.loads(
    (Path(__file__).resolve().parents[2] / "agent" / "sample_report.json").read_text()
)


def line(**changes: Any) -> bytes:
    report = json.loads(json.dumps(SAMPLE))
    gpu_changes = changes.pop("gpu0", {})
    report.update(changes)
    report["gpus"][0].update(gpu_changes)
    return json.dumps(report).encode() + b"\n"


def wakes(*lines: bytes, want_before: int | None = None) -> list[int]:
    """The report numbers (1, 2, ...) after which the loop was woken."""
    woken: list[int] = []
    reports = Reports(lambda: woken.append(reports.seq))
    for number, text in enumerate(lines, start=1):
        if number == want_before:
            reports.want()
        reports.read([text])
    return woken


def test_a_report_that_repeats_the_last_but_for_time_and_utilisation_waits_for_the_tick() -> None:
    assert wakes(
        line(time=1.0),
        line(time=2.0),
        line(time=3.0, gpu0={"utilization_pct": 97}),
        line(time=4.0, facts={**SAMPLE["facts"], "disk_free_bytes": 12345}),
    ) == [1]


def test_a_report_with_news_for_the_loop_wakes_it() -> None:
    container = {**SAMPLE["containers"][0], "state": "exited", "exit_code": 0}
    assert wakes(
        line(time=1.0),
        line(time=2.0, gpu0={"memory_used_mib": 60_000}),  # memory taken or freed
        line(time=3.0, gpu0={"memory_used_mib": 60_000}),
        line(time=4.0, gpu0={"memory_used_mib": 60_000}, containers=[container]),
    ) == [1, 2, 4]


def test_a_report_asked_for_wakes_the_loop_even_when_it_repeats_the_last() -> None:
    # A released GPU is handed out only once a later report is seen: the loop waits on it.
    assert wakes(line(time=1.0), line(time=2.0), line(time=3.0), want_before=3) == [1, 3]


def test_the_first_report_after_a_lost_stream_wakes_the_loop() -> None:
    woken: list[str] = []
    reports = Reports(lambda: woken.append("woken"))
    reports.read([line(time=1.0)])
    reports.lost("the agent stopped")
    reports.read([line(time=2.0)])
    assert woken == ["woken", "woken", "woken"]
