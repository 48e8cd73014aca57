"""A ledger outside gbatch, and a checker in the manner of Jepsen's set test.

Every run of a test job appends one line when it starts and one when it ends, to a
file gbatch knows nothing about:

    <job> <attempt> <host> start <t> <run>
    <job> <attempt> <host> end <t> <run>      (the run completed: exit 0 follows)
    <job> <attempt> <host> fail <t> <run>     (the run failed on purpose: exit 1 follows)

<t> is time.time() read inside the job; <run> tells runs apart (the job shell's pid),
so that two runs of the same attempt on the same host are two runs, not one. Lines
are short single `echo >>` writes (O_APPEND), so concurrent runs never tear them.

`check(ledger, acknowledged)` then says what gbatch did with the jobs it acknowledged:
lost (no completed run), duplicated (two completed runs, or two runs at once), how long
runs of one job overlapped, and which runs started but never ended (incomplete).

Stdlib only and pure apart from `check` reading the file: the unit tests, the
integration tests and bench/bench_soak.py all import it (pytest puts tests/ on sys.path:
pyproject's `pythonpath`; the bench inserts it).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

EVENTS = ("start", "end", "fail")


def ledger_command(ledger: Path | str, seconds: float, fail_first: bool = False) -> str:
    """A /bin/sh command for `sbatch --wrap`: log start, sleep `seconds`, log the end.

    With `fail_first`, attempt 1 logs `fail` and exits 1 instead (for --retries).
    Reads GBATCH_JOB_ID and GBATCH_ATTEMPT, which gbatch sets for every run.
    """
    path = shlex.quote(str(ledger))
    fields = '"$GBATCH_JOB_ID $GBATCH_ATTEMPT $(uname -n) {event} $(date +%s.%N) $$"'
    start = f"echo {fields.format(event='start')} >> {path}"
    end = f"echo {fields.format(event='end')} >> {path}"
    fail = f"echo {fields.format(event='fail')} >> {path}"
    command = f"{start}; sleep {seconds:g}; "
    if fail_first:
        command += f'if [ "$GBATCH_ATTEMPT" = 1 ]; then {fail}; exit 1; fi; '
    return command + end


@dataclass(frozen=True)
class Run:
    """One run of a job as the ledger saw it. `end` is None for an incomplete run."""

    job: int
    attempt: int
    host: str
    token: str
    start: float
    end: float | None = None
    completed: bool = False  # ended with `end` (success), not `fail`

    @property
    def interval(self) -> tuple[float, float]:
        """[start, end]; an incomplete run is the point [start, start]."""
        return (self.start, self.end if self.end is not None else self.start)


@dataclass(frozen=True)
class LedgerResult:
    acknowledged: int  # jobs the caller was told were accepted
    finished: int  # of those, jobs with a completed run
    lost: tuple[int, ...]  # acknowledged, without a completed run
    duplicates: tuple[int, ...]  # two completed runs, or two runs at once
    overlap_seconds: float  # summed over every pair of overlapping runs of one job
    incomplete: tuple[tuple[int, int], ...]  # (job, attempt) of runs with no end line
    unacknowledged: tuple[int, ...]  # jobs that ran but were never acknowledged
    runs: int
    garbage: int  # lines that are not ledger lines (skipped)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing run twice (incomplete runs are judged by the caller)."""
        return not self.lost and not self.duplicates and self.overlap_seconds == 0

    def summary(self) -> str:
        return (
            f"acknowledged {self.acknowledged}, finished {self.finished}, "
            f"lost {len(self.lost)} {list(self.lost)[:10]}, "
            f"duplicates {len(self.duplicates)} {list(self.duplicates)[:10]}, "
            f"overlap {self.overlap_seconds:.3f} s, incomplete {len(self.incomplete)} "
            f"{list(self.incomplete)[:10]}, unacknowledged {len(self.unacknowledged)}, "
            f"runs {self.runs}, garbage lines {self.garbage}"
        )


@dataclass(frozen=True)
class _Line:
    job: int
    attempt: int
    host: str
    event: str
    time: float
    token: str


