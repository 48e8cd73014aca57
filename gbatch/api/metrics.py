"""`GET /metrics`: the daemon's Metrics snapshot (wire.Metrics) in Prometheus's text
format, rendered by prometheus_client. Each scrape builds fresh metric families from
the snapshot it was given (a Collector, not metrics registered at import): this process
keeps no state, and two scrapes never share one.

Per-GPU figures take the names and labels of NVIDIA's DCGM exporter where they mean
the same (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE with gpu, UUID,
device, Hostname), so its dashboards and alerts apply; the GPU's model is in
gbatch_gpu_info (DCGM's `modelName` label is camelCase, which promtool refuses).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from gbatch import wire
from gbatch.model import JobState, NodeState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SnapshotCollector(Collector):
    """The metric families of one Metrics reply."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        yield from _jobs(self.snapshot["jobs"])
        yield GaugeMetricFamily(
            "gbatch_jobs_idle_gpus",
            "Running jobs flagged by the idle_gpu policy: all their GPUs under its threshold",
            self.snapshot.get("idle_gpu_jobs", 0),  # absent from an older daemon's reply
        )
        yield from _daemon(self.snapshot["daemon"], self.snapshot["uptime"])
        yield from _nodes(self.snapshot["nodes"], self.snapshot["round_trips"])
        yield from _shares(self.snapshot["shares"])


def render(snapshot: Mapping[str, Any]) -> bytes:
    """The text exposition of `snapshot` (a Metrics reply's fields)."""
    from prometheus_client.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return generate_latest(registry)


def _jobs(rows: Sequence[Sequence[Any]]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily(
        "gbatch_jobs",
        "Jobs not yet ended, by state, user and partition (array tasks one each)",
        labels=["state", "user", "partition"],
    )
    by_state = dict.fromkeys((s.value for s in JobState if not s.is_final), 0)
    for state, user, partition, count in rows:
        jobs.add_metric([state, user, partition], count)
        by_state[state] = by_state.get(state, 0) + count
    yield jobs
    # Every state present, zeros too: `gbatch_jobs_by_state{state="PENDING"}` is 0, not
    # absent, when the queue is empty, so alerts on it do not go stale.
    totals = GaugeMetricFamily(
        "gbatch_jobs_by_state", "Jobs not yet ended, by state", labels=["state"]
    )
    for state, count in by_state.items():
        totals.add_metric([state], count)
    yield totals


def _histogram(name: str, help_text: str, data: Mapping[str, Any]) -> HistogramMetricFamily:
    buckets = [(_bound(bound), count) for bound, count in data["buckets"]]
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=data["sum"])


def _bound(bound: float | str) -> str:
    return "+Inf" if bound == "+Inf" else repr(float(bound))


def _daemon(data: Mapping[str, Any], uptime: float) -> Iterator[Metric]:
    yield GaugeMetricFamily("gbatch_daemon_uptime_seconds", "Seconds since gbatchd started", uptime)
    yield CounterMetricFamily(
        "gbatch_jobs_submitted",
        "Jobs accepted since gbatchd started (an array's tasks one each); rate() is submits/s",
        data["submitted"],
    )
    ended = CounterMetricFamily(
        "gbatch_runs_ended",
        "Runs ended since gbatchd started, by the state they left their job in (PENDING: requeued)",
        labels=["state"],
    )
    for state, count in sorted(data["ended"].items()):
        ended.add_metric([state], count)
    yield ended
    yield _histogram(
        "gbatch_job_queue_wait_seconds",
        "From submit to the run's start, for runs started since gbatchd started",
        data["queue_wait"],
    )
    yield _histogram(
        "gbatch_job_run_seconds",
        "From a run's start to its end, for runs ended since gbatchd started",
        data["run_time"],
    )
    yield _histogram(
        "gbatch_loop_duration_seconds",
        "How long each pass of gbatchd's loop took (collect, limits, schedule, sample)",
        data["loop"],
    )
    yield GaugeMetricFamily(
        "gbatch_loop_last_duration_seconds", "How long the latest loop pass took", data["loop_last"]
    )


