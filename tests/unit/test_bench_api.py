"""bench/bench_api.py's pure parts: statistics, the printed line, arguments, and the
made-up 100 x 8 GPU fleet its metrics figure renders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import bench_api  # noqa: E402


def test_summarize_takes_the_pessimistic_side_as_p90() -> None:
    samples = [float(i) for i in range(1, 11)]
    assert bench_api.summarize(samples) == bench_api.Stats(5.5, 9.1, 1.0, 10.0, 10)
    assert bench_api.summarize(samples, higher_is_better=True).p90 == pytest.approx(1.9)
    with pytest.raises(ValueError):
        bench_api.summarize([])


def test_the_line_says_the_goal_and_whether_the_median_met_it() -> None:
    fast = bench_api.summarize([10.0, 20.0, 30.0])
    assert bench_api.line("list", fast, "ms", 50.0, False) == (
        "list: median 20.0 ms, p90 28.0, min 10.0, max 30.0 (goal <= 50, met; 3 samples)"
    )
    slow = bench_api.summarize([900.0, 950.0, 1_200.0], higher_is_better=True)
    assert "goal >= 1,000, MISSED" in bench_api.line("submits", slow, "/s", 1_000.0, True)
    assert "no goal" in bench_api.line("x", fast, "ms", None, False)


def test_quick_is_a_smaller_run_of_the_same_figures() -> None:
    full, quick = bench_api.parse_args([]), bench_api.parse_args(["--quick"])
    assert full.queue == 10_000 and full.gpus == 800
    assert quick.queue < full.queue and quick.submits < full.submits and quick.gpus == 800


def test_the_made_up_fleet_renders_one_series_per_gpu() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from gbatch.api.metrics import render

    snapshot = {
        "jobs": [["PENDING", "alice", "gpu", 10_000]],
        "daemon": {
            "submitted": 0,
            "ended": {},
            "queue_wait": {"buckets": [["+Inf", 0]], "sum": 0},
            "run_time": {"buckets": [["+Inf", 0]], "sum": 0},
            "loop": {"buckets": [["+Inf", 0]], "sum": 0},
            "loop_last": 0.0,
        },
        "uptime": 1.0,
        "nodes": bench_api.synthetic_nodes(100, 8),
        "round_trips": {},
        "shares": [],
    }
    families = {f.name: f for f in text_string_to_metric_families(render(snapshot).decode())}
    assert len(families["DCGM_FI_DEV_GPU_UTIL"].samples) == 800
    held = sum(s.value for s in families["gbatch_gpu_allocated"].samples)
    assert held == 400


def test_checkouts_are_pythonpaths_resolved_part_by_part(tmp_path: Path) -> None:
    extra = tmp_path / "site"
    settings = bench_api.parse_args(["--checkout", ".", "--checkout", f".:{extra}"])
    here = str(Path(".").resolve())
    assert settings.checkouts == (here, f"{here}:{extra}")
    assert bench_api.parse_args([]).checkouts == (str(bench_api.REPO),)
    assert not bench_api.parse_args([]).submits_only
    assert bench_api.parse_args(["--submits-only"]).submits_only
