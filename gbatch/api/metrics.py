"""`GET /metrics`: the daemon's Metrics snapshot in Prometheus's text format.

The snapshot (requests.Metrics) is rendered by prometheus_client. Each scrape builds
fresh metric families from the snapshot it was given (a Collector, not metrics
registered at import): this process keeps no state, and two scrapes never share one.

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
from prometheus_client.utils import floatToGoString

from gbatch.core.model import JobState, NodeState
from gbatch.protocol import codec

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SnapshotCollector(Collector):
    """The metric families of one Metrics reply that prometheus_client renders.

    The jobs', the daemon's and the fair-share ones (a few dozen samples). The nodes'
    and GPUs' families, thousands of samples on a large fleet, are written by
    _nodes_text.
    """

    def __init__(self, snapshot: Mapping[str, Any], part: str) -> None:
        self.snapshot = snapshot
        self.part = part  # "head": what comes before the nodes' families; "tail": after

    def collect(self) -> Iterator[Metric]:
        if self.part == "tail":
            yield from _gpu_jobs(self.snapshot.get("gpu_jobs", ()))  # absent: an older daemon
            yield from _shares(self.snapshot["shares"])
            return
        yield from _jobs(self.snapshot["jobs"])
        yield GaugeMetricFamily(
            "gbatch_jobs_idle_gpus",
            "Running jobs flagged by the idle_gpu policy: all their GPUs under its threshold",
            self.snapshot.get("idle_gpu_jobs", 0),  # absent from an older daemon's reply
        )
        yield from _daemon(self.snapshot["daemon"], self.snapshot["uptime"])


def render(snapshot: Mapping[str, Any]) -> bytes:
    """The text exposition of `snapshot` (a Metrics reply's fields)."""
    from prometheus_client.exposition import generate_latest

    def rendered(part: str) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(snapshot, part))
        return generate_latest(registry)

    nodes = _nodes_text(snapshot["nodes"], snapshot["round_trips"])
    return b"".join((rendered("head"), nodes.encode(), rendered("tail")))


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


