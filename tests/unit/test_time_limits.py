"""Time limits run on the monotonic clock: wall-clock jumps change nothing."""

from __future__ import annotations

from pathlib import Path

from gbatch.core.model import JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.store import Store
from gbatch.site.config import Config, Paths


class FakeClocks:
    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 1000.0

    def advance(self, wall: float, mono: float) -> None:
        self.wall += wall
        self.mono += mono


def _running_job_with_limit(tmp_path: Path, clocks: FakeClocks, limit: int) -> tuple[Daemon, int]:
    from gbatch.core.model import JobState

    paths = Paths(tmp_path)
    store = Store(paths.store)
    daemon = Daemon(
        paths, Config(), store, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono
    )
    spec = JobSpec(name="long", command=("sleep", "1d"), time_limit=limit)
    (job_id,) = store.submit([spec], 0, "root", clocks.wall)
    job = store.set_state(
        job_id, JobState.CONFIGURING, "allocated", clocks.wall, node="local", gpus=(), attempt=1
    )
    daemon._confirm_running([job], "")
    return daemon, job_id


def test_a_wall_clock_jump_neither_times_out_a_job_nor_extends_it(tmp_path: Path) -> None:
    from gbatch.core.model import JobState

    clocks = FakeClocks()
    daemon, job_id = _running_job_with_limit(tmp_path, clocks, limit=3600)
    clocks.advance(wall=7200, mono=300)  # an NTP step forward: two hours, in five minutes
    daemon.enforce_limits(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    clocks.advance(wall=-86400, mono=3300)  # the clock set back a day; an hour has passed
    daemon.enforce_limits(clocks.wall)
    job = daemon.store.require(job_id)
    assert job.state is JobState.COMPLETING and job.stop_state is JobState.TIMEOUT
    daemon.committer.close()


def test_an_adopted_run_is_timed_from_its_recorded_start(tmp_path: Path) -> None:
    from gbatch.core.model import JobState

    clocks = FakeClocks()
    daemon, job_id = _running_job_with_limit(tmp_path, clocks, limit=3600)
    daemon._started_monotonic.clear()  # as after a daemon restart
    clocks.advance(wall=3000, mono=3000)
    daemon.enforce_limits(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    clocks.advance(wall=600, mono=600)
    daemon.enforce_limits(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.COMPLETING
    daemon.committer.close()
