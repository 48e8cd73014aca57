"""The shipped Grafana dashboard (deploy/grafana/gbatch.json) and the metric names its
PromQL reads: shared by the unit test (against a rendered snapshot) and the scrape test
(against a running daemon)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "gbatch.json"
# PromQL's functions, aggregations and keywords that read like names.
NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    # grouping and matching labels: by (...), on (...), group_left (...)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", expr)
    return {name for name in names if name not in NOT_METRICS}


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", str(variable.get("query", "")))
        if found:
            exprs.append(found.group(1))
    return exprs
