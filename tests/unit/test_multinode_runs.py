"""A job across nodes is ONE job on all its nodes (issue 32): the daemon's rules on fake
clocks and fake nodes. Its command starts on every node with that node's variables
(MASTER_ADDR the first node's peer address), it runs while every run runs, it fails
when one run fails (the others stopped), it ends or is requeued whole when a node is
lost, every GPU is handed back everywhere, cancel and signals reach every node, and a
restarted daemon adopts the runs on every node."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.model import Gpu, Job, JobSpec, JobState
from gbatch.core.multinode import master_port, node_index
from gbatch.core.signals import SignalTarget
from gbatch.head.daemon import Daemon
from gbatch.head.liveness import FENCE_MARGIN_SECONDS
from gbatch.head.store import Store
from gbatch.nodes.base import LaunchError, RunStatus
from gbatch.nodes.joblog import node_log
from gbatch.nodes.report import ContainerReport, NodeReport, RunOwner
from gbatch.site.config import Config, Paths

DOWN_AFTER, LEASE = 60.0, 90.0
CALLS: list[str] = []


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 1000.0


class FakeNode:
    """A GPU host whose runs the test moves: `runs[(job, attempt)]` is the RunStatus the
    node gives; records launches (with their env), signals and clean-ups."""

    runs_bare_processes = False
    fences_runs = True
    runs_steps = False

    def __init__(self, name: str, clocks: Clocks, gpus: int = 2) -> None:
        self.name = name
        self.address = f"root@{name}:22"
        self.peer_address = f"10.0.0.{name[-1]}"
        self.clocks = clocks
        self.gpu_count = gpus
        self.reporting = True
        self.heard_at: float | None = clocks.mono
        self.runs: dict[tuple[int, int], RunStatus] = {}
        self.launched: list[tuple[int, int, tuple[int, ...], dict[str, str]]] = []
        self.signals: list[tuple[int, int, signal.Signals]] = []
        self.cleaned: list[tuple[int, int]] = []
        self.launch_refusal: str | None = None
        self.start_refusal: str | None = None
        self.containers: tuple[ContainerReport, ...] = ()
        self.cleaned_at: list[int] = []  # the node's place in each job it cleaned up
        self.calls = CALLS  # every node's launches and starts, in order
        self.seq = 1

    @property
    def report_seq(self) -> int:
        return self.seq

    def last_heard(self) -> float | None:
        return self.heard_at

    def report(self) -> tuple[NodeReport | None, str]:
        if not self.reporting:
            return None, "connection lost"
        report = NodeReport(1, self.clocks.wall, self.name, "simulation", "", (), None)
        return replace(report, containers=self.containers), ""

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return tuple(Gpu(i, f"GPU-{self.name}-{i}", "sim", 1024, 0) for i in range(self.gpu_count))

    def run_owners(self, report: NodeReport) -> dict[tuple[int, int], RunOwner]:
        return {}

    def status(self, job: Job, attempt: int) -> RunStatus:
        if not self.reporting:
            return RunStatus("unknown")
        return self.runs.get((job.id, attempt), RunStatus("vanished"))

    def signal(
        self, job: Job, attempt: int, sig: signal.Signals, target: SignalTarget | None = None
    ) -> None:
        self.signals.append((job.id, attempt, sig))

    def cleanup(self, job: Job, attempt: int) -> None:
        self.cleaned.append((job.id, attempt))
        self.cleaned_at.append(node_index(job, self.name))

    def launch(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        env: Mapping[str, str] | None = None,
        *,
        hold: bool = False,
    ) -> None:
        if self.launch_refusal is not None:
            raise LaunchError(self.launch_refusal)
        assert node_index(job, self.name) == list(job.node_names).index(self.name)
        self.launched.append((job.id, attempt, tuple(gpus), dict(env or {})))
        self.runs[(job.id, attempt)] = RunStatus("running")  # a created container counts
        self.calls.append(f"{'create' if hold else 'run'} {self.name}")

    def start_held(self, job: Job, attempt: int) -> None:
        self.calls.append(f"start {self.name}")
        if self.start_refusal is not None:
            raise LaunchError(self.start_refusal)

    def exit(self, job_id: int, code: int, attempt: int = 1) -> None:
        self.runs[(job_id, attempt)] = RunStatus("exited", code, 0, self.clocks.wall)

    def poke(self) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def docker_problem(self, now: float) -> str | None: ...
    def round_trip(self) -> None: ...


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def daemon(tmp_path: Path, clocks: Clocks) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    config = Config(node_down_seconds=DOWN_AFTER, node_lease_seconds=LEASE, kill_grace_seconds=5)
    made = Daemon(
        paths, config, Store(paths.store), clock=lambda: clocks.wall, monotonic=lambda: clocks.mono
    )
    CALLS.clear()
    made.fleet.nodes = {name: FakeNode(name, clocks) for name in ("gpu1", "gpu2", "gpu3")}
    yield made
    made.committer.close()


def fake(daemon: Daemon, name: str) -> FakeNode:
    node = daemon.fleet.nodes[name]
    assert isinstance(node, FakeNode)
    return node


def start_across(
    daemon: Daemon, clocks: Clocks, nodes: Sequence[str] = ("gpu1", "gpu2"), **spec: object
) -> int:
    """Submit a job across `nodes` (2 GPUs on each) and dispatch it as the planner would
    (its Assignment.peers as Job.peers)."""
    fields: dict[str, object] = {
        "name": "train",
        "command": ("python3", "train.py"),
        "image": "img",
        "gpus": 2,
        "nodes": len(nodes),
        "every_node": True,
        **spec,
    }
    (job_id,) = daemon.store.submit([JobSpec(**fields)], 0, "alice", clocks.wall)  # type: ignore[arg-type]
    job = daemon.store.require(job_id)
    peers = tuple((name, (0, 1)) for name in nodes[1:])
    daemon.dispatch(
        [(replace(job, peers=peers), daemon.fleet.nodes[nodes[0]], (0, 1))], clocks.wall
    )
    return job_id


def tick(daemon: Daemon, clocks: Clocks, seconds: float = 1.0) -> None:
    clocks.wall += seconds
    clocks.mono += seconds
    for node in daemon.fleet.nodes.values():
        if isinstance(node, FakeNode) and node.reporting:
            node.heard_at = clocks.mono
    daemon.collect_ended_runs(clocks.wall)
    daemon.enforce_limits(clocks.wall)


def test_every_node_runs_the_command_with_its_own_ranks_and_the_first_nodes_address(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks, ("gpu1", "gpu2", "gpu3"))
    job = daemon.store.require(job_id)
    assert job.state is JobState.RUNNING
    assert job.peers == (("gpu2", (0, 1)), ("gpu3", (0, 1)))
    for rank, name in enumerate(("gpu1", "gpu2", "gpu3")):
        ((launched_id, attempt, gpus, env),) = fake(daemon, name).launched
        assert (launched_id, attempt, gpus) == (job_id, 1, (0, 1))
        assert env["MASTER_ADDR"] == "10.0.0.1"  # the first node's, as the others reach it
        assert env["MASTER_PORT"] == str(master_port(job_id))
        assert (env["RANK"], env["NODE_RANK"], env["SLURM_NODEID"]) == (str(rank),) * 3
        assert (env["WORLD_SIZE"], env["SLURM_NNODES"], env["LOCAL_RANK"]) == ("3", "3", "0")
        assert env["SLURM_JOB_NODELIST"] == "gpu[1-3]"
        assert env["SLURMD_NODENAME"] == name


def test_the_slurm_form_runs_its_script_on_the_first_node_only(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks, image=None, every_node=False)
    ((_, _, _, env),) = fake(daemon, "gpu1").launched
    assert fake(daemon, "gpu2").launched == []  # it holds its GPUs for srun
    assert (env["SLURM_NODEID"], env["SLURM_PROCID"], env["SLURM_NNODES"]) == ("0", "0", "2")
    assert env["SLURM_JOB_NODELIST"] == "gpu[1-2]"
    assert daemon.store.require(job_id).state is JobState.RUNNING
    fake(daemon, "gpu1").exit(job_id, 0)
    tick(daemon, clocks)
    assert daemon.store.require(job_id).state is JobState.COMPLETED
    # The holding node's GPUs come back too; only the first node had a run to clean.
    assert fake(daemon, "gpu1").cleaned == [(job_id, 1)] and fake(daemon, "gpu2").cleaned == []
    assert daemon.fleet._released_at_report.keys() >= {("gpu2", 0), ("gpu2", 1)}


def test_a_job_runs_until_every_node_has_ended_and_completes_when_all_exit_0(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks)
    fake(daemon, "gpu1").exit(job_id, 0)
    tick(daemon, clocks)
    assert daemon.store.require(job_id).state is JobState.RUNNING  # gpu2 still runs
    fake(daemon, "gpu2").exit(job_id, 0)
    tick(daemon, clocks)
    job = daemon.store.require(job_id)
    assert (job.state, job.exit_code) == (JobState.COMPLETED, 0)
    for name in ("gpu1", "gpu2"):
        assert fake(daemon, name).cleaned == [(job_id, 1)]
    released = daemon.fleet._released_at_report.keys()
    assert {("gpu1", 0), ("gpu1", 1), ("gpu2", 0), ("gpu2", 1)} <= released


def test_one_run_failing_stops_the_others_and_the_job_fails_with_its_code_and_node(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks)
    fake(daemon, "gpu2").exit(job_id, 3)
    tick(daemon, clocks)
    job = daemon.store.require(job_id)
    assert job.state is JobState.COMPLETING
    assert (job.id, 1, signal.SIGTERM) in fake(daemon, "gpu1").signals
    tick(daemon, clocks, 6)  # past kill_grace_seconds
    assert (job.id, 1, signal.SIGKILL) in fake(daemon, "gpu1").signals
    fake(daemon, "gpu1").runs[(job_id, 1)] = RunStatus("exited", 0, 15, clocks.wall)
    tick(daemon, clocks)
    job = daemon.store.require(job_id)
    assert (job.state, job.exit_code) == (JobState.FAILED, 3)
    assert job.reason == "exit code 3 on gpu2 (node 1)"


def test_a_failed_run_with_retries_left_requeues_the_whole_job(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks, retries=1)
    fake(daemon, "gpu1").exit(job_id, 1)
    fake(daemon, "gpu2").exit(job_id, 0)
    tick(daemon, clocks)
    job = daemon.store.require(job_id)
    assert (job.state, job.node, job.peers) == (JobState.PENDING, None, ())
    assert job.reason == "retry 1/1 after exit code 1 on gpu1 (node 0)"


def test_a_lost_peer_ends_the_whole_job_and_frees_every_gpu_everywhere(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks, requeue=False)
    fake(daemon, "gpu2").reporting = False
    tick(daemon, clocks, LEASE + FENCE_MARGIN_SECONDS)
    job = daemon.store.require(job_id)
    assert job.state is JobState.NODE_FAIL
    assert job.reason.startswith("node gpu2 of its 2 nodes down")
    assert fake(daemon, "gpu1").cleaned == [(job_id, 1)]  # its run there is removed
    released = daemon.fleet._released_at_report.keys()
    assert {("gpu1", 0), ("gpu1", 1), ("gpu2", 0), ("gpu2", 1)} <= released


def test_a_lost_peer_requeues_the_whole_job_when_it_may_be(daemon: Daemon, clocks: Clocks) -> None:
    job_id = start_across(daemon, clocks)  # requeue defaults to true
    fake(daemon, "gpu2").reporting = False
    tick(daemon, clocks, LEASE + FENCE_MARGIN_SECONDS)
    job = daemon.store.require(job_id)
    assert (job.state, job.node, job.peers) == (JobState.PENDING, None, ())
    assert job.reason.endswith("; requeued")


def test_cancel_stops_the_runs_on_every_node(daemon: Daemon, clocks: Clocks) -> None:
    job_id = start_across(daemon, clocks)
    daemon.store.set_state(
        job_id, JobState.COMPLETING, "cancelled", clocks.wall, stop_state=JobState.CANCELLED
    )
    tick(daemon, clocks)
    for name in ("gpu1", "gpu2"):
        assert fake(daemon, name).signals == [(job_id, 1, signal.SIGTERM)]
        fake(daemon, name).runs[(job_id, 1)] = RunStatus("exited", 143, 0, clocks.wall)
    tick(daemon, clocks)
    job = daemon.store.require(job_id)
    assert (job.state, job.exit_code) == (JobState.CANCELLED, 143)  # its first node's run's


def test_a_time_limit_stops_every_node(daemon: Daemon, clocks: Clocks) -> None:
    job_id = start_across(daemon, clocks, time_limit=60)
    tick(daemon, clocks, 61)
    assert daemon.store.require(job_id).stop_state is JobState.TIMEOUT
    for name in ("gpu1", "gpu2"):
        assert fake(daemon, name).signals == [(job_id, 1, signal.SIGTERM)]
        fake(daemon, name).runs[(job_id, 1)] = RunStatus("vanished")
    tick(daemon, clocks)
    assert daemon.store.require(job_id).state is JobState.TIMEOUT


def test_the_signal_warning_reaches_every_node(daemon: Daemon, clocks: Clocks) -> None:
    job_id = start_across(daemon, clocks, time_limit=600, signal="USR1@60")
    tick(daemon, clocks, 541)
    for name in ("gpu1", "gpu2"):
        assert fake(daemon, name).signals == [(job_id, 1, signal.SIGUSR1)]


def test_a_start_failing_on_a_peer_kills_the_started_runs_and_fails_the_job(
    daemon: Daemon, clocks: Clocks
) -> None:
    fake(daemon, "gpu2").launch_refusal = "image img not found on gpu2"
    job_id = start_across(daemon, clocks)
    job = daemon.store.require(job_id)
    assert job.state is JobState.FAILED
    assert job.reason == "launch failed: on gpu2 (node 1 of 2): image img not found on gpu2"
    assert fake(daemon, "gpu1").signals == [(job_id, 1, signal.SIGKILL)]
    assert fake(daemon, "gpu1").cleaned == [(job_id, 1)]


def test_containers_on_every_node_are_created_before_any_starts(
    daemon: Daemon, clocks: Clocks
) -> None:
    start_across(daemon, clocks, ("gpu1", "gpu2", "gpu3"))
    assert CALLS == [
        "create gpu1",
        "create gpu2",
        "create gpu3",
        "start gpu1",
        "start gpu2",
        "start gpu3",
    ]


def test_a_container_that_will_not_start_on_a_peer_stops_the_others(
    daemon: Daemon, clocks: Clocks
) -> None:
    fake(daemon, "gpu2").start_refusal = "docker start on gpu2 failed: no such device"
    job_id = start_across(daemon, clocks)
    job = daemon.store.require(job_id)
    assert job.state is JobState.FAILED
    assert job.reason.startswith("launch failed: on gpu2 (node 1 of 2): docker start on gpu2")
    assert fake(daemon, "gpu1").signals == [(job_id, 1, signal.SIGKILL)]
    assert fake(daemon, "gpu1").cleaned == fake(daemon, "gpu2").cleaned == [(job_id, 1)]


def test_a_restarted_daemon_adopts_the_runs_on_every_node_and_never_starts_twice(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks)
    # As if the daemon died before confirming: CONFIGURING, the runs exist on both.
    daemon.store.set_state(job_id, JobState.PENDING, "", clocks.wall, expect=None)
    daemon.store.set_state(
        job_id,
        JobState.CONFIGURING,
        "",
        clocks.wall,
        node="gpu1",
        gpus=(0, 1),
        peers=(("gpu2", (0, 1)),),
        attempt=1,
    )
    fake(daemon, "gpu2").runs[(job_id, 1)] = RunStatus("unknown")
    tick(daemon, clocks)
    assert daemon.store.require(job_id).state is JobState.CONFIGURING  # gpu2 cannot tell
    fake(daemon, "gpu2").runs[(job_id, 1)] = RunStatus("running")
    CALLS.clear()
    tick(daemon, clocks)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    assert len(fake(daemon, "gpu1").launched) == len(fake(daemon, "gpu2").launched) == 1
    # Containers maybe only created when the daemon died: started, never launched again.
    assert CALLS == ["start gpu1", "start gpu2"]


def test_a_vanished_run_on_a_peer_requeues_the_job_and_removes_the_others(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks)
    del fake(daemon, "gpu2").runs[(job_id, 1)]
    tick(daemon, clocks)
    job = daemon.store.require(job_id)
    assert job.state is JobState.PENDING and "vanished" in job.reason
    assert fake(daemon, "gpu1").cleaned == [(job_id, 1)]


def test_every_nodes_output_is_in_the_jobs_log_once_it_ends_each_line_whole(
    daemon: Daemon, clocks: Clocks, tmp_path: Path
) -> None:
    job_id = start_across(daemon, clocks, ("gpu1", "gpu2", "gpu3"))
    paths = Paths(tmp_path)
    paths.make_run_dir(job_id, 1)
    # Each node's follower copied its run's output; none was joined yet (the daemon
    # restarted after the runs ended, say): the end joins what is left, whole.
    node_log(paths, job_id, 1, 0).write_bytes(b"rank 0\npartial")
    node_log(paths, job_id, 1, 1).write_bytes(b"rank 1\n")
    node_log(paths, job_id, 1, 2).write_bytes(b"rank 2 no newline")
    for name in ("gpu1", "gpu2", "gpu3"):
        fake(daemon, name).exit(job_id, 0)
    tick(daemon, clocks)
    assert paths.job_log(job_id).read_text() == "rank 0\npartial\nrank 1\nrank 2 no newline\n"
    assert (
        paths.task_log(job_id).read_text()
        == "0: rank 0\n0: partial\n1: rank 1\n2: rank 2 no newline\n"
    )
    assert not node_log(paths, job_id, 1, 1).exists()


# -- each node's container, and the admin's keys -----------------------------------------


def test_each_nodes_container_has_its_own_name_and_the_admins_network_and_shm() -> None:
    from gbatch.nodes.docker import container_name, docker_run_argv

    spec = JobSpec(name="t", command=("python3", "t.py"), image="img", gpus=1, nodes=2)
    argv = docker_run_argv(
        job_id=7,
        attempt=1,
        user="alice",
        spec=spec,
        gpus=[0],
        env_file=None,
        node_index=1,
        network="host",
        shm_size="16g",
    )
    assert container_name(7, 1, 1) == "gbatch-7-1-n1" != container_name(7, 1)
    assert argv[argv.index("--name") + 1] == "gbatch-7-1-n1"
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("--shm-size") + 1] == "16g"
    # The job's own --shm-size wins; without the admin's network, host stays refused.
    argv = docker_run_argv(
        job_id=7,
        attempt=1,
        user="alice",
        spec=replace(spec, shm_size="1g"),
        gpus=[0],
        env_file=None,
        shm_size="16g",
    )
    assert argv[argv.index("--shm-size") + 1] == "1g"
    assert argv[argv.index("--network") + 1] == "bridge"


def test_the_inventory_names_how_peers_reach_a_node_and_its_multinode_network(
    tmp_path: Path,
) -> None:
    from gbatch.nodes.inventory import InventoryError, load_inventory

    path = tmp_path / "inventory.yaml"
    path.write_text(
        "defaults:\n  multinode_network: host\n  multinode_shm_size: 16g\n"
        "nodes:\n  - name: gpu01\n    host: gpu01.lab\n    peer_address: 10.1.0.1\n"
        "  - name: gpu02\n    host: gpu02.lab\n"
    )
    first, second = load_inventory(path, home=tmp_path).nodes
    assert (first.reached_by_peers_at, second.reached_by_peers_at) == ("10.1.0.1", "gpu02.lab")
    assert (second.multinode_network, second.multinode_shm_size) == ("host", "16g")
    path.write_text("nodes:\n  - name: gpu01\n    host: a\n    multinode_network: container:x\n")
    with pytest.raises(InventoryError, match='multinode_network: "container:x" is not a docker'):
        load_inventory(path, home=tmp_path)


def test_a_node_heard_again_removes_its_run_of_a_job_requeued_meanwhile(
    daemon: Daemon, clocks: Clocks
) -> None:
    job_id = start_across(daemon, clocks)
    gpu2 = fake(daemon, "gpu2")
    gpu2.reporting = False
    tick(daemon, clocks, LEASE + FENCE_MARGIN_SECONDS)
    assert daemon.store.require(job_id).state is JobState.PENDING  # its nodes forgotten
    # gpu2 comes back, its container of that run still there (its fence came too late).
    name = f"gbatch-{job_id}-1-n1"
    gpu2.containers = (
        ContainerReport(name, name, job_id, 1, "alice", "running", None, False, None, None, "gpu2"),
    )
    gpu2.reporting, gpu2.cleaned, gpu2.cleaned_at = True, [], []
    tick(daemon, clocks)
    assert (job_id, 1, signal.SIGKILL) in gpu2.signals
    assert (gpu2.cleaned, gpu2.cleaned_at) == ([(job_id, 1)], [1])  # by its name's place


def test_scancel_signal_reaches_the_run_on_every_node(daemon: Daemon, clocks: Clocks) -> None:
    from gbatch.head.handlers import Caller, handle

    job_id = start_across(daemon, clocks)
    reply = handle(
        daemon,
        Caller(uid=0, user="root", pid=1),
        {"op": "cancel", "ids": [job_id], "signal": "USR1"},
    )
    assert reply["ok"], reply
    for name in ("gpu1", "gpu2"):
        assert fake(daemon, name).signals == [(job_id, 1, signal.SIGUSR1)]
    assert daemon.store.require(job_id).state is JobState.RUNNING


def test_a_peer_whose_docker_engine_is_gone_requeues_the_job_without_using_a_retry(
    daemon: Daemon, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu2 = fake(daemon, "gpu2")
    gpu2.launch_refusal = "docker run on gpu2 failed: Cannot connect to the Docker daemon"
    monkeypatch.setattr(gpu2, "docker_problem", lambda now: "no engine")
    job_id = start_across(daemon, clocks)
    job = daemon.store.require(job_id)
    assert job.state is JobState.PENDING
    assert "on gpu2 (node 1 of 2): its docker engine does not answer (no engine)" in job.reason
    assert daemon.runs.retries_used(job) == 0


def test_a_run_starts_at_its_allocation_not_after_its_launch(
    daemon: Daemon, clocks: Clocks
) -> None:
    """start_time is the dispatch's time (Slurm's StartTime): a launch that takes a while
    (a loaded docker run) is not left out of the job's elapsed time and GPU-hours."""
    allocated = clocks.wall
    slow = daemon.fleet.nodes["gpu1"]
    launch = slow.launch

    def taking_three_seconds(*args: Any, **kwargs: Any) -> None:
        clocks.wall += 3.0
        launch(*args, **kwargs)

    slow.launch = taking_three_seconds  # type: ignore[method-assign]
    job_id = start_across(daemon, clocks, ("gpu1",))
    job = daemon.store.require(job_id)
    assert job.state is JobState.RUNNING
    assert job.start_time == allocated
