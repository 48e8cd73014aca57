"""deploy/grafana/gbatch.json loads, and every metric its PromQL names is one that
gbatch's /metrics exports (read from a snapshot rendered by gbatch/api/metrics.py, so
a renamed family fails here, not on someone's dashboard)."""

from __future__ import annotations

import json
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
    ):
        assert wanted in used


def test_the_name_parser_skips_functions_labels_and_ranges() -> None:
    expr = 'histogram_quantile(0.9, sum by (le) (rate(a_bucket{job=~"x|y"}[5m]))) / b_total'
    assert metric_names(expr) == {"a_bucket", "b_total"}
