"""A run's GPU samples: one report folded into a sample, samples folded into one record
per run in the store (sums and maxima, never a series), and how seff and sacct print it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from gbatch.core.gpuusage import GpuUsage, sample, seff_lines, tres_usage
from gbatch.core.model import Gpu, Job, JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.store import Store
from gbatch.render.reports import format_seff
from gbatch.render.sacct import format_sacct

GIB = 1024


def gpu(index: int, util: int | None, used_mib: int, total_mib: int = 80 * GIB) -> Gpu:
    return Gpu(index, f"GPU-{index}", "Simulated GPU", total_mib, used_mib, util)


def test_a_sample_is_the_runs_gpus_only_util_averaged_memory_summed() -> None:
    report = [gpu(0, 90, 10 * GIB), gpu(1, 30, 2 * GIB), gpu(2, 100, 70 * GIB)]
    assert sample(report, (0, 1)) == GpuUsage(
        samples=1,
        util_samples=1,
        util_sum=60.0,
        util_max=90,
        mem_max_mib=12 * GIB,
        mem_total_mib=160 * GIB,
    )
    assert sample(report, (5,)) is None  # its GPU is not in this report


def test_a_gpu_that_does_not_report_utilisation_leaves_the_sample_without_one() -> None:
    usage = sample([gpu(0, None, GIB), gpu(1, 40, GIB)], (0, 1))
    assert usage is not None
    assert (usage.samples, usage.util_samples, usage.util_mean) == (1, 0, None)
    assert seff_lines(usage)[0] == "GPU Utilization: not measured (the GPUs do not report it)"


def test_samples_merge_into_sums_and_maxima() -> None:
    first = sample([gpu(0, 20, 11 * GIB)], (0,))
    second = sample([gpu(0, 98, 3 * GIB)], (0,))
    assert first is not None and second is not None
    both = first.merged(second)
    assert (both.samples, both.util_sum, both.util_max, both.mem_max_mib) == (2, 118.0, 98, 11264)
    assert both.util_mean == 59.0
    assert GpuUsage.from_wire(both.to_wire()) == both


def test_the_store_folds_each_poll_into_one_row_per_run(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    try:
        (job_id,) = store.submit([JobSpec(name="j", command=("true",))], 1, "alice", 0.0)
        polls = [
            [gpu(0, 10, 1 * GIB), gpu(1, 50, 5 * GIB)],
            [gpu(0, 70, 9 * GIB), gpu(1, 90, 1 * GIB)],
            [gpu(0, 0, 0), gpu(1, 0, 0)],
        ]
        expected = None
        for poll in polls:
            one = sample(poll, (0, 1))
            assert one is not None
            # attempt 2 is another run of the same job: kept apart
            store.add_gpu_samples([(job_id, 1, one), (job_id, 2, one)])
            expected = one if expected is None else expected.merged(one)
        store.add_gpu_samples([])  # a poll with no run on GPUs writes nothing
        usage = store.gpu_usage([(job_id, 1), (job_id, 3)])
        assert list(usage) == [(job_id, 1)]
        assert usage[(job_id, 1)] == expected
        assert usage[(job_id, 1)].util_mean == (30 + 80 + 0) / 3
        assert usage[(job_id, 1)].mem_max_mib == 10 * GIB
    finally:
        store.close()


def ran(gpus: int = 1) -> Job:
    return Job(
        id=7,
        uid=4242,
        user="alice",
        spec=JobSpec(name="j", command=("true",), gpus=gpus),
        state=JobState.COMPLETED,
        submit_time=0.0,
        start_time=10.0,
        end_time=70.0,
        node="local",
        gpus=tuple(range(gpus)),
        attempt=1,
    )


USAGE = GpuUsage(
    samples=12,
    util_samples=12,
    util_sum=758.4,
    util_max=98,
    mem_max_mib=11469,
    mem_total_mib=80 * GIB,
)


def test_seff_prints_mean_and_max_utilisation_and_peak_memory() -> None:
    text = format_seff(ran(), 100.0, cluster="head", group="lab", gpu_usage=USAGE)
    assert text.splitlines()[-2:] == [
        "GPU Utilization: 63.2% (mean over 12 samples), max 98%",
        "GPU Memory: max 11.20 GiB of 80.00 GiB",
    ]
    bare = format_seff(ran(), 100.0, cluster="head", group="lab")
    assert bare.splitlines()[-2:] == ["GPU Utilization: not measured", "GPU Memory: not measured"]


def test_sacct_tres_usage_in_max_names_slurms_gpu_tres() -> None:
    assert tres_usage(USAGE) == "gres/gpumem=11.20G,gres/gpuutil=98"
    assert tres_usage(None) == ""
    fields = ["JobID", "TRESUsageInMax%40"]
    out = format_sacct([ran(), ran()], 100.0, fields=fields, parsable=True, gpu_usage={7: USAGE})
    assert out.splitlines() == [
        "JobID|TRESUsageInMax",
        "7|gres/gpumem=11.20G,gres/gpuutil=98",
        "7|gres/gpumem=11.20G,gres/gpuutil=98",
    ]
    none = format_sacct([ran()], 100.0, fields=["JobID", "TRESUsageInMax"], parsable=True)
    assert none.splitlines() == ["JobID|TRESUsageInMax", "7|"]


class ReportingNode:
    """What the daemon's sampling asks of a node: its latest report and its number."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.report_seq = 0
        self.cards: tuple[Gpu, ...] = ()

    def publish(self, *gpus: Gpu) -> None:
        self.cards = gpus
        self.report_seq += 1

    def report(self) -> tuple[SimpleNamespace, str]:
        return SimpleNamespace(gpus=self.cards), ""

    def gpus(self, report: SimpleNamespace) -> tuple[Gpu, ...]:
        return tuple(report.gpus)

    def run_owners(self, report: SimpleNamespace) -> dict[tuple[int, int], object]:
        return {}  # no process of a run listed: their own memory is not measured


