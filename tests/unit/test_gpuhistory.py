"""The GPUs' sample history: 1-s samples for the last hour, 1-min figures for 30 days, in
ring files of a fixed size that a restarted daemon reads again."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

import pytest

from gbatch.head.gpuhistory import FILE_SIZE, MINUTES, GpuHistory, Point, bucketed

T0 = 1_767_225_600  # a minute's start


class Gpu(NamedTuple):
    index: int
    memory_used_mib: int
    utilization_pct: int | None


def test_seconds_for_the_last_hour_minutes_beyond_and_the_file_never_grows(
    tmp_path: Path,
) -> None:
    history = GpuHistory(tmp_path / "h")
    for s in range(2 * 3600):  # two hours of a GPU busy on even seconds
        busy = s % 2 == 0
        history.record("gpu01", [Gpu(0, 1000 + s % 60, 100 if busy else 0)], T0 + s)
    now = T0 + 2 * 3600
    fine = history.series("gpu01", 0, now - 10, now, now)
    assert [p.time for p in fine] == [float(now - 10 + i) for i in range(10)]
    assert [p.util for p in fine[:2]] == [100, 0]
    coarse = history.series("gpu01", 0, T0, now, now)
    assert len(coarse) == 120  # the minute under way is the 120th, summed in memory
    assert coarse[0] == Point(float(T0), 50.0, 100, 1030.0, 1059)  # MiB kept whole
    (ring,) = (tmp_path / "h").iterdir()
    assert ring.name == "gpu01.0.ring" and ring.stat().st_size == FILE_SIZE
    assert ring.stat().st_mode & 0o777 == 0o600
    assert history.series("gpu01", 1, T0, now, now) == []  # never sampled
    history.close()
    again = GpuHistory(tmp_path / "h")  # a restarted daemon
    assert len(again.series("gpu01", 0, T0, now, now)) == 120
    assert again.series("gpu01", 0, now - 10, now, now) == fine
    again.close()


def test_a_slot_a_lap_old_is_not_read_as_now(tmp_path: Path) -> None:
    history = GpuHistory(tmp_path)
    history.record("n", [Gpu(0, 5, 7)], T0)
    history.record("n", [Gpu(0, 6, None)], T0 + 60)  # ends the first minute
    later = T0 + MINUTES * 60 + 3600  # the same slots, one lap (30 days) on
    assert history.series("n", 0, later - 60, later, later) == []
    old = T0 + 3600  # within 30 days: the first minute is there
    (first, second) = history.series("n", 0, T0, old, old + 1)
    assert first == Point(float(T0), 7.0, 7, 5.0, 5)
    assert second.util is None and second.util_max is None  # not told
    history.close()


def test_bucketed_keeps_each_steps_mean_and_peak() -> None:
    points = [Point(float(t), float(t % 10), t % 10, 100.0, 100 + t) for t in range(100)]
    steps = bucketed(points, 0.0, 100.0, 10)
    assert len(steps) == 10
    assert steps[3] == Point(30.0, 4.5, 9, 100.0, 139)
    assert bucketed(points[:5], 0.0, 100.0, 10) == points[:5]


def test_a_chart_holds_each_sample_until_the_next_and_scales_memory_to_the_card() -> None:
    from gbatch.api.charts import gpu_chart

    points = [[0.0, 50.0, 60, 40960.0, 40960], [50.0, None, None, 81920.0, 81920]]
    chart = gpu_chart(points, 0.0, 100.0, 100, 12, memory_total_mib=81920)
    assert chart["util"] == "0.0,6.0 50.0,6.0"  # 50 %: half of the 10 px inside
    assert chart["memory"] == "0.0,6.0 50.0,6.0 50.0,1.0 100.0,1.0"
    assert (chart["util_mean"], chart["util_peak"], chart["mem_peak_mib"]) == (50.0, 60, 81920)
    empty = gpu_chart([], 0.0, 100.0, 100, 12)
    assert empty["samples"] == 0 and empty["util"] == "" and empty["util_mean"] is None


def test_a_ring_cut_under_the_daemon_reads_as_no_samples(tmp_path: Path) -> None:
    """A ring file truncated by someone else: its slots read as empty, never past its
    end (a mapped read there was SIGBUS, the daemon's end)."""
    history = GpuHistory(tmp_path)
    history.record("n", [Gpu(0, 5, 7)], T0)
    (ring,) = tmp_path.iterdir()
    ring.write_bytes(b"")
    assert history.series("n", 0, T0 - 10, T0 + 1, T0 + 1) == []
    history.record("n", [Gpu(0, 6, 8)], T0 + 1)  # written again at its slot
    assert [p.util for p in history.series("n", 0, T0, T0 + 2, T0 + 2)] == [8]
    history.close()


def test_a_write_that_fails_drops_the_sample_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ring that cannot be written (a full disk on a head; a read-only descriptor
    here, which fails each write as ENOSPC would): the samples are dropped, said once,
    and once again when writes work."""
    history = GpuHistory(tmp_path)
    history.record("n", [Gpu(0, 5, 7)], T0)
    (ring,) = history._rings.values()
    writable, ring.fd = ring.fd, os.open(tmp_path / "n.0.ring", os.O_RDONLY)
    with caplog.at_level(logging.INFO, logger="gbatchd"):
        for s in range(1, 4):
            history.record("n", [Gpu(0, 5, 9)], T0 + s)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("GPU history: cannot write"), said
    assert [p.util for p in history.series("n", 0, T0, T0 + 4, T0 + 4)] == [7]
    os.close(ring.fd)
    ring.fd = writable
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gbatchd"):
        history.record("n", [Gpu(0, 5, 9)], T0 + 4)
    assert [r.getMessage() for r in caplog.records] == ["GPU history: writes again"]
    assert [p.util for p in history.series("n", 0, T0, T0 + 5, T0 + 5)] == [7, 9]
    history.close()
