"""The daemon's rules for a node it cannot fully hear, on fake clocks and a fake node:
a suspect node's runs are left alone, a down node's are ended only once its lease has
surely run out, a node heard again gets the containers of ended runs removed, and a
start whose answer was lost is reconciled, never repeated beside itself."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gbatch.core.model import Gpu, Job, JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.liveness import FENCE_MARGIN_SECONDS
from gbatch.head.loop.dispatch import LAUNCH_SETTLE_SECONDS
from gbatch.head.store import Store
from gbatch.nodes.base import LaunchError, RunStatus
from gbatch.nodes.report import ContainerReport, NodeReport, RunOwner, container_owners
from gbatch.site.config import Config, Paths

DOWN_AFTER, LEASE = 60.0, 90.0


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 1000.0


class FakeNode:
    """A remote node whose reports the test controls; records signals and clean-ups."""

    runs_bare_processes = False
    fences_runs = True
    address = "root@fake:22"

    def __init__(self, name: str, clocks: Clocks) -> None:
        self.name = name
        self.clocks = clocks
        self.containers: tuple[ContainerReport, ...] = ()
        self.reporting = True
        self.heard_at: float | None = clocks.mono
        self.signals: list[tuple[int, int, signal.Signals]] = []
        self.cleaned: list[tuple[int, int]] = []
        self.launched: list[tuple[int, int]] = []
        self.launch_answer_lost = False
        self.launch_busy = False
        self.launch_refusal: str | None = None  # a LaunchError's message: nothing started
        self.run_state: str = "running"
        self.lease_problem = ""
        self.seq = 1  # reports received: a released GPU is reused after a newer one

    def hear(self) -> None:
        self.reporting, self.heard_at = True, self.clocks.mono

    @property
    def report_seq(self) -> int:
        return self.seq

    def last_heard(self) -> float | None:
        return self.heard_at

    def report(self) -> tuple[NodeReport | None, str]:
        if not self.reporting:
            return None, "connection lost"
        report = NodeReport(1, self.clocks.wall, self.name, "simulation", "", (), None)
        changes = {"containers": self.containers, "lease_problem": self.lease_problem}
        return NodeReport(**{**report.__dict__, **changes}), ""

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return ()

    def run_owners(self, report: NodeReport) -> dict[tuple[int, int], RunOwner]:
        return container_owners(report, self.name)

    def status(self, job: Job, attempt: int) -> RunStatus:
        return RunStatus(self.run_state)  # type: ignore[arg-type]

    def signal(self, job: Job, attempt: int, sig: signal.Signals, target: object = None) -> None:
        self.signals.append((job.id, attempt, sig))

    def cleanup(self, job: Job, attempt: int) -> None:
        self.cleaned.append((job.id, attempt))

    def poke(self) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def docker_problem(self, now: float) -> str | None: ...
    def launch(self, job: Job, attempt: int, gpus: Sequence[int]) -> None:
        self.launched.append((job.id, attempt))
        if self.launch_answer_lost:
            raise LaunchError("docker run: connection lost", maybe_started=True)
        if self.launch_busy:
            raise LaunchError("docker run: sshd refused a channel", node_busy=True)
        if self.launch_refusal is not None:
            raise LaunchError(self.launch_refusal)


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def daemon(tmp_path: Path, clocks: Clocks) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    config = Config(node_down_seconds=DOWN_AFTER, node_lease_seconds=LEASE)
    made = Daemon(
        paths, config, Store(paths.store), clock=lambda: clocks.wall, monotonic=lambda: clocks.mono
    )
    made.fleet.nodes = {"gpu01": FakeNode("gpu01", clocks)}
    yield made
    made.committer.close()


def node(daemon: Daemon) -> FakeNode:
    fake = daemon.fleet.nodes["gpu01"]
    assert isinstance(fake, FakeNode)
    return fake


def running_job(daemon: Daemon, clocks: Clocks, **spec: object) -> int:
    job_spec = JobSpec(name="train", command=("train",), image="img", gpus=1, **spec)  # type: ignore[arg-type]
    (job_id,) = daemon.store.submit([job_spec], 0, "alice", clocks.wall)
    daemon.store.set_state(
        job_id, JobState.CONFIGURING, "", clocks.wall, node="gpu01", gpus=(0,), attempt=1
    )
    daemon.store.set_state(job_id, JobState.RUNNING, "", clocks.wall, start_time=clocks.wall)
    return job_id


def go_silent_for(daemon: Daemon, clocks: Clocks, seconds: float) -> None:
    node(daemon).reporting = False
    clocks.mono += seconds
    clocks.wall += seconds
    daemon.collect_ended_runs(clocks.wall)


def test_a_suspect_or_freshly_down_node_keeps_its_runs(daemon: Daemon, clocks: Clocks) -> None:
    job_id = running_job(daemon, clocks)
    go_silent_for(daemon, clocks, 10)
    assert daemon.fleet.node_infos()[0].state.value == "suspect"
    go_silent_for(daemon, clocks, DOWN_AFTER)  # down, but the lease may still run
    assert daemon.fleet.node_infos()[0].state.value == "down"
    assert daemon.store.require(job_id).state is JobState.RUNNING


def test_a_node_that_cannot_write_its_lease_gets_no_new_job_and_keeps_its_runs(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = running_job(daemon, clocks)
    node(daemon).lease_problem = "cannot renew the lease file /a/lease.json: [Errno 30] EROFS"
    daemon.collect_ended_runs(clocks.wall)

    (info,) = daemon.fleet.node_infos()
    assert info.state.value == "suspect"
    assert info.reason.startswith("lease not renewed (cannot renew the lease file /a/lease")
    view = daemon.fleet.node_view(daemon.fleet.nodes["gpu01"], [daemon.store.require(job_id)], {})
    assert not view.available and view.unavailable_reason.startswith("suspect: lease not")
    assert daemon.store.require(job_id).state is JobState.RUNNING  # left alone
    assert node(daemon).signals == []

    node(daemon).lease_problem = ""  # the host wrote it again
    assert daemon.fleet.node_infos()[0].state.value == "allocated"
    assert daemon.fleet.node_view(daemon.fleet.nodes["gpu01"], [], {}).available


def test_a_down_nodes_run_is_requeued_once_the_lease_and_margin_are_over(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = running_job(daemon, clocks)
    go_silent_for(daemon, clocks, LEASE + FENCE_MARGIN_SECONDS - 0.1)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    go_silent_for(daemon, clocks, 0.1)
    job = daemon.store.require(job_id)
    assert (job.state, job.node, job.gpus) == (JobState.PENDING, None, ())
    assert "stopped by the lease; requeued" in job.reason


def test_a_wall_clock_jump_does_not_make_a_node_down(daemon: Daemon, clocks: Clocks) -> None:
    job_id = running_job(daemon, clocks)
    clocks.wall += 86400  # the wall clock jumps a day; the node keeps reporting
    node(daemon).hear()
    daemon.collect_ended_runs(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    assert daemon.fleet.node_infos()[0].state.value == "allocated"


def test_a_job_that_opted_out_of_requeue_ends_node_fail(daemon: Daemon, clocks: Clocks) -> None:
    job_id = running_job(daemon, clocks, requeue=False)
    go_silent_for(daemon, clocks, LEASE + FENCE_MARGIN_SECONDS)
    job = daemon.store.require(job_id)
    assert job.state is JobState.NODE_FAIL and "not requeued" in job.reason


def test_a_job_being_cancelled_on_a_lost_node_ends_cancelled(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = running_job(daemon, clocks)
    daemon.store.set_state(
        job_id, JobState.COMPLETING, "", clocks.wall, stop_state=JobState.CANCELLED
    )
    go_silent_for(daemon, clocks, LEASE + FENCE_MARGIN_SECONDS)
    assert daemon.store.require(job_id).state is JobState.CANCELLED


def container(job: int, attempt: int, state: str, node: str | None = "gpu01") -> ContainerReport:
    name = f"gbatch-{job}-{attempt}"
    return ContainerReport(name, name, job, attempt, "alice", state, None, False, None, None, node)


def test_reaping_touches_only_this_nodes_containers_of_ended_runs_of_known_jobs(
    daemon: Daemon, clocks: Clocks
) -> None:
    ended = running_job(daemon, clocks)
    daemon.store.set_state(ended, JobState.PENDING, "requeued", clocks.wall, node=None, gpus=())
    live = running_job(daemon, clocks)
    fake = node(daemon)
    fake.containers = (
        container(ended, 1, "running"),  # fenced too late, or never: killed and removed
        container(live, 1, "running"),  # live: left alone
        container(ended, 1, "exited", node="gpu02"),  # another node's: left alone
        container(ended, 1, "exited", node=None),  # unlabelled (the embedded node's)
        container(999, 1, "exited"),  # a job this store does not know
    )
    go_silent_for(daemon, clocks, 10)
    fake.hear()
    daemon.collect_ended_runs(clocks.wall)
    assert fake.signals == [(ended, 1, signal.SIGKILL)]
    assert fake.cleaned == [(ended, 1)]
    # Only on coming back: the next steps do not reap again.
    daemon.collect_ended_runs(clocks.wall)
    assert fake.cleaned == [(ended, 1)]


def test_a_launch_that_failed_is_retried_then_fails_with_slurms_exit_code_1(
    daemon: Daemon, clocks: Clocks
) -> None:
    fake = node(daemon)
    fake.gpus = lambda report: (Gpu(0, "GPU-0", "sim", 1024, 0),)  # type: ignore[method-assign]
    fake.launch_refusal = "image no-such:1 not found on gpu01 and it cannot be pulled (denied)"
    (job_id,) = daemon.store.submit(
        [JobSpec(name="j", command=("true",), image="no-such:1", gpus=1, retries=1)],
        0,
        "alice",
        clocks.wall,
    )
    daemon.schedule(clocks.wall)
    job = daemon.store.require(job_id)
    assert job.state is JobState.PENDING  # its one retry
    fake.seq += 1  # a report shows the GPU clean again
    daemon.schedule(clocks.wall)
    job = daemon.store.require(job_id)
    assert fake.launched == [(job_id, 1), (job_id, 2)]
    assert job.state is JobState.FAILED
    # Never 0:0, which a script reads as success: Slurm's 1:0 for a launch failure.
    assert (job.exit_code, job.exit_signal) == (1, 0)
    assert job.reason == f"launch failed: {fake.launch_refusal}"


def lost_start(daemon: Daemon, clocks: Clocks) -> int:
    """A job whose `docker run` answer was lost: left CONFIGURING, not retried beside it."""
    fake = node(daemon)
    fake.gpus = lambda report: (Gpu(0, "GPU-0", "sim", 1024, 0),)  # type: ignore[method-assign]
    fake.launch_answer_lost = True
    (job_id,) = daemon.store.submit(
        [JobSpec(name="j", command=("true",), image="img", gpus=1, retries=0)],
        0,
        "alice",
        clocks.wall,
    )
    daemon.schedule(clocks.wall)
    assert fake.launched == [(job_id, 1)]
    job = daemon.store.require(job_id)
    assert job.state is JobState.CONFIGURING
    assert job.reason.startswith("launch outcome unknown (docker run: connection lost)")
    fake.launch_answer_lost = False
    return job_id


def test_a_lost_start_found_running_is_adopted(daemon: Daemon, clocks: Clocks) -> None:
    job_id = lost_start(daemon, clocks)
    node(daemon).run_state = "running"
    daemon.collect_ended_runs(clocks.wall)
    job = daemon.store.require(job_id)
    assert (job.state, job.attempt) == (JobState.RUNNING, 1)
    assert job.reason == "adopted: its unconfirmed start was found running"


def test_a_lost_start_the_node_cannot_tell_of_is_neither_adopted_nor_requeued(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = lost_start(daemon, clocks)
    node(daemon).run_state = "unknown"
    for _ in range(5):
        clocks.wall += LAUNCH_SETTLE_SECONDS
        node(daemon).seq += 1
        daemon.collect_ended_runs(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.CONFIGURING


def test_a_lost_start_is_requeued_only_after_the_settle_and_a_later_listing_without_it(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = lost_start(daemon, clocks)
    fake = node(daemon)
    fake.run_state = "vanished"  # docker: No such container (yet)
    clocks.wall += LAUNCH_SETTLE_SECONDS - 1
    daemon.collect_ended_runs(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.CONFIGURING  # may still appear
    clocks.wall += 1
    daemon.collect_ended_runs(clocks.wall)
    # Settled, but the latest report may predate that: wait for a later one.
    assert daemon.store.require(job_id).state is JobState.CONFIGURING
    fake.seq += 1
    fake.containers = (container(job_id, 1, "created"),)  # listed after all
    daemon.collect_ended_runs(clocks.wall)
    assert daemon.store.require(job_id).state is JobState.CONFIGURING
    fake.containers = ()
    fake.seq += 1
    daemon.collect_ended_runs(clocks.wall)
    job = daemon.store.require(job_id)
    # Requeued though retries is 0: an unconfirmed start is not the job's failure.
    assert (job.state, job.node) == (JobState.PENDING, None)
    assert job.reason == (
        "launch was not confirmed: no container gbatch-1-1 on gpu01 60 s after its answer "
        "was lost; requeued"
    )
    assert [e.state for e in daemon.store.events(job_id)] == [
        JobState.PENDING,
        JobState.CONFIGURING,
        JobState.CONFIGURING,  # the note: launch outcome unknown
        JobState.PENDING,
    ]
    assert all(e.reason for e in daemon.store.events(job_id)[1:])


def test_an_unconfirmed_start_left_by_a_dead_daemon_is_requeued_at_once(
    daemon: Daemon, clocks: Clocks
) -> None:
    (job_id,) = daemon.store.submit(
        [JobSpec(name="j", command=("true",), image="img", gpus=1)], 0, "alice", clocks.wall
    )
    daemon.store.set_state(
        job_id, JobState.CONFIGURING, "allocated", clocks.wall, node="gpu01", gpus=(0,), attempt=1
    )
    node(daemon).run_state = "vanished"
    daemon.collect_ended_runs(clocks.wall)
    job = daemon.store.require(job_id)
    assert (job.state, job.reason) == (JobState.PENDING, "launch was not confirmed; requeued")


def test_a_start_the_node_was_too_busy_to_take_is_requeued_without_a_retry(
    daemon: Daemon, clocks: Clocks
) -> None:
    fake = node(daemon)
    fake.gpus = lambda report: (Gpu(0, "GPU-0", "sim", 1024, 0),)  # type: ignore[method-assign]
    fake.launch_busy = True
    (job_id,) = daemon.store.submit(
        [JobSpec(name="j", command=("true",), image="img", gpus=1, retries=0)],
        0,
        "alice",
        clocks.wall,
    )
    daemon.schedule(clocks.wall)
    job = daemon.store.require(job_id)
    assert (job.state, job.node) == (JobState.PENDING, None)
    assert job.reason == (
        "gpu01 could not take the start now (docker run: sshd refused a channel); requeued"
    )
    fake.launch_busy = False
    fake.seq += 1  # a report after the release: GPU 0 is free again
    daemon.schedule(clocks.wall)  # retries 0, yet it starts: the refusal cost it nothing
    assert fake.launched == [(job_id, 1), (job_id, 2)]
    assert daemon.store.require(job_id).state is JobState.RUNNING


def test_a_pass_commits_its_starts_once_for_the_intents_and_once_for_the_confirmations(
    daemon: Daemon, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = node(daemon)
    fake.gpus = lambda report: tuple(Gpu(i, f"GPU-{i}", "sim", 1024, 0) for i in range(4))  # type: ignore[method-assign]
    spec = JobSpec(name="j", command=("true",), image="img", gpus=1)
    ids = daemon.store.submit([spec] * 4, 0, "alice", clocks.wall)
    commits = []
    write = daemon.store._write
    monkeypatch.setattr(daemon.store, "_write", lambda: commits.append(1) or write())
    daemon.schedule(clocks.wall)
    assert fake.launched == [(job_id, 1) for job_id in ids]
    assert {daemon.store.require(i).state for i in ids} == {JobState.RUNNING}
    assert len(commits) == 2  # a commit per start would be 8 (an fsync each)


def test_a_failed_start_among_a_passs_starts_leaves_the_others_running(
    daemon: Daemon, clocks: Clocks
) -> None:
    fake = node(daemon)
    fake.gpus = lambda report: tuple(Gpu(i, f"GPU-{i}", "sim", 1024, 0) for i in range(3))  # type: ignore[method-assign]
    spec = JobSpec(name="j", command=("true",), image="img", gpus=1)
    ids = daemon.store.submit([spec] * 3, 0, "alice", clocks.wall)
    launch = fake.launch

    def refuse_the_second(job: Job, attempt: int, gpus: Sequence[int]) -> None:
        fake.launch_refusal = "no such image" if job.id == ids[1] else None
        launch(job, attempt, gpus)

    fake.launch = refuse_the_second  # type: ignore[method-assign]
    daemon.schedule(clocks.wall)
    states = [daemon.store.require(i) for i in ids]
    assert [job.state for job in states] == [JobState.RUNNING, JobState.FAILED, JobState.RUNNING]
    assert states[1].reason == "launch failed: no such image"


def test_a_job_cancelled_while_its_pass_planned_is_not_started(
    daemon: Daemon, clocks: Clocks
) -> None:
    fake = node(daemon)
    fake.gpus = lambda report: tuple(Gpu(i, f"GPU-{i}", "sim", 1024, 0) for i in range(2))  # type: ignore[method-assign]
    spec = JobSpec(name="j", command=("true",), image="img", gpus=1)
    first, second = daemon.store.submit([spec] * 2, 0, "alice", clocks.wall)
    planned = [daemon.store.require(first), daemon.store.require(second)]
    daemon.store.cancel_pending([first], "cancelled", clocks.wall)
    daemon.dispatch([(job, fake, (i,)) for i, job in enumerate(planned)], clocks.wall)
    assert fake.launched == [(second, 1)]
    assert daemon.store.require(first).state is JobState.CANCELLED
    assert daemon.store.require(second).state is JobState.RUNNING


def test_runs_that_exited_by_one_tick_are_recorded_in_one_commit_with_their_usage(
    daemon: Daemon, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [running_job(daemon, clocks) for _ in range(3)]
    clocks.wall += 100
    fake = node(daemon)
    fake.run_state = "exited"
    commits = []
    write = daemon.store._write
    monkeypatch.setattr(daemon.store, "_write", lambda: commits.append(1) or write())
    daemon.collect_ended_runs(clocks.wall)
    assert {daemon.store.require(i).state for i in ids} == {JobState.COMPLETED}
    assert sorted(fake.cleaned) == [(i, 1) for i in ids]
    assert len(commits) == 1  # not one per run (an fsync each)
    # Each run's 100 GPU-seconds, folded in with its end.
    assert daemon.store.usage(clocks.wall, 1e9) == {"alice": pytest.approx(300.0)}
