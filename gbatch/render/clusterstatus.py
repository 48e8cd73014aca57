"""`gbatch cluster status`'s text: the cluster partitions, then the links (the CLI's and MCP's)."""

from __future__ import annotations

from collections.abc import Mapping

from gbatch.core.timefmt import format_timestamp

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any


def cluster_status_text(reply: Mapping[str, Any]) -> str:
    """The ClusterStatus reply as two tables: each partition (up, or down and why), each link."""
    lines = [f"{'PARTITION':<12} {'IDENTITY':<9} {'STATE':<5} {'LOGIN NODE':<28} REASON"]
    for p in reply["partitions"]:
        lines.append(
            f"{p['name']:<12} {p['identity']:<9} {p['state']:<5} {p['login']:<28} {p['reason']}"
        )
    if not reply["links"]:
        lines += ["", "no links (gbatch cluster link PARTITION --login NAME)"]
        return "\n".join(lines) + "\n"
    lines += ["", f"{'PARTITION':<12} {'USER':<12} {'LOGIN':<16} {'STATE':<6} REASON"]
    for link in reply["links"]:
        reason = link["reason"]
        if link["since"]:
            reason = f"since {format_timestamp(link['since'])}: {reason}"
        lines.append(
            f"{link['partition']:<12} {link['user']:<12} {link['login']:<16} "
            f"{link['state']:<6} {reason}"
        )
    return "\n".join(lines) + "\n"
