"""GPU memory budgets: which processes of a report are a run's (its session, its container),
what they use, the over-budget streaks with the clock passed in (warned once, stopped after
the grace under `kill`, a spike within it only warned), and how the measurement is shown."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from oracles import outbox
from test_node_loss_rules import Clocks, FakeNode

from gbatch.core.gpuusage import (
    GpuUsage,
    max_gpu_mem,
    own_memory_fields,
    sample,
    seff_lines,
    tres_usage,
)
from gbatch.core.model import GPU_MEM_EVENT, Gpu, Job, JobSpec, JobState, NotifyHook
from gbatch.head import notify
from gbatch.head.daemon import Daemon
from gbatch.head.gpubudget import (
    BUDGET_REASON,
    WARN_REASON,
    OverStreaks,
    Reading,
    stop_reason,
    warn_reason,
)
from gbatch.head.store import Store
from gbatch.jobspec.slurmopts import check_notify
from gbatch.nodes.local import LocalNode
from gbatch.nodes.report import (
    ContainerReport,
    GpuReport,
    NodeReport,
    ProcessReport,
    RunOwner,
    container_owners,
    gbatch_container_ids,
    run_gpu_memory,
    to_gpus,
)
from gbatch.site.config import Config, ConfigError, Paths, Webhook, _validate

GIB = 1024
RUN = (7, 1)
CONTAINER = "c0ffee" + "0" * 58  # a full docker id


def gpu(index: int, *processes: ProcessReport) -> GpuReport:
    return GpuReport(index, f"GPU-{index}", "NVIDIA A100", 80 * GIB, 0, 0, True, processes)


def proc(
    pid: int, mib: int | None, sid: int | None = None, container: str | None = None
) -> ProcessReport:
    return ProcessReport(pid, sid, mib, container)


def report(*gpus: GpuReport, containers: tuple[ContainerReport, ...] = ()) -> NodeReport:
    return NodeReport(1, 0.0, "host", "simulation", "", gpus, None, containers)


def container(job: int, attempt: int, node: str | None) -> ContainerReport:
    return ContainerReport(
        CONTAINER, f"gbatch-{job}-{attempt}", job, attempt, "alice", "running", None, False,
        1.0, None, node,
    )  # fmt: skip


# -- attribution ----------------------------------------------------------------------


def test_a_runs_memory_is_its_own_processes_on_its_gpus_only() -> None:
    bare = RunOwner(sessions=frozenset({500}))
    shown = report(
        gpu(
            0,
            proc(501, 3 * GIB, sid=500),  # the job's, in its shim's session
            proc(502, 2 * GIB, sid=500),
            proc(900, 40 * GIB, sid=900),  # another job's or a stranger's
            proc(503, None, sid=500),  # the driver cannot tell: counts 0
        ),
        gpu(1, proc(504, 7 * GIB, sid=500)),  # the job's, on a GPU it does not hold
    )
    assert run_gpu_memory(shown, (0,), bare) == 5 * GIB
    assert run_gpu_memory(shown, (0, 1), bare) == 12 * GIB
    assert run_gpu_memory(shown, (0,), RunOwner(sessions=frozenset({77}))) is None  # none listed
    assert run_gpu_memory(shown, (3,), bare) is None  # not in this report


def test_a_container_runs_processes_are_known_by_its_id_full_or_short() -> None:
    owners = container_owners(report(containers=(container(7, 1, "gpu01"),)), "gpu01")
    assert owners == {RUN: RunOwner(containers=frozenset({CONTAINER}))}
    shown = report(
        gpu(0, proc(10, 4 * GIB, container=CONTAINER[:12]), proc(11, GIB, container="beef" * 16))
    )
    assert run_gpu_memory(shown, (0,), owners[RUN]) == 4 * GIB
    # An engine that also serves another head: its containers are no run of this one's.
    assert container_owners(report(containers=(container(7, 1, "gpu02"),)), "gpu01") == {}
    assert RUN in container_owners(report(containers=(container(7, 1, None),)), "gpu01")


def test_the_local_node_knows_a_bare_runs_sessions_from_its_run_directory(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    node = LocalNode(paths, Config(docker=str(tmp_path / "docker")), lambda: None)
    run_dir = paths.runs / "7.1"
    (run_dir / "step.0").mkdir(parents=True)
    (run_dir / "pids.json").write_text(json.dumps({"shim": 4321}))
    (run_dir / "step.0" / "pids.json").write_text(json.dumps({"session": 4400}))
    (paths.runs / "8.2").mkdir()  # started, no pids yet: nothing to know it by
    owners = node.run_owners(report(containers=(container(9, 1, "local"),)))
    assert owners[RUN] == RunOwner(sessions=frozenset({4321, 4400}))
    assert (8, 2) not in owners
    assert owners[(9, 1)].containers == {CONTAINER}


# -- the streaks and the policy -------------------------------------------------------

OVER = Reading(25 * GIB, 20 * GIB)
UNDER = Reading(12 * GIB, 20 * GIB)


def test_a_run_over_its_budget_is_warned_once_then_stopped_after_the_grace() -> None:
    streaks = OverStreaks("kill", 30.0)
    first = streaks.observe([RUN], {RUN: OVER}, 100.0)
    assert (first.warn, first.stop) == ({RUN: (OVER, 100.0)}, {})
    assert streaks.observe([RUN], {}, 120.0).stop == {}  # no report: no news either way
    still = streaks.observe([RUN], {RUN: OVER}, 129.0)
    assert (still.warn, still.flag, still.stop) == ({}, {}, {})
    stopped = streaks.observe([RUN], {RUN: OVER}, 130.0)
    assert stopped.stop == {RUN: (OVER, 30.0)}
    assert streaks.observe([RUN], {RUN: OVER}, 140.0).stop == {}  # stopped once


def test_a_spike_shorter_than_the_grace_is_only_warned_and_told_once_per_run() -> None:
    streaks = OverStreaks("kill", 30.0)
    streaks.observe([RUN], {RUN: OVER}, 0.0)
    back = streaks.observe([RUN], {RUN: UNDER}, 20.0)
    assert back.clear == {RUN}
    again = streaks.observe([RUN], {RUN: OVER}, 40.0)  # a new streak, from 40
    assert (again.warn, again.flag) == ({}, {RUN: (OVER, 40.0)})  # flagged, not told again
    assert streaks.observe([RUN], {RUN: OVER}, 60.0).stop == {}  # 20 s over, not 60
    assert streaks.observe([RUN], {RUN: OVER}, 70.0).stop == {RUN: (OVER, 30.0)}


def test_at_the_budget_is_not_over_it() -> None:
    streaks = OverStreaks("kill", 0.0)
    assert streaks.observe([RUN], {RUN: Reading(20 * GIB, 20 * GIB)}, 0.0).warn == {}
    assert streaks.observe([RUN], {RUN: Reading(20 * GIB + 1, 20 * GIB)}, 1.0).stop == {
        RUN: (Reading(20 * GIB + 1, 20 * GIB), 0.0)
    }  # a grace of 0: stopped at the first report over


def test_the_warn_policy_warns_and_never_stops() -> None:
    streaks = OverStreaks("warn", 30.0)
    assert streaks.observe([RUN], {RUN: OVER}, 0.0).warn == {RUN: (OVER, 0.0)}
    assert streaks.observe([RUN], {RUN: OVER}, 10_000.0).stop == {}


def test_runs_warned_by_an_earlier_daemon_are_not_told_again_and_ended_runs_forgotten() -> None:
    streaks = OverStreaks("kill", 30.0)
    streaks.adopt([RUN])
    over = streaks.observe([RUN], {RUN: OVER}, 0.0)
    assert (over.warn, over.flag) == ({}, {})  # its reason says so already
    assert streaks.observe([RUN], {RUN: UNDER}, 5.0).clear == {RUN}
    streaks.observe([RUN], {RUN: OVER}, 10.0)
    streaks.observe([], {}, 20.0)  # it ended
    later = (7, 2)  # its next run starts afresh
    assert streaks.observe([later], {later: OVER}, 50.0).warn == {later: (OVER, 50.0)}


def test_the_reasons_say_what_was_used_of_what_and_what_comes_next() -> None:
    text = warn_reason(OVER, "2026-01-01T12:00:00", "kill", 30.0)
    assert text == (
        f"{WARN_REASON}: its processes use 25G of its 20G GPU memory budget since "
        "2026-01-01T12:00:00; stopped if still over after 30 s"
    )
    assert warn_reason(OVER, "t", "warn", 30.0).endswith("budget since t")
    assert stop_reason(OVER, 31.4) == (
        f"{BUDGET_REASON}: its processes used 25G of its 20G GPU memory budget for 31 s "
        "(gpu_mem_policy kill)"
    )


# -- the admin's settings -------------------------------------------------------------


def test_the_default_policy_enforces_after_thirty_seconds() -> None:
    assert (Config().gpu_mem_policy, Config().gpu_mem_grace_seconds) == ("kill", 30.0)
    config = _validate({"gpu_mem_policy": "warn", "gpu_mem_grace_seconds": 0}, "cfg")
    assert (config.gpu_mem_policy, config.gpu_mem_grace_seconds) == ("warn", 0.0)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("gpu_mem_policy", "cancel", "is not kill or warn"),
        ("gpu_mem_policy", True, "is not kill or warn"),
        ("gpu_mem_grace_seconds", -1, "is not a number of seconds, 0 or more"),
        ("gpu_mem_grace_seconds", "30s", "is not a number of seconds, 0 or more"),
        ("gpu_mem_grace_seconds", float("inf"), "is not a number of seconds, 0 or more"),
    ],
)
def test_bad_gpu_mem_settings_are_refused_naming_the_key(
    key: str, value: object, says: str
) -> None:
    with pytest.raises(ConfigError, match=f"cfg: {key}: .* {says}. Fix the value"):
        _validate({key: value}, "cfg")


# -- telling the owner ----------------------------------------------------------------


def running(**spec: object) -> Job:
    return Job(
        id=7,
        uid=1000,
        user="alice",
        spec=JobSpec(name="train", command=("true",), gpus=1, **spec),  # type: ignore[arg-type]
        state=JobState.RUNNING,
        submit_time=0.0,
        start_time=10.0,
        node="local",
        gpus=(0,),
        attempt=1,
    )


def test_the_warning_is_mailed_to_the_owner_and_posted_to_webhooks_that_ask() -> None:
    hook = "https://hooks.example.org/alice"
    policy = notify.Policy(mail=True, mail_domain="lab.example", user_prefixes=(hook,))
    asks = NotifyHook(hook, (GPU_MEM_EVENT, "FAIL"), "json")
    told = policy.for_job(running(notify=(asks,)), (GPU_MEM_EVENT,))
    assert told == [
        notify.Delivery(GPU_MEM_EVENT, notify.MAIL, "alice@lab.example"),  # no --mail-type
        notify.Delivery(GPU_MEM_EVENT, "user_webhook/json", hook),
    ]
    default = NotifyHook(hook, ("END", "FAIL"), "json")  # its stop comes as FAIL
    assert policy.for_job(running(notify=(default,)), (GPU_MEM_EVENT,))[1:] == []


def test_a_jobs_webhook_may_ask_for_the_warning_and_its_summary_says_what() -> None:
    (hook,) = check_notify("https://hooks.example.org/x,GPU_MEM_BUDGET,FAIL")
    assert hook.events == (GPU_MEM_EVENT, "FAIL")
    payload = notify.job_payload(running(), GPU_MEM_EVENT, "e1", 70.0)
    assert notify.summary(payload) == (
        "Slurm Job_id=7 Name=train Over its GPU memory budget, Run time 00:01:00"
    )


# -- the measurement as seff, sacct and scontrol show it ------------------------------


def test_a_sample_keeps_what_its_processes_use_now_and_at_most() -> None:
    readings = [gpu(0)]
    first = sample(readings, (0,), 6 * GIB)
    second = sample(readings, (0,), 2 * GIB)
    nothing = sample(readings, (0,))  # a report listing none of its processes
    assert first is not None and second is not None and nothing is not None
    both = first.merged(second)
    assert (both.own_samples, both.own_mem_mib, both.own_mem_max_mib) == (2, 2 * GIB, 6 * GIB)
    gone = both.merged(nothing)
    assert (gone.own_samples, gone.own_mem_mib, gone.own_mem_max_mib) == (2, 0, 6 * GIB)
    assert GpuUsage.from_wire(gone.to_wire()) == gone
    older = GpuUsage.from_wire([3, 3, 90.0, 40, 2048, 81920])  # an older daemon's six values
    assert (older.own_samples, older.own_measured) == (0, False)


USAGE = GpuUsage(12, 12, 758.4, 98, 60 * GIB, 80 * GIB, 12, 1500, 21 * GIB)


def test_the_runs_own_peak_is_sacct_gpumem_and_maxgpumem_once_measured() -> None:
    assert tres_usage(USAGE) == "gres/gpumem=21.00G,gres/gpuutil=98"
    card_only = GpuUsage(12, 12, 758.4, 98, 60 * GIB, 80 * GIB)
    assert tres_usage(card_only) == "gres/gpumem=60.00G,gres/gpuutil=98"  # no process listed
    assert (max_gpu_mem(USAGE), max_gpu_mem(card_only), max_gpu_mem(None)) == ("21G", "", "")


def test_seff_and_scontrol_show_its_processes_memory_and_budget() -> None:
    assert seff_lines(USAGE, 20 * GIB)[2] == (
        "GPU Memory of its processes: max 21.00 GiB (budget 20.00 GiB)"
    )
    card_only = GpuUsage(12, 12, 758.4, 98, 60 * GIB, 80 * GIB)
    assert len(seff_lines(card_only)) == 2  # as before for a job never seen in a process
    assert seff_lines(card_only, 20 * GIB)[2] == (
        "GPU Memory of its processes: not measured (budget 20.00 GiB)"
    )
    assert own_memory_fields(USAGE, running=True) == "GpuMemUsed=1500M GpuMemPeak=21G"
    assert own_memory_fields(USAGE, running=False) == "GpuMemPeak=21G"
    assert own_memory_fields(card_only, running=True) == ""


# -- the daemon: measured from its node's reports, warned, stopped, ended ---------------


class SharedCardNode(FakeNode):
    """A host whose GPU 0 runs the containers of the runs listed in `used` (MiB each)."""

    def __init__(self, name: str, clocks: Clocks) -> None:
        super().__init__(name, clocks)
        self.used: dict[tuple[int, int], int] = {}

    def publish(self, **used: int) -> None:
        """A new report: job `j<ID>`'s run 1 uses `used[...]` MiB."""
        self.used = {(int(key[1:]), 1): mib for key, mib in used.items()}
        self.containers = tuple(container_of(*run, self.name) for run in self.used)
        self.seq += 1
        self.hear()

    def report(self) -> tuple[NodeReport | None, str]:
        base, problem = super().report()
        assert base is not None
        processes = tuple(
            proc(1000 + job, mib, container=container_of(job, attempt, self.name).id)
            for (job, attempt), mib in self.used.items()
        )
        shown = NodeReport(**{**base.__dict__, "gpus": (gpu(0, *processes),)})
        return shown, problem

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        """Its card as the head reads it (the sampling reads these, MIG slices included)."""
        return to_gpus(report, gbatch_sessions=(), gbatch_containers=gbatch_container_ids(report))


