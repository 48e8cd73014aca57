"""Metrics: the daemon's snapshot (handlers' on_metrics against a real store) and its
rendering for Prometheus, read back with prometheus_client's own text-format parser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gbatch.api.metrics import render
from gbatch.core.model import Gpu, JobSpec, NodeInfo, NodeState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.metrics import DaemonMetrics, Histogram
from gbatch.head.store import Store
from gbatch.protocol import codec, requests
from gbatch.site.config import Config, Paths

ROOT = Caller(uid=0, user="root", pid=1)
ALICE = Caller(uid=5001, user="alice", pid=11)
CAROL = Caller(uid=5003, user="carol", pid=33)


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, for every sample of the exposition."""
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def snapshot(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "now": 1000.0,
        "uptime": 10.0,
        "jobs": [],
        "nodes": [],
        "round_trips": {},
        "shares": [],
        "daemon": DaemonMetrics().to_wire(),
    }
    return {**base, **fields}


def test_histogram_buckets_are_cumulative_and_a_bound_holds_its_own_value() -> None:
    h = Histogram((1.0, 10.0))
    for value in (0.5, 1.0, 5.0, 100.0):
        h.observe(value)
    assert h.to_wire() == {"buckets": [[1.0, 2], [10.0, 3], ["+Inf", 4]], "sum": 106.5}


def test_per_gpu_metrics_carry_dcgm_names_and_labels_and_nodes_count_their_gpus() -> None:
    gpus = (
        Gpu(0, "GPU-aaa", "H100", 81559, 40000, utilization_pct=97),
        Gpu(1, "GPU-bbb", "H100", 81559, 0, utilization_pct=None),
        Gpu(2, "GPU-ccc", "H100", 81559, 900, utilization_pct=3, foreign_processes=1),
    )
    node = NodeInfo("gpu1", NodeState.MIXED, gpus=gpus, allocations={0: 42})
    text = render(snapshot(nodes=[codec.node_to_wire(node)], round_trips={"gpu1": [0.004, 2.5]}))
    got = samples(text)
    labels = (("Hostname", "gpu1"), ("UUID", "GPU-aaa"), ("device", "nvidia0"), ("gpu", "0"))
    assert got[("DCGM_FI_DEV_GPU_UTIL", labels)] == 97
    assert got[("DCGM_FI_DEV_FB_USED", labels)] == 40000
    assert got[("DCGM_FI_DEV_FB_FREE", labels)] == 81559 - 40000
    assert got[("gbatch_gpu_allocated", labels)] == 1
    # A device that cannot tell its utilisation has no sample, rather than a made-up 0.
    assert not any(name == "DCGM_FI_DEV_GPU_UTIL" and ("gpu", "1") in key for name, key in got)
    node_label = (("node", "gpu1"),)
    assert got[("gbatch_node_gpus", node_label)] == 3
    assert got[("gbatch_node_gpus_allocated", node_label)] == 1
    assert got[("gbatch_node_gpus_busy_outside", node_label)] == 1
    assert got[("gbatch_node_gpus_free", node_label)] == 1
    assert got[("gbatch_node_state", (("node", "gpu1"), ("state", "mixed")))] == 1
    assert got[("gbatch_node_state", (("node", "gpu1"), ("state", "down")))] == 0
    assert got[("gbatch_ssh_round_trip_seconds", node_label)] == 0.004
    assert got[("gbatch_ssh_round_trip_age_seconds", node_label)] == 2.5


def test_label_values_with_quotes_backslashes_and_newlines_read_back_as_given() -> None:
    # The nodes' and GPUs' lines are written by hand (api/metrics._nodes_text), not by
    # prometheus_client: the official parser must read every label back unchanged.
    odd = 'A100 "SXM4" \\ 40GB\nrev 2'
    gpus = (Gpu(0, 'GPU-"q"\\x', odd, 40000, 10, utilization_pct=5),)
    node = NodeInfo('node "7"\\b', NodeState.IDLE, gpus=gpus)
    text = render(snapshot(nodes=[codec.node_to_wire(node)], round_trips={'node "7"\\b': [0.1, 1]}))
    got = samples(text)
    labels = (
        ("Hostname", 'node "7"\\b'),
        ("UUID", 'GPU-"q"\\x'),
        ("device", "nvidia0"),
        ("gpu", "0"),
    )
    info = (*labels, ("gpu_type", ""), ("model_name", odd), ("simulated", "false"))
    assert got[("gbatch_gpu_info", info)] == 1
    assert got[("DCGM_FI_DEV_GPU_UTIL", labels)] == 5
    assert got[("gbatch_ssh_round_trip_seconds", (("node", 'node "7"\\b'),))] == 0.1


