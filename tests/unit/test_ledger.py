"""The ledger checker (tests/ledger.py): lost, duplicated, overlapping, incomplete runs
and garbage lines, judged from ledger lines alone; and the job command that writes
them, run by a real /bin/sh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ledger import check, check_lines, first_start_after, ledger_command, read_runs


def run(job: int, start: float, end: float | None, attempt: int = 1, token: str = "") -> list[str]:
    tail = f" {token}" if token else ""
    lines = [f"{job} {attempt} h start {start}{tail}"]
    if end is not None:
        lines.append(f"{job} {attempt} h end {end}{tail}")
    return lines


def test_every_acknowledged_job_completed_once_is_ok() -> None:
    result = check_lines([*run(1, 0, 1), *run(2, 1, 2), *run(3, 0.5, 3)], [1, 2, 3])
    assert result.ok
    assert (result.finished, result.runs, result.lost, result.duplicates) == (3, 3, (), ())
    assert result.overlap_seconds == 0
    assert result.incomplete == ()


def test_an_acknowledged_job_without_a_completed_run_is_lost() -> None:
    result = check_lines([*run(1, 0, 1), *run(2, 0, None)], [1, 2, 3])
    assert result.lost == (2, 3)
    assert result.finished == 1
    assert not result.ok


def test_a_failed_run_does_not_count_as_finished() -> None:
    lines = ["1 1 h start 0 7", "1 1 h fail 1 7"]
    assert check_lines(lines, [1]).lost == (1,)
    retried = [*lines, "1 2 h start 2 8", "1 2 h end 3 8"]
    assert check_lines(retried, [1]).ok


def test_two_completed_runs_one_after_the_other_are_a_duplicate() -> None:
    result = check_lines([*run(1, 0, 1), *run(1, 2, 3, attempt=2)], [1])
    assert result.duplicates == (1,)
    assert result.overlap_seconds == 0
    assert not result.ok


def test_runs_at_once_are_a_duplicate_and_their_overlap_is_summed() -> None:
    lines = [
        *run(1, 0, 2, token="a"),
        *run(1, 1.5, 4, token="b"),  # overlaps a by 0.5 s
        "2 1 h start 0 c",
        "2 1 h start 0.25 d",  # same attempt, another run: overlaps c by 0.75 s
        "2 1 h fail 1 d",
        "2 1 h end 3 c",
    ]
    result = check_lines(lines, [1, 2])
    assert result.duplicates == (1, 2)
    assert result.overlap_seconds == 0.5 + 0.75


def test_a_run_with_no_end_is_incomplete_and_a_point_in_time() -> None:
    # Job 1: a run that never ended, then one that did: not a duplicate.
    # Job 2: a run that never ended started inside another run: two at once.
    lines = [*run(1, 0, None), *run(1, 5, 6, attempt=2), *run(2, 0, 4), *run(2, 2, None, 2)]
    result = check_lines(lines, [1, 2])
    assert result.incomplete == ((1, 1), (2, 2))
    assert result.lost == ()
    assert result.duplicates == (2,)
    assert result.overlap_seconds == 0


def test_an_end_written_later_closes_the_run() -> None:
    lines = ["1 1 h start 0 9", "2 1 h start 0.5 4", "1 1 h end 1 9", "2 1 h end 2 4"]
    result = check_lines(lines, [1, 2])
    assert result.incomplete == ()
    assert result.ok


def test_garbage_lines_are_counted_and_skipped() -> None:
    lines = [
        *run(1, 0, 1),
        "",
        "1 1 h sta",  # a torn line
        "x 1 h start 0",
        "1 1 h start notatime",
        "1 1 h begin 0",
        "hello world",
    ]
    result = check_lines(lines, [1])
    assert result.garbage == 5
    assert result.ok


def test_jobs_nobody_acknowledged_are_reported_not_judged() -> None:
    result = check_lines([*run(1, 0, 1), *run(9, 0, 1)], [1])
    assert result.unacknowledged == (9,)
    assert result.ok


def test_a_missing_ledger_loses_every_job(tmp_path: Path) -> None:
    assert check(tmp_path / "none", [4, 5]).lost == (4, 5)


def test_the_job_command_writes_lines_the_checker_reads(tmp_path: Path) -> None:
    ledger = tmp_path / "led ger"  # a space: the path is quoted
    env = {**os.environ, "GBATCH_JOB_ID": "7", "GBATCH_ATTEMPT": "1"}
    failing = ledger_command(ledger, 0, fail_first=True)
    assert subprocess.run(["/bin/sh", "-c", failing], env=env).returncode == 1
    assert check(ledger, [7]).lost == (7,)
    retry = {**env, "GBATCH_ATTEMPT": "2"}
    assert subprocess.run(["/bin/sh", "-c", failing], env=retry).returncode == 0
    result = check(ledger, [7])
    assert (result.ok, result.runs, result.garbage, result.incomplete) == (True, 2, 0, ())


def test_the_first_start_after_a_kill_is_that_of_a_later_dispatch() -> None:
    # Job 1 was dispatched before the kill at t=10 and wrote its start after it.
    runs, _ = read_runs([*run(1, 10.05, 11), *run(2, 12.5, 13), *run(3, 12.2, 14)])
    dispatches = [(9.99, 1), (12.0, 2), (12.1, 3), (12.3, 4)]
    assert first_start_after(runs, dispatches, after=10) == 12.2
    assert first_start_after(runs, dispatches, after=20) is None