def _nodes_text(rows: Sequence[Mapping[str, Any]], round_trips: Mapping[str, Any]) -> str:
    """The nodes' and GPUs' families in the text format, written here rather than as
    prometheus_client samples: 100 nodes x 8 GPUs are thousands of samples, and building
    one object per sample, then escaping and sorting its labels again for each family,
    took most of a scrape (bench/bench_api.py). The lines are the ones generate_latest
    writes (labels sorted by name, values by floatToGoString); tests/unit/test_metrics.py
    holds the two to the same samples."""
    nodes = [codec.node_from_wire(row) for row in rows]
    states = [each.value for each in NodeState]
    family = _Family()
    state = family(
        "gbatch_node_state", "1 for the state the node is in (as sinfo), 0 for the others"
    )
    per_node = {
        name: family(f"gbatch_node_gpus{suffix}", help_text)
        for name, suffix, help_text in (
            ("total", "", "GPUs the node's latest report lists"),
            ("allocated", "_allocated", "GPUs gbatch's jobs hold"),
            ("free", "_free", "GPUs neither held by gbatch nor busy with other processes"),
            ("outside", "_busy_outside", "GPUs not held by gbatch but running other processes"),
        )
    }
    util = family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)")
    used = family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)")
    free = family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)")
    info = family(
        "gbatch_gpu_info",
        "1 for each GPU, with its model and whether it is simulated; a MIG slice with its "
        "card (mig_parent) and profile, a card in MIG mode with mig_mode",
    )
    held = family("gbatch_gpu_allocated", "1 when a gbatch job holds the GPU, else 0")
    foreign = family(
        "gbatch_gpu_foreign_processes", "Compute processes on the GPU that gbatch did not start"
    )
    # Shares of a GPU (gbatch/core/shares.py), for its shareable GPUs only: the room is
    # the planner's (Fleet.card_shares).
    share_jobs = family("gbatch_gpu_share_jobs", "Shared jobs (--gpu-mem) on a shareable GPU")
    share_budgets = family(
        "gbatch_gpu_share_budget_mib", "The memory budgets of the shared jobs on a shareable GPU"
    )
    share_room = family(
        "gbatch_gpu_share_room_mib", "Memory (MiB) a new shared job may take on a shareable GPU"
    )
    for node in nodes:
        name = _escape(node.name)
        for each in states:
            state.add(f'node="{name}",state="{each}"', 1 if node.state.value == each else 0)
        by_node = f'node="{name}"'
        per_node["total"].add(by_node, node.gpus_total)
        per_node["allocated"].add(by_node, node.gpus_allocated)
        per_node["free"].add(by_node, max(node.gpus_free, 0))
        per_node["outside"].add(by_node, node.gpus_busy_outside)
        for gpu in node.gpus:
            # DCGM's labels (gpu, UUID, device, Hostname), sorted by name as
            # generate_latest writes them: capitals first.
            labels = (
                f'Hostname="{name}",UUID="{_escape(gpu.uuid)}",'
                f'device="nvidia{gpu.index}",gpu="{gpu.index}"'
            )
            if gpu.utilization_pct is not None:  # None: the device cannot tell
                util.add(labels, gpu.utilization_pct)
            used.add(labels, gpu.memory_used_mib)
            free.add(labels, max(gpu.memory_total_mib - gpu.memory_used_mib, 0))
            simulated = str(gpu.simulated).lower()
            # A MIG slice names its card and profile; a card in MIG mode says so.
            mig = (
                f'mig_parent="{gpu.parent}",mig_profile="{_escape(gpu.profile)}",'
                if gpu.parent is not None
                else 'mig_mode="enabled",'
                if gpu.mig
                else ""
            )
            info.add(
                f'{labels},gpu_type="{_escape(gpu.type)}",{mig}model_name="{_escape(gpu.name)}",'
                f'simulated="{simulated}"',
                1,
            )
            held.add(labels, 1 if gpu.index in node.allocations else 0)
            foreign.add(labels, gpu.foreign_processes)
        for card in node.shares:
            labels = f'gpu="{card.index}",node="{name}"'
            share_jobs.add(labels, len(card.jobs))
            share_budgets.add(labels, card.budgets_mib)
            share_room.add(labels, card.room_mib)
    rtt = family(
        "gbatch_ssh_round_trip_seconds",
        "The latest SSH round trip to the node (a channel opened on the head's connection)",
    )
    age = family(
        "gbatch_ssh_round_trip_age_seconds",
        "How long ago gbatch_ssh_round_trip_seconds was measured",
    )
    for name, (seconds, measured_ago) in sorted(round_trips.items()):
        rtt.add(f'node="{_escape(name)}"', seconds)
        age.add(f'node="{_escape(name)}"', measured_ago)
    return family.text()


class _Family:
    """Gauge families written as generate_latest writes them, in the order made."""

    def __init__(self) -> None:
        self._lines: list[list[str]] = []

    def __call__(self, name: str, help_text: str) -> _Gauge:
        lines = [f"# HELP {name} {help_text}\n", f"# TYPE {name} gauge\n"]
        self._lines.append(lines)
        return _Gauge(name, lines)

    def text(self) -> str:
        return "".join(line for lines in self._lines for line in lines)


class _Gauge:
    def __init__(self, name: str, lines: list[str]) -> None:
        self.name = name
        self.lines = lines

    def add(self, labels: str, value: float) -> None:
        """A sample; `labels` already escaped and sorted by name."""
        value_text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
        self.lines.append(f"{self.name}{{{labels}}} {value_text}\n")


def _escape(value: str) -> str:
    """A label value as the text format quotes it (generate_latest's escaping)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _gpu_jobs(rows: Sequence[Sequence[Any]]) -> Iterator[Metric]:
    """Which job and user hold each GPU, labelled as DCGM labels the GPU (Hostname, gpu).

    The join a dashboard needs to name a GPU's owner: `DCGM_FI_DEV_GPU_UTIL * on(Hostname,
    gpu) group_left(user, job_id) gbatch_gpu_job_info`. A shared GPU has a sample per job."""
    info = GaugeMetricFamily(
        "gbatch_gpu_job_info",
        "1 for each GPU a gbatch job holds, with the job's id and user",
        labels=["Hostname", "gpu", "job_id", "user"],
    )
    for node, gpu, job_id, user in rows:
        info.add_metric([node, str(gpu), str(job_id), user], 1)
    yield info


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