def test_every_family_is_written_once_with_its_type_before_its_samples() -> None:
    node = NodeInfo("gpu1", NodeState.IDLE, gpus=(Gpu(0, "GPU-a", "H100", 80, 0),))
    text = render(
        snapshot(
            nodes=[codec.node_to_wire(node)] * 2,
            round_trips={"gpu1": [0.1, 1]},
            jobs=[["PENDING", "alice", "gpu", 2]],
            shares=[["alice", 10.0, 0.5]],
        )
    ).decode()
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))
    assert {"gbatch_jobs", "DCGM_FI_DEV_FB_USED", "gbatch_fairshare_factor"} <= set(types)
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["DCGM_FI_DEV_FB_USED"] == "gauge"
    assert families["gbatch_node_state"] == "gauge"


def test_daemon_counters_render_as_counters_and_histograms() -> None:
    counted = DaemonMetrics()
    counted.count_submitted(5)
    counted.observe_start(30.0)
    counted.observe_end("COMPLETED", 120.0)
    counted.observe_end("CANCELLED", None)  # never started: counted, no run time
    counted.observe_loop(0.002)
    got = samples(render(snapshot(daemon=counted.to_wire())))
    assert got[("gbatch_jobs_submitted_total", ())] == 5
    assert got[("gbatch_runs_ended_total", (("state", "COMPLETED"),))] == 1
    assert got[("gbatch_runs_ended_total", (("state", "CANCELLED"),))] == 1
    assert got[("gbatch_job_queue_wait_seconds_bucket", (("le", "10.0"),))] == 0
    assert got[("gbatch_job_queue_wait_seconds_bucket", (("le", "60.0"),))] == 1
    assert got[("gbatch_job_queue_wait_seconds_count", ())] == 1
    assert got[("gbatch_job_run_seconds_sum", ())] == 120.0
    assert got[("gbatch_job_run_seconds_count", ())] == 1
    assert got[("gbatch_loop_duration_seconds_bucket", (("le", "0.005"),))] == 1
    assert got[("gbatch_loop_last_duration_seconds", ())] == 0.002


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    yield from _daemon(tmp_path)


def _daemon(tmp_path: Path, **config: Any) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2, **config), store)
    yield made
    made.committer.close()
    store.close()


def submit(daemon: Daemon, caller: Caller, **spec: Any) -> dict[str, Any]:
    job = JobSpec(name="j", command=("true",), **spec).to_dict()
    reply = handle(daemon, caller, {"op": "submit", "spec": job, "held": True})
    assert reply["ok"], reply
    return reply


def test_the_snapshot_counts_queued_jobs_by_state_user_and_partition(daemon: Daemon) -> None:
    submit(daemon, ALICE)
    submit(daemon, ALICE)
    # An array past the rows kept as jobs: its tail's tasks count one each.
    reply = handle(
        daemon,
        CAROL,
        {"op": "submit", "spec": JobSpec(name="a", command=("true",)).to_dict(), "count": 100},
    )
    assert reply["ok"], reply
    snap = handle(daemon, ALICE, requests.encode_request(requests.Metrics()))
    assert snap["ok"], snap
    jobs = {(state, user): n for state, user, _, n in snap["jobs"]}
    assert jobs == {("PENDING", "alice"): 2, ("PENDING", "carol"): 100}
    assert snap["daemon"]["submitted"] == 102
    got = samples(render(snap))
    assert got[("gbatch_jobs_by_state", (("state", "PENDING"),))] == 102
    assert got[("gbatch_jobs_by_state", (("state", "RUNNING"),))] == 0  # present, as 0
    assert got[("gbatch_fairshare_factor", (("user", "alice"),))] == 1.0
    assert got[("gbatch_jobs_idle_gpus", ())] == 0  # present, as 0: none flagged


def test_under_private_data_only_admins_read_metrics(tmp_path: Path) -> None:
    for daemon in _daemon(tmp_path, private_data=True, admins=("carol",)):
        refused = handle(daemon, ALICE, requests.encode_request(requests.Metrics()))
        assert refused["kind"] == "permission" and "private_data" in refused["error"]
        assert handle(daemon, CAROL, requests.encode_request(requests.Metrics()))["ok"]
