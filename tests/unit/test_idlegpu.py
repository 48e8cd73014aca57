"""Idle GPU hoarders: a run's idle streak from the reports' readings (with the clock
passed in), its flag, its owner told once, and the policy's cancel after the grace."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracles import outbox
from test_gpuusage import GIB, ReportingNode, gpu

from gbatch.core.model import JobSpec, JobState
from gbatch.core.paths import Paths
from gbatch.head.daemon import Daemon
from gbatch.head.idlegpu import IdleStreaks, all_idle, all_idle_across, cancel_reason
from gbatch.head.notify import Policy
from gbatch.head.store import Store
from gbatch.site.config import ConfigError, IdleGpuPolicy, _validate

POLICY = IdleGpuPolicy(threshold_percent=5, after_minutes=10, cancel_after_minutes=30)
RUN = (7, 1)


def test_a_run_is_idle_only_when_every_one_of_its_gpus_reads_under_the_threshold() -> None:
    report = [gpu(0, 0, GIB), gpu(1, 4, GIB), gpu(2, 90, GIB), gpu(3, None, GIB)]
    assert all_idle(report, (0, 1), 5) is True
    assert all_idle(report, (0, 2), 5) is False  # one busy GPU keeps the run busy
    assert all_idle(report, (1,), 4) is False  # the threshold itself is not under it
    assert all_idle(report, (0, 3), 5) is False  # a GPU that cannot tell is never idle
    assert all_idle(report, (9,), 5) is None  # not in this report: no news


def test_a_streak_is_flagged_after_the_wait_and_once_per_episode() -> None:
    streaks = IdleStreaks(POLICY)
    assert streaks.observe([RUN], {RUN: True}, 100.0).flag == {}
    assert streaks.since(RUN) == 100.0
    assert streaks.observe([RUN], {}, 500.0).flag == {}  # no report: the streak goes on
    assert streaks.observe([RUN], {RUN: True}, 700.0).flag == {RUN: 100.0}
    assert streaks.observe([RUN], {RUN: True}, 800.0).flag == {}  # flagged once
    busy = streaks.observe([RUN], {RUN: False}, 900.0)
    assert busy.clear == {RUN} and streaks.since(RUN) is None
    streaks.observe([RUN], {RUN: True}, 1000.0)
    assert streaks.observe([RUN], {RUN: True}, 1600.0).flag == {RUN: 1000.0}  # a new episode


def test_activity_or_an_unreadable_gpu_resets_the_streak_before_the_flag() -> None:
    streaks = IdleStreaks(POLICY)
    streaks.observe([RUN], {RUN: True}, 0.0)
    verdicts = streaks.observe([RUN], {RUN: False}, 300.0)
    assert (verdicts.clear, streaks.since(RUN)) == (frozenset(), None)  # never flagged
    streaks.observe([RUN], {RUN: True}, 400.0)
    assert streaks.observe([RUN], {RUN: True}, 900.0).flag == {}  # 500 s: under 600 s


def test_the_policy_cancels_once_after_the_grace_counted_from_the_streaks_start() -> None:
    streaks = IdleStreaks(POLICY)
    streaks.observe([RUN], {RUN: True}, 0.0)
    assert streaks.observe([RUN], {RUN: True}, 1799.0).cancel == {}
    assert streaks.observe([RUN], {RUN: True}, 1800.0).cancel == {RUN: 1800.0}
    assert streaks.observe([RUN], {RUN: True}, 1900.0).cancel == {}
    assert cancel_reason(3600.0) == "cancelled: GPUs idle for 60 min (idle_gpu policy)"
    assert cancel_reason(4.0) == "cancelled: GPUs idle for 4 s (idle_gpu policy)"


def test_without_cancel_after_minutes_nothing_is_cancelled_and_ended_runs_are_forgotten() -> None:
    streaks = IdleStreaks(IdleGpuPolicy(after_minutes=1))
    streaks.observe([RUN], {RUN: True}, 0.0)
    assert streaks.observe([RUN], {RUN: True}, 1e9).cancel == {}
    streaks.observe([], {}, 1e9 + 1)
    assert streaks.since(RUN) is None


def test_runs_flagged_before_a_restart_are_not_flagged_again_but_cleared() -> None:
    streaks = IdleStreaks(POLICY)
    streaks.adopt([RUN])
    streaks.observe([RUN], {RUN: True}, 0.0)
    assert streaks.observe([RUN], {RUN: True}, 700.0).flag == {}
    assert streaks.observe([RUN], {RUN: False}, 800.0).clear == {RUN}


def test_idle_gpu_config_defaults_to_flagging_only_and_is_checked() -> None:
    assert _validate({}, "cfg").idle_gpu == IdleGpuPolicy(5.0, 30.0, None)
    assert _validate({"idle_gpu": False}, "cfg").idle_gpu is None
    short = _validate({"idle_gpu": {"after_minutes": 0.05, "cancel_after_minutes": 0.1}}, "c")
    assert short.idle_gpu is not None and short.idle_gpu.cancel_after_seconds == 6.0
    for bad in (
        {"after_minutes": 0},
        {"threshold_percent": 101},
        {"after_minutes": 30, "cancel_after_minutes": 10},
        {"after": 3},
        "yes",
    ):
        with pytest.raises(ConfigError, match="idle_gpu"):
            _validate({"idle_gpu": bad}, "cfg")
    hooks = [{"name": "ops", "url": "https://ops.example/h", "events": ["IDLE_GPU"]}]
    assert _validate({"webhooks": hooks}, "cfg").webhooks[0].events == ("IDLE_GPU",)


@pytest.fixture
def watched(tmp_path: Path) -> Daemon:
    paths = Paths(tmp_path)
    notify = Policy(mail=True, mail_domain="lab.example")
    store = Store(paths.store, notify=notify)
    clock = [0.0]
    config = _validate({"idle_gpu": {"after_minutes": 10, "cancel_after_minutes": 30}}, "cfg")
    made = Daemon(paths, config, store, clock=lambda: clock[0])
    yield made
    made.committer.close()
    store.close()


def test_the_daemon_flags_tells_the_owner_once_clears_and_cancels_an_idle_run(
    watched: Daemon,
) -> None:
    node = ReportingNode("gpu01")
    watched.fleet.nodes = {"gpu01": node}  # type: ignore[dict-item]
    store = watched.store
    (job_id,) = store.submit([JobSpec(name="j", command=("true",), gpus=1)], 1, "alice", 0.0)
    store.set_state(job_id, JobState.CONFIGURING, "", 1.0, node="gpu01", gpus=(1,), attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", 1.0, start_time=1.0)

    def tick(now: float, util: int | None) -> str:
        node.publish(gpu(0, 100, GIB), gpu(1, util, GIB))
        watched.sample_gpus(now)
        return store.require(job_id).reason

    assert tick(0.0, 0) == ""
    assert tick(600.0, 3).startswith("IdleGPU: all GPUs under 5% since ")
    assert store.idle_flagged_count("IdleGPU") == 1
    tick(700.0, 0)
    told = [(r["kind"], r["channel"], r["target"]) for r in outbox(store, job_id)]
    assert told == [("IDLE_GPU", "mail", "alice@lab.example")]  # once, without --mail-type
    assert tick(800.0, 60) == ""  # working again: the flag goes
    assert tick(900.0, None) == ""  # a GPU that cannot tell starts no streak
    tick(1000.0, 0)
    tick(1600.0, 0)
    assert len(outbox(store, job_id)) == 1  # a second episode is not told again
    tick(2800.0, 0)
    job = store.require(job_id)
    assert (job.state, job.stop_state) == (JobState.COMPLETING, JobState.CANCELLED)
    assert job.reason == "cancelled: GPUs idle for 30 min (idle_gpu policy)"


def test_a_run_across_nodes_is_idle_only_when_its_gpus_on_every_node_are() -> None:
    first = [gpu(0, 100, GIB), gpu(1, 2, GIB)]  # its GPU 1 here is idle
    busy, idle = [gpu(0, 90, GIB)], [gpu(0, 0, GIB)]
    assert all_idle_across([(first, (1,)), (busy, (0,))], 5) is False
    assert all_idle_across([(first, (1,)), (idle, (0,))], 5) is True
    # A node that tells nothing of its GPUs (silent, or they vanished): no news...
    assert all_idle_across([(first, (1,)), (None, (0,))], 5) is None
    assert all_idle_across([(first, (1,)), ([gpu(3, 0, GIB)], (0,))], 5) is None
    # ...unless another node's GPU is busy.
    assert all_idle_across([(busy, (0,)), (None, (0,))], 5) is False


def test_the_daemon_never_flags_a_run_across_nodes_busy_on_a_peer(watched: Daemon) -> None:
    """The idle_gpu policy read a job across nodes' first node only: a job training on its
    other nodes while its first one waited was flagged, then cancelled."""
    first, peer = ReportingNode("gpu01"), ReportingNode("gpu02")
    watched.fleet.nodes = {"gpu01": first, "gpu02": peer}  # type: ignore[dict-item]
    store = watched.store
    spec = JobSpec(name="j", command=("true",), gpus=1, nodes=2, image="img")
    (job_id,) = store.submit([spec], 1, "alice", 0.0)
    peers = (("gpu02", (0,)),)
    store.set_state(
        job_id, JobState.CONFIGURING, "", 1.0, node="gpu01", gpus=(1,), attempt=1, peers=peers
    )
    store.set_state(job_id, JobState.RUNNING, "", 1.0, start_time=1.0)

    def tick(now: float, util: int, peer_util: int) -> str:
        first.publish(gpu(0, 100, GIB), gpu(1, util, GIB))
        peer.publish(gpu(0, peer_util, GIB), gpu(1, 0, GIB))
        watched.sample_gpus(now)
        return store.require(job_id).reason

    for now in (0.0, 600.0, 1200.0, 1800.0, 2400.0):
        assert tick(now, 0, 90) == ""  # its first node idle, its peer busy
    assert store.require(job_id).state is JobState.RUNNING
    assert tick(3000.0, 0, 0) == ""  # every GPU idle: the streak starts now
    assert tick(3600.0, 0, 1).startswith("IdleGPU: all GPUs under 5% since ")
    assert tick(3700.0, 0, 60) == ""  # its peer works again: the flag goes
