"""`gbatch squeue` as most calls run it: Slurm's default format and sort, drawn straight
from a listing's columns (ListJobs' `columns`, wire.listing_columns) and asked for with
a request built here. No Job is built, so neither gbatch.model, gbatch.wire nor
gbatch.formatting is imported, nor the dataclasses and inspect they load: about half of
the command's start-up (README, Performance).

formatting.format_squeue over wire.jobs_from_columns stays the definition of squeue's
output: tests/unit/test_squeue_brief.py checks that this path prints the same bytes for
any rows, and sends the same request. What it does not cover (array tasks, which fold
into `N_[4-15]` rows) it declines (format_default returns None), and the caller takes
the full path with the same reply.
"""

from __future__ import annotations

from gbatch.timefmt import format_duration

TYPE_CHECKING = False  # typing's, without importing typing: 2 ms of every start-up
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# wire.ListJobs' fields and defaults, in its order: the request is the same JSON object
# wire.encode_request makes (a unit test keeps the two equal).
_LIST_JOBS: dict[str, Any] = {
    "ids": (),
    "jobs": (),
    "users": (),
    "states": (),
    "history": False,
    "since": None,
    "brief": False,
    "table": False,
    "names": (),
    "partitions": (),
    "nodes": (),
    "starts": False,
    "gpu_usage": False,
    "columns": False,
    "after": None,
    "limit": None,
    "sort": "",
    "reverse": False,
    "shown_states": (),
    "search": "",
    "offset": None,
    "counts": False,
}

# model.IMPLICIT_PARTITION and JobState's codes, spelled here (kept equal by a unit test).
PARTITION = "gpu"
STATE_CODES = {
    "PENDING": "PD",
    "CONFIGURING": "CF",
    "RUNNING": "R",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "OUT_OF_MEMORY": "OOM",
}
# formatting._REASON_STATES: the (reason) is shown instead of the node for these.
_REASON_STATES = frozenset({"PENDING", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"})

# formatting.SQUEUE_DEFAULT_FORMAT, "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R": each cell
# right-justified in its width and cut to it, NODELIST(REASON) as it is.
_WIDTHS = (18, 9, 8, 8, 2, 10, 6)
HEADER = (
    " ".join(
        text[:width].rjust(width)
        for text, width in zip(
            ("JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES"), _WIDTHS, strict=True
        )
    )
    + " NODELIST(REASON)"
)


def list_jobs(**fields: Any) -> dict[str, Any]:
    """wire.encode_request(wire.ListJobs(**fields)), built without wire. A field that
    ListJobs does not have is a TypeError, as there."""
    unknown = fields.keys() - _LIST_JOBS.keys()
    if unknown:
        raise TypeError(f"ListJobs has no field {', '.join(sorted(unknown))}")
    return {"op": "jobs", **_LIST_JOBS, **fields}


def _printable(text: str) -> str:
    """formatting._printable: control characters read '?'."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else "?" for c in text)


def format_default(columns: Mapping[str, Any], now: float, *, header: bool = True) -> str | None:
    """`columns` (a ListJobs reply's) as `gbatch squeue` prints them by default: sorted by
    partition, state code, then priority highest first with held jobs lowest (Slurm's
    P,t,-p), in the default format; the same text as formatting.format_squeue of
    formatting.sort_squeue of wire.jobs_from_columns. None when a row is an array task
    (folded rows are the full path's)."""
    if columns["more"] or any(array is not None for array in columns["array"]):
        return None
    specs = columns["specs"]
    rows = list(
        zip(
            columns["id"],
            columns["user"],
            columns["spec"],
            columns["state"],
            columns["reason"],
            columns["held"],
            columns["start_time"],
            columns["end_time"],
            columns["node"],
            strict=True,
        )
    )
    # Stable sorts, the last key first (formatting.sort_squeue).
    rows.sort(key=lambda r: (not r[5], specs[r[2]]["priority"] - specs[r[2]]["nice"]), reverse=True)
    rows.sort(key=lambda r: STATE_CODES[r[3]])
    rows.sort(key=lambda r: specs[r[2]]["partition"] or PARTITION)
    lines = [HEADER + "\n"] if header else []
    for job_id, user, spec_at, state, reason, held, start, end, node in rows:
        spec = specs[spec_at]
        if state == "PENDING" or start is None:
            elapsed = 0
        else:
            elapsed = max(0, int((end if end is not None else now) - start))
        if state in _REASON_STATES:
            if held and state == "PENDING" and not reason.startswith("JobHeld"):
                reason = "JobHeldUser"
            where = f"({_printable(reason) if reason else 'None'})"
        else:
            where = _printable(node or "")
        lines.append(
            f"{str(job_id)[:18]:>18} {_printable(spec['partition'] or PARTITION)[:9]:>9} "
            f"{_printable(spec['name'])[:8]:>8} {_printable(user)[:8]:>8} "
            f"{STATE_CODES[state][:2]:>2} {format_duration(elapsed)[:10]:>10}      1 {where}\n"
        )
    return "".join(lines)