def container_of(job: int, attempt: int, node: str) -> ContainerReport:
    made = container(job, attempt, node)
    return ContainerReport(**{**made.__dict__, "id": f"{job:04d}{attempt:04d}" + "a" * 56})


@pytest.fixture
def policed(tmp_path: Path) -> Iterator[tuple[Daemon, SharedCardNode, Clocks]]:
    clocks = Clocks()
    paths = Paths(tmp_path)
    hook = Webhook("ops", "https://hooks.example.org/x", "", (GPU_MEM_EVENT, "FAIL"))
    config = Config(webhooks=(hook,), gpu_mem_policy="kill", gpu_mem_grace_seconds=30.0)
    policy = notify.Policy(mail=True, mail_domain="lab.example", webhooks=(hook,))
    made = Daemon(
        paths,
        config,
        Store(paths.store, policy),
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,
    )
    node = SharedCardNode("gpu01", clocks)
    made.fleet.nodes = {"gpu01": node}
    yield made, node, clocks
    made.committer.close()
    made.store.close()


def on_gpu0(daemon: Daemon, clocks: Clocks, **spec: object) -> int:
    job_spec = JobSpec(name="nb", command=("python",), image="img", gpus=1, **spec)  # type: ignore[arg-type]
    (job_id,) = daemon.store.submit([job_spec], 0, "alice", clocks.wall)
    daemon.store.set_state(
        job_id, JobState.CONFIGURING, "", clocks.wall, node="gpu01", gpus=(0,), attempt=1
    )
    daemon.store.set_state(job_id, JobState.RUNNING, "", clocks.wall, start_time=clocks.wall)
    return job_id


