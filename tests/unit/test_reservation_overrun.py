"""Jobs of a reservation that outlive its window (issue 33, item 4): as Slurm's
ResvOverRun (`resv_over_run:`): ended TIMEOUT at the window's end (0, Slurm's default),
that many minutes after it, or kept to their own --time (UNLIMITED)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gbatch.core.model import JobSpec, JobState
from gbatch.core.reservations import Reservation
from gbatch.head.daemon import Daemon
from gbatch.head.store import Store
from gbatch.site.config import Config, ConfigError, Paths, _validate

WALL = 1_800_000_000.0


class Clocks:
    def __init__(self) -> None:
        self.wall = WALL
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _running_in_reservation(
    tmp_path: Path, clocks: Clocks, config: Config, flags: tuple[str, ...] = ()
) -> tuple[Daemon, int]:
    """A daemon whose one job runs in reservation `demo` (a window of ten minutes from
    now), with a time limit of an hour."""
    paths = Paths(tmp_path)
    store = Store(paths.store)
    daemon = Daemon(paths, config, store, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono)
    demo = Reservation("demo", WALL, WALL + 600, users=("root",), nodes=("local",), flags=flags)
    store.put_reservation(demo, "created by root", WALL)
    spec = JobSpec(name="demo", command=("sleep", "1d"), time_limit=3600, reservation="demo")
    (job_id,) = store.submit([spec], 0, "root", clocks.wall)
    job = store.set_state(
        job_id, JobState.CONFIGURING, "allocated", clocks.wall, node="local", gpus=(), attempt=1
    )
    daemon.runs.confirm_running([job], "", daemon.clock())
    return daemon, job_id


def test_a_job_of_a_reservation_ends_timeout_at_its_windows_end(tmp_path: Path) -> None:
    clocks = Clocks()
    daemon, job_id = _running_in_reservation(tmp_path, clocks, Config())
    clocks.advance(599)
    daemon.enforce_limits(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    clocks.advance(1)
    daemon.enforce_limits(clocks.wall)
    job = daemon.store.require(job_id)
    assert job.state is JobState.COMPLETING and job.stop_state is JobState.TIMEOUT
    assert daemon.store.events(job_id)[-1].reason == "reservation demo ended"
    daemon.committer.close()


def test_resv_over_run_lets_a_job_run_that_many_minutes_past_the_end(tmp_path: Path) -> None:
    clocks = Clocks()
    daemon, job_id = _running_in_reservation(tmp_path, clocks, Config(resv_over_run=300.0))
    clocks.advance(600)
    daemon.enforce_limits(clocks.wall)
    daemon.scheduling.tell_windows(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    # The window is told over, but the record is kept while its jobs may run on.
    assert [r.name for r in daemon.store.reservations()] == ["demo"]
    clocks.advance(300)
    daemon.enforce_limits(clocks.wall)
    daemon.scheduling.tell_windows(clocks.wall)
    job = daemon.store.require(job_id)
    assert job.state is JobState.COMPLETING and job.stop_state is JobState.TIMEOUT
    assert daemon.store.reservations() == ()
    daemon.committer.close()


def test_resv_over_run_unlimited_keeps_a_job_to_its_own_time_limit(tmp_path: Path) -> None:
    clocks = Clocks()
    daemon, job_id = _running_in_reservation(tmp_path, clocks, Config(resv_over_run=None))
    clocks.advance(3599)
    daemon.enforce_limits(clocks.wall)
    daemon.scheduling.tell_windows(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    assert daemon.store.reservations() == ()  # deleted at its end, as ever
    clocks.advance(1)
    daemon.enforce_limits(clocks.wall)
    job = daemon.store.require(job_id)
    assert job.state is JobState.COMPLETING and job.stop_state is JobState.TIMEOUT
    daemon.committer.close()


def test_a_job_of_a_daily_window_ends_with_the_window_it_started_in(tmp_path: Path) -> None:
    day = 86400.0
    demo = Reservation("d", WALL, WALL + 600, users=("a",), nodes=("n",), flags=("DAILY",))
    assert demo.run_until(WALL + day + 10, 0.0) == WALL + day + 600
    assert demo.run_until(WALL + 10, 60.0) == WALL + 660
    assert demo.run_until(WALL + 700, 0.0) is None  # started between windows
    assert demo.run_until(WALL + 10, None) is None


@pytest.mark.parametrize(
    ("value", "seconds"), [(0, 0.0), (10, 600.0), ("UNLIMITED", None), ("unlimited", None)]
)
def test_resv_over_run_reads_slurms_minutes_or_unlimited(
    value: object, seconds: float | None
) -> None:
    assert _validate({"resv_over_run": value}, "c.yaml").resv_over_run == seconds


@pytest.mark.parametrize("value", ["soon", -1, 1.5, True, 70000])
def test_a_bad_resv_over_run_is_refused_naming_it(value: object) -> None:
    with pytest.raises(ConfigError, match=r"resv_over_run: .*UNLIMITED"):
        _validate({"resv_over_run": value}, "c.yaml")