def _nodes(rows: Sequence[Mapping[str, Any]], round_trips: Mapping[str, Any]) -> Iterator[Metric]:
    nodes = [wire.node_from_wire(row) for row in rows]
    by_node = ["node"]
    state = GaugeMetricFamily(
        "gbatch_node_state",
        "1 for the state the node is in (as sinfo), 0 for the others",
        labels=[
            "node",
            "state",
        ],
    )
    gpus = {
        name: GaugeMetricFamily(f"gbatch_node_gpus{suffix}", help_text, labels=by_node)
        for name, suffix, help_text in (
            ("total", "", "GPUs the node's latest report lists"),
            ("allocated", "_allocated", "GPUs gbatch's jobs hold"),
            ("free", "_free", "GPUs neither held by gbatch nor busy with other processes"),
            ("outside", "_busy_outside", "GPUs not held by gbatch but running other processes"),
        )
    }
    dcgm = ["gpu", "UUID", "device", "Hostname"]
    util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)", labels=dcgm)
    used = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)", labels=dcgm)
    free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)", labels=dcgm)
    info = GaugeMetricFamily(
        "gbatch_gpu_info",
        "1 for each GPU, with its model and whether it is simulated",
        labels=[*dcgm, "model_name", "simulated"],
    )
    held = GaugeMetricFamily(
        "gbatch_gpu_allocated", "1 when a gbatch job holds the GPU, else 0", labels=dcgm
    )
    foreign = GaugeMetricFamily(
        "gbatch_gpu_foreign_processes",
        "Compute processes on the GPU that gbatch did not start",
        labels=dcgm,
    )
    for node in nodes:
        for each in NodeState:
            state.add_metric([node.name, each.value], 1 if node.state is each else 0)
        gpus["total"].add_metric([node.name], node.gpus_total)
        gpus["allocated"].add_metric([node.name], node.gpus_allocated)
        gpus["free"].add_metric([node.name], max(node.gpus_free, 0))
        gpus["outside"].add_metric([node.name], node.gpus_busy_outside)
        for gpu in node.gpus:
            labels = [str(gpu.index), gpu.uuid, f"nvidia{gpu.index}", node.name]
            if gpu.utilization_pct is not None:  # None: the device cannot tell
                util.add_metric(labels, gpu.utilization_pct)
            used.add_metric(labels, gpu.memory_used_mib)
            free.add_metric(labels, max(gpu.memory_total_mib - gpu.memory_used_mib, 0))
            info.add_metric([*labels, gpu.name, str(gpu.simulated).lower()], 1)
            held.add_metric(labels, 1 if gpu.index in node.allocations else 0)
            foreign.add_metric(labels, gpu.foreign_processes)
    yield state
    yield from gpus.values()
    yield from (util, used, free, info, held, foreign)
    rtt = GaugeMetricFamily(
        "gbatch_ssh_round_trip_seconds",
        "The latest SSH round trip to the node (a channel opened on the head's connection)",
        labels=by_node,
    )
    age = GaugeMetricFamily(
        "gbatch_ssh_round_trip_age_seconds",
        "How long ago gbatch_ssh_round_trip_seconds was measured",
        labels=by_node,
    )
    for name, (seconds, measured_ago) in sorted(round_trips.items()):
        rtt.add_metric([name], seconds)
        age.add_metric([name], measured_ago)
    yield rtt
    yield age


def _shares(rows: Sequence[Sequence[Any]]) -> Iterator[Metric]:
    usage = GaugeMetricFamily(
        "gbatch_fairshare_usage_gpu_seconds",
        "Each user's decayed GPU-seconds, as fair-share weighs them (sshare's RawUsage)",
        labels=["user"],
    )
    factor = GaugeMetricFamily(
        "gbatch_fairshare_factor",
        "Each user's fair-share factor, 2^(-usage/share), in (0, 1] (sshare's FairShare)",
        labels=["user"],
    )
    for user, used, share in rows:
        usage.add_metric([user], used)
        factor.add_metric([user], share)
    yield usage
    yield factor