def test_a_shared_job_over_its_budget_is_warned_then_stopped_out_of_memory_not_retried(
    policed: tuple[Daemon, SharedCardNode, Clocks],
) -> None:
    daemon, node, clocks = policed
    store = daemon.store
    greedy = on_gpu0(daemon, clocks, gpu_mem_mb=20 * GIB, retries=2)
    modest = on_gpu0(daemon, clocks, gpu_mem_mb=20 * GIB)
    whole = on_gpu0(daemon, clocks)  # no budget: measured, never policed

    def tick(seconds: float, **used: int) -> None:
        clocks.wall += seconds
        clocks.mono += seconds
        node.publish(**used)
        daemon.sample_gpus(clocks.wall)

    tick(0, **{f"j{greedy}": 12 * GIB, f"j{modest}": 10 * GIB, f"j{whole}": 50 * GIB})
    assert [store.require(j).reason for j in (greedy, modest, whole)] == ["", "", ""]
    tick(5, **{f"j{greedy}": 25 * GIB, f"j{modest}": 10 * GIB, f"j{whole}": 50 * GIB})
    warned = store.require(greedy)
    assert warned.state is JobState.RUNNING
    assert warned.reason.startswith(f"{WARN_REASON}: its processes use 25G of its 20G ")
    assert store.events(greedy)[-1].reason == warned.reason  # in its history
    told = [(r["kind"], r["channel"], r["target"]) for r in outbox(store, greedy)]
    assert told == [
        (GPU_MEM_EVENT, "mail", "alice@lab.example"),
        (GPU_MEM_EVENT, "webhook", "ops"),
    ]
    tick(29, **{f"j{greedy}": 26 * GIB, f"j{modest}": 10 * GIB, f"j{whole}": 50 * GIB})
    assert store.require(greedy).state is JobState.RUNNING  # 29 s over: within the grace
    tick(1, **{f"j{greedy}": 26 * GIB, f"j{modest}": 10 * GIB, f"j{whole}": 50 * GIB})
    stopping = store.require(greedy)
    assert (stopping.state, stopping.stop_state) == (JobState.COMPLETING, JobState.OUT_OF_MEMORY)
    assert stopping.reason == (
        f"{BUDGET_REASON}: its processes used 26G of its 20G GPU memory budget for 30 s "
        "(gpu_mem_policy kill)"
    )
    daemon.enforce_limits(clocks.wall)
    assert node.signals == [(greedy, 1, signal.SIGTERM)]
    node.run_state = "exited"  # it died of the SIGTERM; the others' runs too, by this fake
    daemon.collect_ended_runs(clocks.wall)
    ended = store.require(greedy)
    assert (ended.state, ended.reason) == (JobState.OUT_OF_MEMORY, BUDGET_REASON)  # no retry
    kinds = [(r["kind"], r["channel"]) for r in outbox(store, greedy)]
    assert ("FAIL", "webhook") in kinds
    usage = store.gpu_usage([(greedy, 1), (modest, 1), (whole, 1)])
    assert usage[(greedy, 1)].own_mem_max_mib == 26 * GIB
    assert usage[(whole, 1)].own_mem_max_mib == 50 * GIB  # measured all the same
    assert outbox(store, modest) == [] and outbox(store, whole) == []