def _parse(line: str) -> _Line | None:
    """A ledger line, or None for anything else (a torn write, a stray message)."""
    parts = line.split()
    if len(parts) not in (5, 6) or parts[3] not in EVENTS:
        return None
    try:
        job, attempt, when = int(parts[0]), int(parts[1]), float(parts[4])
    except ValueError:
        return None
    token = parts[5] if len(parts) == 6 else ""
    return _Line(job, attempt, parts[2], parts[3], when, token)


def read_runs(lines: Iterable[str]) -> tuple[list[Run], int]:
    """The runs the lines describe, in order of their first line, and the number of
    garbage lines. An end closes the latest open run with the same (job, attempt,
    host, token); an end with no start is a run of no length (its start line was lost)."""
    runs: list[Run] = []
    open_runs: dict[tuple[int, int, str, str], int] = {}  # key -> index in runs
    garbage = 0
    for text in lines:
        if not text.strip():
            continue
        line = _parse(text)
        if line is None:
            garbage += 1
            continue
        key = (line.job, line.attempt, line.host, line.token)
        if line.event == "start":
            # A second start under one key leaves the first incomplete.
            open_runs[key] = len(runs)
            runs.append(Run(line.job, line.attempt, line.host, line.token, line.time))
            continue
        completed = line.event == "end"
        index = open_runs.pop(key, None)
        if index is None:
            runs.append(
                Run(line.job, line.attempt, line.host, line.token, line.time, line.time, completed)
            )
        else:
            started = runs[index]
            runs[index] = Run(
                started.job,
                started.attempt,
                started.host,
                started.token,
                started.start,
                line.time,
                completed,
            )
    return runs, garbage


def _overlap(a: Run, b: Run) -> float | None:
    """Seconds two runs overlapped, or None when they did not run at once. A point
    (incomplete) run overlaps a run whose open interval contains it, for 0 s."""
    (a0, a1), (b0, b1) = a.interval, b.interval
    if a0 < b1 and b0 < a1:
        return min(a1, b1) - max(a0, b0)
    return None


def check_runs(runs: Iterable[Run], acknowledged: Iterable[int], garbage: int = 0) -> LedgerResult:
    """Judge runs against the acknowledged job ids (pure)."""
    by_job: dict[int, list[Run]] = {}
    for run in runs:
        by_job.setdefault(run.job, []).append(run)
    wanted = set(acknowledged)
    finished = {job for job, rs in by_job.items() if any(r.completed for r in rs)}
    duplicates: set[int] = set()
    overlap = 0.0
    for job, job_runs in by_job.items():
        if sum(r.completed for r in job_runs) > 1:
            duplicates.add(job)
        for a, b in combinations(job_runs, 2):
            seconds = _overlap(a, b)
            if seconds is not None:
                duplicates.add(job)
                overlap += seconds
    all_runs = [r for rs in by_job.values() for r in rs]
    return LedgerResult(
        acknowledged=len(wanted),
        finished=len(wanted & finished),
        lost=tuple(sorted(wanted - finished)),
        duplicates=tuple(sorted(duplicates)),
        overlap_seconds=overlap,
        incomplete=tuple(sorted((r.job, r.attempt) for r in all_runs if r.end is None)),
        unacknowledged=tuple(sorted(set(by_job) - wanted)),
        runs=len(all_runs),
        garbage=garbage,
    )


def first_start_after(
    runs: Iterable[Run], dispatches: Iterable[tuple[float, int]], after: float
) -> float | None:
    """When the first run that was dispatched after `after` began, as the job wrote it.

    `dispatches` are (time, job) of each dispatch (its CONFIGURING event in the store).
    A start line alone cannot say whose run it is: a run launched just before a
    daemon died writes its start line just after."""
    starts: dict[int, list[float]] = {}
    for run in runs:
        starts.setdefault(run.job, []).append(run.start)
    found = [
        start
        for when, job in dispatches
        if when > after
        for start in starts.get(job, ())
        if start >= when
    ]
    return min(found, default=None)


def check_lines(lines: Iterable[str], acknowledged: Iterable[int]) -> LedgerResult:
    runs, garbage = read_runs(lines)
    return check_runs(runs, acknowledged, garbage)


def check(ledger: Path | str, acknowledged: Iterable[int]) -> LedgerResult:
    """Judge the ledger file against the acknowledged job ids. A missing file is an
    empty ledger (no job ever ran)."""
    try:
        text = Path(ledger).read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    return check_lines(text.splitlines(), acknowledged)
