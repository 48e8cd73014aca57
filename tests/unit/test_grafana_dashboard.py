"""deploy/grafana/gbatch.json loads, and every metric its PromQL names is one that
gbatch's /metrics exports (read from a snapshot rendered by gbatch/api/metrics.py, so
a renamed family fails here, not on someone's dashboard)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dashboard import DASHBOARD, metric_names, queries
from prometheus_client.parser import text_string_to_metric_families

from gbatch.api.metrics import render


def exported() -> set[str]:
    """Every sample name (with _total, _bucket, ...) of a snapshot with one of each."""
    histogram = {"buckets": [[1.0, 1], ["+Inf", 2]], "sum": 3.0}
    snapshot: dict[str, Any] = {
        "jobs": [["PENDING", "alice", "gpu", 3]],
        "daemon": {
            "submitted": 3,
            "ended": {"COMPLETED": 1},
            "queue_wait": histogram,
            "run_time": histogram,
            "loop": histogram,
            "loop_last": 0.01,
        },
        "uptime": 5.0,
        "nodes": [
            {
                "name": "n1",
                "state": "mixed",
                "reason": "",
                "gpus": [
                    {
                        "index": 0,
                        "uuid": "GPU-0",
                        "name": "H100",
                        "memory_total_mib": 80000,
                        "memory_used_mib": 10,
                        "utilization_pct": 50,
                        "foreign_processes": 0,
                        "simulated": True,
                    }
                ],
                "allocations": {"0": 7},
            }
        ],
        "round_trips": {"n1": [0.002, 1.0]},
        "shares": [["alice", 10.0, 0.5]],
        "gpu_jobs": [["n1", 0, 7, "alice"]],
    }
    text = render(snapshot).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_dashboard_loads_and_each_panel_queries_something() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]


def test_every_metric_the_dashboard_reads_is_one_gbatch_exports() -> None:
    names = exported()
    used = {
        name for expr in queries(json.loads(DASHBOARD.read_text())) for name in metric_names(expr)
    }
    assert used, "no metric names found: the parser is broken"
    assert used - names == set()
    # What the issue asks the dashboard to show.
    for wanted in (
        "gbatch_jobs_by_state",
        "gbatch_job_queue_wait_seconds_bucket",
        "gbatch_node_gpus_allocated",
        "gbatch_node_gpus_free",
        "gbatch_node_gpus_busy_outside",
        "DCGM_FI_DEV_GPU_UTIL",
        "gbatch_loop_duration_seconds_bucket",
        "gbatch_gpu_job_info",  # a GPU's owning user and job
    ):
        assert wanted in used


def test_the_name_parser_skips_functions_labels_and_ranges() -> None:
    expr = 'histogram_quantile(0.9, sum by (le) (rate(a_bucket{job=~"x|y"}[5m]))) / b_total'
    assert metric_names(expr) == {"a_bucket", "b_total"}


def test_the_name_parser_skips_matching_labels_of_a_join() -> None:
    expr = 'a{x=~"y"} * on(Hostname, gpu) group_left(user, job_id) b_info{job=~"z"}'
    assert metric_names(expr) == {"a", "b_info"}


def test_each_held_gpu_has_an_info_sample_naming_its_job_and_user_as_dcgm_labels_it() -> None:
    snapshot: dict[str, Any] = {
        "jobs": [],
        "daemon": {
            "submitted": 0,
            "ended": {},
            "queue_wait": {"buckets": [["+Inf", 0]], "sum": 0.0},
            "run_time": {"buckets": [["+Inf", 0]], "sum": 0.0},
            "loop": {"buckets": [["+Inf", 0]], "sum": 0.0},
            "loop_last": 0.0,
        },
        "uptime": 1.0,
        "nodes": [],
        "round_trips": {},
        "shares": [],
        "gpu_jobs": [["gpu01", 3, 42, 'ali"ce'], ["gpu01", 3, 43, "bob"]],
    }
    text = render(snapshot).decode()
    assert 'gbatch_gpu_job_info{Hostname="gpu01",gpu="3",job_id="42",user="ali\\"ce"} 1.0' in text
    assert 'gbatch_gpu_job_info{Hostname="gpu01",gpu="3",job_id="43",user="bob"} 1.0' in text


def test_the_metrics_reply_names_each_held_gpus_job_and_user(tmp_path: Path) -> None:
    from gbatch.core.model import JobSpec, JobState
    from gbatch.head.daemon import Daemon
    from gbatch.head.handlers import Caller, handle
    from gbatch.head.store import Store
    from gbatch.site.config import Config, Paths

    paths = Paths(tmp_path)
    store = Store(paths.store)
    daemon = Daemon(paths, Config(simulate_gpus=2), store)
    try:
        (job_id,) = store.submit(
            [JobSpec(name="j", command=("true",), gpus=2)], uid=5001, user="alice", now=1.0
        )
        store.set_state(job_id, JobState.CONFIGURING, "", 2.0, node="local", gpus=(0, 1), attempt=1)
        store.set_state(job_id, JobState.RUNNING, "", 2.0, start_time=2.0)
        reply = handle(daemon, Caller(uid=os.getuid(), user="me", pid=1), {"op": "metrics"})
        assert reply["gpu_jobs"] == [["local", 0, job_id, "alice"], ["local", 1, job_id, "alice"]]
    finally:
        daemon.committer.close()
        store.close()
