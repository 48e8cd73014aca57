"""bench/slurm_side_by_side.py's pure parts: statistics, ratios, the table, arguments;
and that its --help runs without Slurm or root."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import slurm_side_by_side as side  # noqa: E402


def test_summarize_duration_takes_the_90th_percentile_as_p90() -> None:
    stats = side.summarize([float(i) for i in range(1, 11)])
    assert stats == side.Stats(median=5.5, p90=9.1, low=1.0, high=10.0, count=10)


def test_summarize_rate_takes_the_10th_percentile_as_p90() -> None:
    stats = side.summarize([float(i) for i in range(1, 11)], higher_is_better=True)
    assert stats.p90 == pytest.approx(1.9)
    assert stats.median == 5.5


def test_summarize_refuses_no_samples() -> None:
    with pytest.raises(ValueError):
        side.summarize([])


def _row(gbatch: float, slurm: float, unit: str = "ms", higher: bool = False) -> side.Row:
    return side.Row(
        "x", unit, side.summarize([gbatch]), side.summarize([slurm]), higher_is_better=higher
    )


def test_ratio_is_gbatch_over_slurm() -> None:
    assert _row(50.0, 5.0).ratio == 10.0


def test_winner_of_a_duration_is_the_smaller() -> None:
    assert _row(50.0, 5.0).winner == "Slurm 10.0x"
    assert _row(5.0, 50.0).winner == "gbatch 10.0x"


def test_winner_of_a_rate_is_the_larger() -> None:
    assert _row(48.0, 3.0, "jobs/s", higher=True).winner == "gbatch 16.0x"
    assert _row(3.0, 48.0, "jobs/s", higher=True).winner == "Slurm 16.0x"


def test_within_five_percent_is_even() -> None:
    assert _row(104.0, 100.0).winner == "even"
    assert _row(100.0, 104.0).winner == "even"
    assert _row(110.0, 100.0).winner == "Slurm 1.1x"


def test_stats_format_with_p90_and_range_or_a_single_value() -> None:
    many = side.summarize([10.0, 12.0, 14.0])
    assert side.format_stats(many, "ms") == "12.0 ms (p90 13.6; 10.0-14.0)"
    assert side.format_stats(side.summarize([2802.4]), "ms") == "2,802 ms"
    assert side.format_stats(side.summarize([31.6]), "MB") == "32 MB"


def test_table_has_a_header_and_one_line_per_row() -> None:
    rows = [_row(50.0, 5.0), _row(48.0, 3.0, "jobs/s", higher=True)]
    lines = side.format_table(rows).splitlines()
    assert lines[0].startswith("| what | gbatch")
    assert lines[1].startswith("| --- |")
    assert lines[2] == "| x | 50.0 ms | 5.0 ms | 10.00 | Slurm 10.0x | 1 |"
    assert lines[3] == "| x | 48.0 jobs/s | 3.0 jobs/s | 16.00 | gbatch 16.0x | 1 |"
    assert len(lines) == 4


def test_row_line_names_both_sides_ratio_and_samples() -> None:
    line = side.format_row_line(_row(50.0, 5.0))
    assert line == (
        "x: gbatch 50.0 ms, Slurm 5.0 ms, gbatch/Slurm 10.00 (Slurm 10.0x; 1 samples each)"
    )


def test_gaps_are_each_end_to_the_next_start_in_ms() -> None:
    starts = [0.0, 1.25, 2.5]
    ends = [1.0, 2.25, 3.5]
    assert side.gaps_ms(starts, ends) == pytest.approx([250.0, 250.0])


@pytest.mark.parametrize(
    ("text", "sizes"),
    [("1000", (1000,)), ("1000,10000", (1000, 10000)), ("1k, 10k,100K", (1000, 10000, 100000))],
)
def test_sizes_parse_counts_and_k(text: str, sizes: tuple[int, ...]) -> None:
    assert side.parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "0", "ten", "1000,,2000", "-5", "1.5k"])
def test_sizes_refuse_what_is_not_a_count(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        side.parse_sizes(text)


def test_defaults_and_quick_and_explicit_settings() -> None:
    full = side.parse_args([])
    assert full.sizes == (1000, 10_000)
    assert full.runs == 15
    assert full.slurm_scheduler is None
    assert (full.drain_jobs, full.quick) == (200, False)
    quick = side.parse_args(["--quick"])
    assert quick.sizes == (20,)
    assert (quick.runs, quick.drain_rounds, quick.handoff_jobs) == (2, 1, 3)
    assert (quick.drain_jobs, quick.quick) == (16, True)
    tuned = ["--slurm-scheduler-parameters", "batch_sched_delay=0"]
    mine = side.parse_args(
        ["--quick", "--sizes", "100k", "--runs", "9", "--python", "/x/python3", *tuned]
    )
    assert mine.sizes == (100_000,)
    assert mine.runs == 9
    assert mine.python == Path("/x/python3")
    assert mine.slurm_scheduler == "batch_sched_delay=0"


def test_a_row_without_slurm_says_absent_in_its_line_and_the_table() -> None:
    row = side.Row("`squeue`, 20 pending", "ms", side.summarize([12.0, 14.0]), None)
    assert row.ratio is None
    assert row.winner == "Slurm absent"
    assert side.format_row_line(row) == (
        "`squeue`, 20 pending: gbatch 13.0 ms (p90 13.8; 12.0-14.0), Slurm absent, "
        "gbatch/Slurm - (Slurm absent; 2 samples each)"
    )
    assert side.format_table([row]).splitlines()[-1] == (
        "| `squeue`, 20 pending | 13.0 ms (p90 13.8; 12.0-14.0) | absent | - | Slurm absent | 2 |"
    )


def test_slurm_is_missing_for_a_user_who_is_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(side.os, "getuid", lambda: 1000)
    assert side.slurm_missing() == "not root (the side Slurm's daemons need root)"
    monkeypatch.setattr(side.os, "getuid", lambda: 0)
    monkeypatch.setattr(side.shutil, "which", lambda name: None if name == "slurmd" else name)
    missing = side.slurm_missing()
    assert missing is not None and "slurmd missing" in missing


def test_big_queues_get_a_third_of_the_runs_but_at_least_three() -> None:
    settings = side.parse_args(["--runs", "15"])
    assert settings.runs_at(10_000) == 15
    assert settings.runs_at(100_000) == 5
    assert side.parse_args(["--runs", "4"]).runs_at(100_000) == 3


def test_runs_below_one_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        side.parse_args(["--runs", "0"])
    assert exited.value.code == 2


def test_slurm_conf_has_eight_gpus_and_its_own_ports_and_paths(tmp_path: Path) -> None:
    conf = side.slurm_conf(tmp_path, "host", 7001, 7002)
    assert "SlurmctldPort=7001\n" in conf
    assert "SlurmdPort=7002\n" in conf
    assert f"StateSaveLocation={tmp_path}/state\n" in conf
    assert "Gres=gpu:8" in conf
    assert "CPUs=8" in conf
    assert "SchedulerParameters" not in conf
    tuned = side.slurm_conf(tmp_path, "host", 7001, 7002, "batch_sched_delay=0")
    assert tuned.endswith("SchedulerParameters=batch_sched_delay=0\n")


def test_help_runs_without_slurm_or_root() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "slurm_side_by_side.py"), "--help"],
        env={"PATH": "/nonexistent", "PYTHONPATH": str(BENCH.parent)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "--sizes" in done.stdout
    assert "--quick" in done.stdout


def test_the_benches_daemon_runs_this_checkouts_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """start_daemon/stop_daemon put this checkout on the daemon's PYTHONPATH, so that a
    worktree's bench run with another checkout's venv (editable install) does not time
    that other checkout's daemon."""
    import common

    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], **kwargs: object) -> None:
        env = kwargs["env"]
        assert isinstance(env, dict)
        calls.append((argv, env))

    monkeypatch.setenv("PYTHONPATH", "/some/other/checkout")
    monkeypatch.setattr(common.subprocess, "run", run)
    common.start_daemon(tmp_path, 8)
    common.stop_daemon(tmp_path)
    assert [argv[-1] for argv, _ in calls] == ["start", "stop"]
    for _, env in calls:
        assert env["PYTHONPATH"] == str(BENCH.parent)
        assert env["GBATCH_HOME"] == str(tmp_path)
    assert calls[0][1]["GBATCH_SIMULATE_GPUS"] == "8"
