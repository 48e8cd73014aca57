"""A partition backed by a Slurm cluster: its config, the sbatch/squeue/sacct text, and
the loop's cluster step over a real store with a fake cluster (one observe per pass,
adoption by marker, cancels forwarded, down and back)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from gbatch.core.model import ClusterNodes, Job, JobSpec, JobState
from gbatch.head.loop.cluster import ClusterJobsStep
from gbatch.head.store import Store
from gbatch.nodes.backend import Backend, BackendDown, BackendRefused, Observation
from gbatch.nodes.cluster import (
    batch_script,
    job_marker,
    parse_parsable,
    parse_sacct,
    parse_squeue,
    refusal,
    sbatch_options,
)
from gbatch.nodes.inventory import (
    InventoryError,
    Partition,
    SlurmCluster,
    load_inventory,
)

T0 = 1_700_000_000.0
CLUSTER = SlurmCluster(
    login="login.uni.example",
    port=22,
    user="labsvc",
    identity_file=None,
    known_hosts=Path("/k"),
    partition="gpu",
    account="lab123",
    max_jobs=3,
)
UNI = Partition("uni", (), slurm=CLUSTER)


# -- config ---------------------------------------------------------------------------------


def _inventory(tmp_path: Path, slurm: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes:\n  - name: gpu01\n    host: gpu01.lab\n"
        "partitions:\n  - name: gpu\n    nodes: [gpu01]\n    default: true\n"
        f"  - name: uni\n    slurm:\n{slurm}"
    )
    return path


def test_a_slurm_block_makes_a_partition_without_nodes(tmp_path: Path) -> None:
    path = _inventory(
        tmp_path,
        "      login: login.uni.example\n      user: labsvc\n      partition: gpu\n"
        "      account: lab123\n      max_jobs: 50\n",
    )
    inventory = load_inventory(path, home=tmp_path)
    uni = inventory.partitions[1]
    assert uni.nodes == () and uni.slurm is not None
    assert (uni.slurm.login, uni.slurm.user, uni.slurm.max_jobs) == (
        "login.uni.example",
        "labsvc",
        50,
    )
    assert uni.slurm.identity == "shared" and uni.slurm.workdir == "gbatch"
    assert uni.slurm.known_hosts == tmp_path / "known_hosts"


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        ("      user: labsvc\n", "login", "missing"),
        ("      login: login.uni.example\n", "user", "missing"),
        (
            "      login: x\n      user: labsvc\n      identity: per_user\n",
            "user",
            "gbatch cluster link",
        ),
        ("      login: x\n      user: labsvc\n      max_jobs: 0\n", "max_jobs", "1 to 100000"),
        (
            "      login: x\n      user: labsvc\n      account: 'a b'\n",
            "account",
            "not a Slurm name",
        ),
        ("      login: x\n      user: labsvc\n      workdir: ../etc\n", "workdir", "without '..'"),
        ("      login: x\n      user: labsvc\n      colour: red\n", "colour", ""),
        ("      login: user@x\n      user: labsvc\n", "login", "contains a user"),
    ],
)
def test_a_bad_slurm_block_is_refused_in_one_line_naming_the_field(
    tmp_path: Path, block: str, field: str, words: str
) -> None:
    with pytest.raises(InventoryError) as caught:
        load_inventory(_inventory(tmp_path, block), home=tmp_path)
    message = str(caught.value)
    assert "\n" not in message and f"partitions[1] (uni): slurm: {field}:" in message
    assert words in message


def test_nodes_beside_a_slurm_block_are_refused(tmp_path: Path) -> None:
    path = _inventory(tmp_path, "      login: x\n      user: labsvc\n")
    path.write_text(
        path.read_text().replace("  - name: uni\n", "  - name: uni\n    nodes: [gpu01]\n")
    )
    with pytest.raises(InventoryError, match="nodes: is set beside slurm:"):
        load_inventory(path, home=tmp_path)


# -- what is sent and read ---------------------------------------------------------------------


def _job(job_id: int = 7, **spec: object) -> Job:
    fields: dict[str, object] = {
        "name": "train",
        "command": ("/bin/sh", "-c", "echo hi; exit 3", "job.sh"),
        "partition": "uni",
    }
    fields.update(spec)
    return Job(job_id, 1000, "alice", JobSpec(**fields), JobState.PENDING, T0)  # type: ignore[arg-type]


def test_sbatch_options_carry_the_spec_the_cluster_names_and_the_marker() -> None:
    job = _job(gpus=2, gpu_type="a100", time_limit=3630, cpus=4, mem_mb=8000)
    options = sbatch_options(job, CLUSTER, "gbatch:h:7.1")
    assert options == [
        "--parsable",
        "--job-name=train",
        "--comment=gbatch:h:7.1 user=alice",
        "--output=gbatch-7.out",
        "--partition=gpu",
        "--account=lab123",
        "--time=60:30",
        "--gres=gpu:a100:2",
        "--cpus-per-task=4",
        "--mem=8000M",
    ]


def test_the_batch_script_execs_the_command_with_the_jobs_env_quoted() -> None:
    script = batch_script(_job(env=(("A", "it's"),))).decode()
    assert script.startswith("#!/bin/sh\n")
    assert "export A='it'\"'\"'s'\n" in script
    assert script.endswith("exec /bin/sh -c 'echo hi; exit 3' job.sh\n")


def test_squeue_lines_become_observations_with_wait_statuses_decoded() -> None:
    out = (
        b"12|PENDING|Priority|(null)|0|UNLIMITED|gbatch:h:7.1 user=alice|\n"
        b"13|RUNNING|None|c[01-02]|0|1-02:03:04|gbatch:h:8.1 user=bob|\n"
        b"14|FAILED|NonZeroExitCode|c01|768|5:00|gbatch:h:9.2 user=alice|\n"
        b"15|CANCELLED|None|c01|15|1:00:00|someone's own|job|\n"
        b"garbage\n"
    )
    seen = parse_squeue(out)
    assert seen["12"] == Observation("12", "PENDING", "Priority", "", None, None, "gbatch:h:7.1")
    assert seen["13"].nodes == "c[01-02]" and seen["13"].exit_code is None
    assert seen["13"].time_limit == 93784 and seen["14"].time_limit == 300
    assert (seen["14"].exit_code, seen["14"].signal, seen["14"].marker) == (3, None, "gbatch:h:9.2")
    assert (seen["15"].signal, seen["15"].marker) == (15, "")
    assert len(seen) == 4


def test_sacct_lines_and_sbatch_answers_are_read() -> None:
    seen = parse_sacct(
        b"21|CANCELLED by 0|None|c01|0:15|gbatch:h:1.1 user=a\n22|COMPLETED||c02|0:0|\n"
    )
    assert (seen["21"].state, seen["21"].signal) == ("CANCELLED", 15)
    assert (seen["22"].exit_code, seen["22"].signal) == (0, None)
    assert parse_parsable(b"123\n") == "123" and parse_parsable(b"124;uni\n") == "124"
    with pytest.raises(BackendRefused):
        parse_parsable(b"sbatch: error\n")


def test_what_a_cluster_cannot_take_is_refused_in_one_line() -> None:
    assert "pyxis" in (refusal(_job(image="pytorch").spec, CLUSTER) or "")
    assert "arrays" in (refusal(_job().spec, CLUSTER, array=True) or "")
    assert "srun/salloc" in (refusal(_job(interactive="srun").spec, CLUSTER) or "")
    assert "--reservation" in (refusal(_job(reservation="maint").spec, CLUSTER) or "")
    assert refusal(_job().spec, CLUSTER) is None


# -- the loop's step over a fake cluster ----------------------------------------------------------


class FakeCluster:
    """A cluster that runs what it is sent when told, counting the calls made to it."""

    name = "uni"

    def __init__(self) -> None:
        self.jobs: dict[str, Observation] = {}
        self.calls: dict[str, int] = dict.fromkeys(
            ("submit", "observe", "observe_gone", "cancel", "hold", "release", "sinfo"), 0
        )
        self.down = False
        self.refuse = ""
        # What its sinfo says of the partition's nodes; a str: sinfo fails saying it.
        self.nodes: tuple[ClusterNodes, ...] | str = (ClusterNodes("c[01-02]", 2, "idle", "idle"),)

    def _check(self) -> None:
        if self.down:
            raise BackendDown("cannot reach login.uni.example: connection refused")

    def submit(self, job: Job, marker: str) -> str:
        self._check()
        self.calls["submit"] += 1
        if self.refuse:
            raise BackendRefused(self.refuse)
        backend_id = str(100 + len(self.jobs))
        self.jobs[backend_id] = Observation(backend_id, "PENDING", "Priority", marker=marker)
        return backend_id

    def observe(self) -> Mapping[str, Observation]:
        self._check()
        self.calls["observe"] += 1
        return dict(self.jobs)

    def observe_gone(self, backend_ids: Sequence[str]) -> Mapping[str, Observation]:
        self.calls["observe_gone"] += 1
        return {}

    def observe_nodes(self) -> Sequence[ClusterNodes] | None:
        self._check()
        self.calls["sinfo"] += 1
        if isinstance(self.nodes, str):
            raise BackendRefused(self.nodes)
        return self.nodes

    def cancel(self, backend_ids: Sequence[str]) -> None:
        self._check()
        self.calls["cancel"] += 1
        for each in backend_ids:
            self.set(each, "CANCELLED", exit_code=0, signal=15)

    def hold(self, backend_ids: Sequence[str], held: bool) -> None:
        self._check()
        self.calls["hold" if held else "release"] += 1
        for each in backend_ids:
            self.set(each, "PENDING", reason="JobHeldUser" if held else "Priority")

    def read_log(self, job: Job, offset: int, limit: int) -> bytes:
        return b""

    def observed_users(self) -> frozenset[str] | None:
        return None

    def may_send(self, user: str) -> bool:
        return True

    def close(self) -> None:
        pass

    def set(self, backend_id: str, state: str, **fields: object) -> None:
        old = self.jobs[backend_id]
        self.jobs[backend_id] = Observation(
            backend_id,
            state,
            str(fields.get("reason", "")),
            str(fields.get("nodes", old.nodes)),
            fields.get("exit_code"),  # type: ignore[arg-type]
            fields.get("signal"),  # type: ignore[arg-type]
            old.marker,
        )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db")
    yield opened
    opened.close()


def _step(store: Store, cluster: FakeCluster) -> ClusterJobsStep:
    def make(partition: Partition) -> Backend:
        return cluster

    return ClusterJobsStep(store, [Partition("gpu", ("gpu01",)), UNI], "head1", make)


def _submit(store: Store, count: int = 1, **spec: object) -> list[int]:
    fields: dict[str, object] = {"name": "j", "command": ("true",), "partition": "uni"}
    fields.update(spec)
    return store.submit([JobSpec(**fields) for _ in range(count)], uid=1000, user="alice", now=T0)  # type: ignore[arg-type]


def test_a_job_is_sent_mirrored_and_ended_with_its_exit_code(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store)
    step.mirror(T0 + 1)
    ((backend_id, sent),) = cluster.jobs.items()
    assert sent.marker == job_marker("head1", job_id, 1)
    job = store.require(job_id)
    assert (job.state, job.reason) == (JobState.PENDING, f"sent to cluster uni as job {backend_id}")
    step.mirror(T0 + 2)
    assert store.require(job_id).reason == "Priority"
    cluster.set(backend_id, "RUNNING", nodes="c[01-02]")
    step.mirror(T0 + 3)
    job = store.require(job_id)
    assert (job.state, job.node, job.attempt, job.start_time) == (
        JobState.RUNNING,
        "c[01-02]",
        1,
        T0 + 3,
    )
    assert store.jobs_in({JobState.RUNNING}) == []  # never the fleet's
    cluster.set(backend_id, "FAILED", reason="NonZeroExitCode", exit_code=3)
    step.mirror(T0 + 4)
    job = store.require(job_id)
    assert (job.state, job.exit_code, job.reason) == (JobState.FAILED, 3, "NonZeroExitCode")
    assert store.cluster_jobs("uni") == []


def test_a_job_that_ran_and_ended_between_passes_still_shows_it_ran(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store)
    step.mirror(T0 + 1)
    (backend_id,) = cluster.jobs
    cluster.set(backend_id, "COMPLETED", nodes="c01", exit_code=0)
    step.mirror(T0 + 2)
    job = store.require(job_id)
    assert (job.state, job.node, job.exit_code) == (JobState.COMPLETED, "c01", 0)
    assert [e.state for e in store.events(job_id)][-3:] == [
        JobState.CONFIGURING,
        JobState.RUNNING,
        JobState.COMPLETED,
    ]


def test_a_thousand_jobs_cost_one_squeue_a_pass_and_never_exceed_max_jobs(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    _submit(store, 1000)
    before = dict(cluster.calls)
    step.mirror(T0 + 1)
    assert cluster.calls["observe"] - before["observe"] == 1
    assert len(cluster.jobs) == CLUSTER.max_jobs  # 3 at once
    for backend_id in list(cluster.jobs):
        cluster.set(backend_id, "COMPLETED", nodes="c01", exit_code=0)
    step.mirror(T0 + 2)
    assert cluster.calls["observe"] - before["observe"] == 2
    assert len(cluster.jobs) == 2 * CLUSTER.max_jobs


def test_mirroring_a_thousand_cluster_jobs_costs_one_squeue_and_one_sacct(store: Store) -> None:
    big = SlurmCluster("l", 22, "labsvc", None, Path("/k"), max_jobs=1000)
    cluster = FakeCluster()
    step = ClusterJobsStep(store, [Partition("uni", (), slurm=big)], "head1", lambda p: cluster)
    _submit(store, 1000)
    step.mirror(T0 + 1)
    assert len(cluster.jobs) == 1000
    for backend_id in list(cluster.jobs)[:10]:
        del cluster.jobs[backend_id]  # purged: only sacct could tell
    calls = dict(cluster.calls)
    began = time.perf_counter()
    step.mirror(T0 + 2)
    took = time.perf_counter() - began
    assert cluster.calls["observe"] - calls["observe"] == 1
    assert cluster.calls["observe_gone"] - calls["observe_gone"] == 1
    assert cluster.calls["submit"] == calls["submit"]
    print(f"\nmirror pass over 1,000 cluster jobs: {took * 1000:.1f} ms, 1 squeue + 1 sacct")


def test_a_job_sent_by_a_head_that_died_before_recording_it_is_adopted_never_sent_twice(
    store: Store,
) -> None:
    cluster = FakeCluster()
    for tries in range(1, 51):
        (job_id,) = _submit(store)
        # The dead head's pass: intent, sbatch, and no record of the id.
        marker = job_marker("head1", job_id, 1)
        assert store.begin_cluster_send(job_id, 1, "uni", marker, T0)
        backend_id = cluster.submit(store.require(job_id), marker)
        # The restarted head.
        _step(store, cluster).mirror(T0 + 1)
        assert cluster.calls["submit"] == tries == len(cluster.jobs)
        assert store.cluster_job(job_id).cluster_id == backend_id  # type: ignore[union-attr]
        reasons = [e.reason for e in store.events(job_id)]
        assert f"found on cluster uni as job {backend_id}" in reasons
        cluster.set(backend_id, "COMPLETED", nodes="c01", exit_code=0)
    _step(store, cluster).mirror(T0 + 2)
    assert store.cluster_jobs("uni") == []


def test_an_intent_the_cluster_never_got_is_sent_once(store: Store) -> None:
    cluster = FakeCluster()
    (job_id,) = _submit(store)
    assert store.begin_cluster_send(job_id, 1, "uni", job_marker("head1", job_id, 1), T0)
    step = _step(store, cluster)
    step.mirror(T0 + 1)
    step.mirror(T0 + 2)
    assert cluster.calls["submit"] == 1 and len(cluster.jobs) == 1


def test_cancels_are_forwarded_in_one_scancel(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    pending, running = _submit(store, 2)
    step.mirror(T0 + 1)
    first, second = cluster.jobs
    cluster.set(second, "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    store.cancel_pending([pending], "cancelled by alice", T0 + 3)
    store.set_state(
        running,
        JobState.COMPLETING,
        "cancel requested by alice",
        T0 + 3,
        stop_state=JobState.CANCELLED,
    )
    step.mirror(T0 + 4)
    assert cluster.calls["cancel"] == 1
    assert cluster.jobs[first].state == cluster.jobs[second].state == "CANCELLED"
    step.mirror(T0 + 5)
    assert store.require(running).state is JobState.CANCELLED
    assert store.cluster_jobs("uni") == []


def test_an_unreachable_cluster_marks_its_partition_down_and_jobs_keep_their_state(
    store: Store,
) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store)
    step.mirror(T0 + 1)
    (backend_id,) = cluster.jobs
    cluster.set(backend_id, "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    cluster.down = True
    cluster.set(backend_id, "COMPLETED", nodes="c01", exit_code=0)
    step.mirror(T0 + 3)
    assert "connection refused" in step.down["uni"]
    assert store.require(job_id).state is JobState.RUNNING
    cluster.down = False
    step.mirror(T0 + 4)
    assert step.down == {}
    assert store.require(job_id).state is JobState.COMPLETED


def test_a_job_the_cluster_lost_ends_saying_so_and_a_refused_one_fails(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    (lost,) = _submit(store)
    step.mirror(T0 + 1)
    cluster.jobs.clear()
    step.mirror(T0 + 2)
    job = store.require(lost)
    assert job.state is JobState.FAILED and "has no record of its job" in job.reason
    cluster.refuse = "sbatch: error: Invalid account or account/partition combination"
    (refused,) = _submit(store)
    step.mirror(T0 + 3)
    job = store.require(refused)
    assert (
        job.state is JobState.FAILED and "refused it: sbatch: error: Invalid account" in job.reason
    )


def test_the_planner_window_leaves_cluster_jobs_out(store: Store) -> None:
    (job_id,) = _submit(store)
    assert [j.id for j in store.cluster_unsent(["uni"])] == [job_id]
    assert store.cluster_unsent(["other"]) == []


def test_scontrol_shows_a_cluster_partition_down_with_its_reason() -> None:
    from gbatch.core.model import PartitionInfo
    from gbatch.protocol import codec
    from gbatch.render.scontrol import format_partition_details

    down = PartitionInfo("uni", cluster="labsvc@login:22", down_reason="connect timed out")
    text = format_partition_details(codec.partition_from_wire(codec.partition_to_wire(down)), [])
    assert "State=DOWN" in text and "Cluster=labsvc@login:22" in text
    assert "Reason=connect timed out" in text
    up = PartitionInfo("uni", cluster="labsvc@login:22")
    assert "State=UP" in format_partition_details(up, []) and "Reason" not in (
        format_partition_details(up, [])
    )


def test_scontrol_shows_a_cluster_partitions_nodes_as_its_sinfo_said_them() -> None:
    """Nodes, TotalNodes, TotalCPUs and TotalGPUs of a cluster partition: its sinfo's
    lines summed, the node list one ranged list; none while it is down."""
    from gbatch.core.model import ClusterNodes, PartitionInfo
    from gbatch.protocol import codec
    from gbatch.render.scontrol import format_partition_details

    lines = (
        ClusterNodes(
            "c[01-04,08]", 5, "idle", "idle", cpus=32, mem_mb=1000, gres="gpu:a100:4(S:0-1)"
        ),
        ClusterNodes("c[05-06]", 2, "mix", "mixed", cpus=32, mem_mb=1000, gres="gpu:2,shard:8"),
        ClusterNodes("odd name", 1, "drain", "drained", gres="(null)"),
    )
    up = PartitionInfo("uni", cluster="labsvc@login:22", cluster_nodes=lines)
    text = format_partition_details(codec.partition_from_wire(codec.partition_to_wire(up)), [])
    assert "   Nodes=c[01-06,08],odd name\n" in text
    assert "   State=UP TotalCPUs=224 TotalNodes=8 TotalGPUs=24\n" in text
    assert "   TRES=cpu=224,mem=7000M,node=8,gres/gpu=24\n" in text
    down = PartitionInfo("uni", cluster="x", down_reason="timed out", cluster_nodes=lines)
    assert "TotalNodes=0" in format_partition_details(down, [])


def test_the_docs_example_inventory_loads(tmp_path: Path) -> None:
    from docexamples import yaml_block_with

    example = yaml_block_with("slurm-cluster.md", "identity_file: ~/.ssh/gbatch_uni")
    key = tmp_path / "gbatch_uni"
    key.write_text("key\n")
    nodes = "nodes:\n  - {name: gpu01, host: gpu01.lab}\n  - {name: gpu02, host: gpu02.lab}\n"
    path = tmp_path / "inventory.yaml"
    path.write_text(nodes + example.replace("~/.ssh/gbatch_uni", str(key)))
    uni = load_inventory(path, home=tmp_path).partitions[1]
    assert uni.slurm is not None and (uni.slurm.account, uni.slurm.max_jobs) == ("lab123", 200)


def test_a_requeued_cluster_job_is_cancelled_there_and_sent_again(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store)
    step.mirror(T0 + 1)
    (first,) = cluster.jobs
    cluster.set(first, "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    store.set_state(
        job_id,
        JobState.COMPLETING,
        "requeue requested by alice",
        T0 + 3,
        stop_state=JobState.PENDING,
    )
    step.mirror(T0 + 4)  # scancel there
    step.mirror(T0 + 5)  # its end seen: back in the queue, then sent again
    assert cluster.jobs[first].state == "CANCELLED"
    job = store.require(job_id)
    assert (job.state, job.node, job.end_time) == (JobState.PENDING, None, None)
    assert len(cluster.jobs) == 2
    row = store.cluster_job(job_id)
    assert row is not None and row.attempt == 2 and row.marker.endswith(f":{job_id}.2")


def test_a_job_cancelled_here_while_a_pass_mirrors_it_is_cancelled_there_next_pass(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store)
    step.mirror(T0 + 1)
    (backend_id,) = cluster.jobs
    cluster.set(backend_id, "RUNNING", nodes="c01")
    stale = store.cluster_jobs("uni")  # read before the cancel below
    store.cancel_pending([job_id], "cancelled by alice", T0 + 2)
    with monkeypatch.context() as patched:
        patched.setattr(store, "cluster_jobs", lambda name: stale)
        step.mirror(T0 + 3)  # its start is refused: the job is no longer pending
    assert store.require(job_id).state is JobState.CANCELLED
    step.mirror(T0 + 4)
    assert cluster.jobs[backend_id].state == "CANCELLED"


def test_shell_text_in_a_jobs_command_env_and_name_stays_words() -> None:
    import shlex

    from gbatch.nodes.cluster import sbatch_argv

    evil = "$(touch /tmp/pwned); `id`"
    job = _job(name=evil, command=("/bin/sh", "-c", evil, "x"), env=(("A", evil), ("B;C", "x")))
    lines = batch_script(job).decode().splitlines()
    assert lines[2] == f"export A={shlex.quote(evil)}" and "B;C" not in "".join(lines)
    assert shlex.split(lines[-1]) == ["exec", "/bin/sh", "-c", evil, "x"]
    argv = sbatch_argv(job, CLUSTER, "gbatch:h:7.1")
    assert shlex.split(shlex.join(argv)) == argv and f"--job-name={evil}" in argv


def test_hold_and_release_of_a_sent_job_are_forwarded_once_each(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    jobs = _submit(store, 2)
    step.mirror(T0 + 1)
    for job_id in jobs:
        store.set_held(job_id, True, T0 + 2)
    step.mirror(T0 + 3)
    step.mirror(T0 + 4)
    assert cluster.calls["hold"] == 1
    assert {o.reason for o in cluster.jobs.values()} == {"JobHeldUser"}
    assert {store.require(j).reason for j in jobs} == {"JobHeldUser"}
    store.set_held(jobs[0], False, T0 + 5)
    step.mirror(T0 + 6)
    step.mirror(T0 + 7)
    assert cluster.calls["release"] == 1
    assert store.require(jobs[0]).reason == "Priority"
    assert store.require(jobs[1]).reason == "JobHeldUser"