def test_the_daemon_samples_each_new_report_once_for_the_running_jobs_on_its_node(
    daemon: Daemon,
) -> None:
    node = ReportingNode("gpu01")
    daemon.fleet.nodes = {"gpu01": node}  # type: ignore[dict-item]
    store = daemon.store
    spec = JobSpec(name="j", command=("true",), gpus=1)
    running, waiting = store.submit([spec, spec], 1, "alice", 0.0)
    store.set_state(running, JobState.CONFIGURING, "", 1.0, node="gpu01", gpus=(1,), attempt=1)
    store.set_state(running, JobState.RUNNING, "", 1.0, start_time=1.0)

    node.publish(gpu(0, 100, 50 * GIB), gpu(1, 40, 2 * GIB))
    daemon.sample_gpus(2.0)
    daemon.sample_gpus(2.0)  # no new report: nothing counted twice
    node.publish(gpu(0, 100, 50 * GIB), gpu(1, 80, 6 * GIB))
    daemon.sample_gpus(2.0)

    usage = store.gpu_usage([(running, 1), (waiting, 0), (waiting, 1)])
    assert list(usage) == [(running, 1)]  # only the running job, only its GPU 1
    assert usage[(running, 1)] == GpuUsage(2, 2, 120.0, 80, 6 * GIB, 80 * GIB)


# -- a job across nodes (issue 32): every node's GPUs are its GPUs -------------------------


def across(store: Store, spec: JobSpec | None = None) -> int:
    """A RUNNING job across nodes: GPU 1 of gpu01 (its first node) and GPU 0 of gpu02."""
    spec = spec or JobSpec(name="j", command=("true",), gpus=1, nodes=2, image="img")
    (job_id,) = store.submit([spec], 1, "alice", 0.0)
    store.set_state(
        job_id,
        JobState.CONFIGURING,
        "",
        1.0,
        node="gpu01",
        gpus=(1,),
        attempt=1,
        peers=(("gpu02", (0,)),),
    )
    store.set_state(job_id, JobState.RUNNING, "", 1.0, start_time=1.0)
    return job_id


def test_the_running_gpus_of_a_job_across_nodes_are_every_nodes(tmp_path: Path) -> None:
    """running_gpus listed a job across nodes on its first node only: its peers' GPUs
    were never sampled, nor watched by the idle_gpu policy."""
    store = Store(tmp_path / "store.db")
    try:
        job_id = across(store)
        rows = [(r.job_id, r.attempt, r.node, r.gpus) for r in store.running_gpus()]
        assert rows == [(job_id, 1, "gpu01", (1,)), (job_id, 1, "gpu02", (0,))]
    finally:
        store.close()


def test_a_job_across_nodes_is_sampled_on_all_its_nodes_as_one_run(daemon: Daemon) -> None:
    """One sample per poll for the run, over its GPUs on every node: seff's memory is
    what they held together, its utilisation their mean. The first node alone was read."""
    first, peer = ReportingNode("gpu01"), ReportingNode("gpu02")
    daemon.fleet.nodes = {"gpu01": first, "gpu02": peer}  # type: ignore[dict-item]
    job_id = across(daemon.store)

    first.publish(gpu(0, 100, 50 * GIB), gpu(1, 40, 2 * GIB))
    peer.publish(gpu(0, 80, 6 * GIB), gpu(1, 0, 70 * GIB))  # its GPU 1 is not the job's
    daemon.sample_gpus(2.0)
    daemon.sample_gpus(2.0)  # no new report: nothing counted twice
    usage = daemon.store.gpu_usage([(job_id, 1)])[(job_id, 1)]
    assert usage == GpuUsage(1, 1, 60.0, 80, 8 * GIB, 160 * GIB)

    # News of one node is news of the run: sampled with the other's latest readings.
    peer.publish(gpu(0, 100, 10 * GIB), gpu(1, 0, 70 * GIB))
    daemon.sample_gpus(3.0)
    usage = daemon.store.gpu_usage([(job_id, 1)])[(job_id, 1)]
    assert usage == GpuUsage(2, 2, 130.0, 100, 12 * GIB, 160 * GIB)