def test_under_the_warn_policy_an_over_job_only_warned_runs_on(tmp_path: Path) -> None:
    clocks = Clocks()
    paths = Paths(tmp_path)
    config = Config(gpu_mem_policy="warn", gpu_mem_grace_seconds=1.0)
    daemon = Daemon(paths, config, Store(paths.store), clock=lambda: clocks.wall)
    node = SharedCardNode("gpu01", clocks)
    daemon.fleet.nodes = {"gpu01": node}
    try:
        job = on_gpu0(daemon, clocks, gpu_mem_mb=GIB)
        for _ in range(5):
            clocks.wall += 10
            node.publish(**{f"j{job}": 2 * GIB})
            daemon.sample_gpus(clocks.wall)
        running = daemon.store.require(job)
        assert running.state is JobState.RUNNING and running.reason.startswith(WARN_REASON)
        assert "stopped if" not in running.reason
        clocks.wall += 10
        node.publish(**{f"j{job}": GIB // 2})  # back under: the flag goes
        daemon.sample_gpus(clocks.wall)
        assert daemon.store.require(job).reason == ""
    finally:
        daemon.committer.close()
        daemon.store.close()


class PeerCardNode(SharedCardNode):
    """A job across nodes' other node: its run's container is `gbatch-J-A-n1` there."""

    def publish(self, **used: int) -> None:
        super().publish(**used)
        self.containers = tuple(
            ContainerReport(**{**c.__dict__, "name": f"{c.name}-n1"}) for c in self.containers
        )


def test_a_job_across_nodes_own_gpu_memory_counts_its_processes_on_every_node(
    policed: tuple[Daemon, SharedCardNode, Clocks],
) -> None:
    """sacct's MaxGpuMem and TRESUsageInMax, seff and scontrol read its processes on its
    first node only; the peer's run is gbatch's own there (not a stranger's process)."""
    daemon, first, clocks = policed
    peer = PeerCardNode("gpu02", clocks)
    daemon.fleet.nodes = {"gpu01": first, "gpu02": peer}
    spec = JobSpec(name="ddp", command=("python",), image="img", gpus=1, nodes=2)
    (job_id,) = daemon.store.submit([spec], 0, "alice", clocks.wall)
    daemon.store.set_state(
        job_id,
        JobState.CONFIGURING,
        "",
        clocks.wall,
        node="gpu01",
        gpus=(0,),
        attempt=1,
        peers=(("gpu02", (0,)),),
    )
    daemon.store.set_state(job_id, JobState.RUNNING, "", clocks.wall, start_time=clocks.wall)
    first.publish(**{f"j{job_id}": 3 * GIB})
    peer.publish(**{f"j{job_id}": 5 * GIB})
    daemon.sample_gpus(clocks.wall)
    usage = daemon.store.gpu_usage([(job_id, 1)])[(job_id, 1)]
    assert (usage.own_samples, usage.own_mem_mib, usage.own_mem_max_mib) == (1, 8 * GIB, 8 * GIB)
    assert max_gpu_mem(usage) == "8G"
    assert tres_usage(usage).startswith("gres/gpumem=8.00G")
    shown, _ = peer.report()
    assert shown is not None
    assert [g.foreign_processes for g in peer.gpus(shown)] == [0]
    assert notify.node_conditions(peer.gpus(shown), None) == {}  # no GPU_FOREIGN told
    assert daemon.store.require(job_id).state is JobState.RUNNING


def test_an_idle_flag_going_leaves_a_budget_warning_in_place() -> None:
    """The idle and budget flags share the job's reason: the idle one going away used to
    clear whatever the reason was, a GPU memory budget warning included."""
    from dataclasses import dataclass

    from gbatch.head import idlegpu
    from gbatch.head.loop.gpus import GpuSampler
    from gbatch.head.store.usage import RunningGpus
    from gbatch.site.config import Config, IdleGpuPolicy

    @dataclass
    class Reading:
        index: int
        memory_total_mib: int = 81920
        memory_used_mib: int = 30000
        utilization_pct: int | None = 90  # busy: the idle flag goes

    class Store:
        reason = "GpuMemOverBudget: its processes use 25G of its 20G GPU memory budget"

        def jobs_in(self, states: object) -> list[object]:
            return []

        def set_running_reason(
            self, job_id: int, attempt: int, reason: str, *, replacing: str = ""
        ) -> bool:
            if not self.reason.startswith(replacing):
                return False
            self.reason = reason
            return True

    store = Store()
    config = Config(idle_gpu=IdleGpuPolicy(after_minutes=1.0))
    sampler = GpuSampler(store, None, config, None)  # type: ignore[arg-type]
    assert sampler._idle is not None
    sampler._idle.adopt([(7, 1)])  # flagged idle by an earlier pass
    sampler._idle_adopted = True
    running = [RunningGpus(7, 1, "n", (0,), 20480)]
    sampler._watch_idle(running, {(7, 1): [([Reading(0)], (0,))]}, 1000.0)
    assert store.reason.startswith("GpuMemOverBudget"), store.reason
    store.reason = idlegpu.IDLE_REASON + ": all GPUs under 5% since then"
    sampler._idle.adopt([(7, 1)])
    sampler._watch_idle(running, {(7, 1): [([Reading(0)], (0,))]}, 2000.0)
    assert store.reason == ""
