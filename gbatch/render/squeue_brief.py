"""`gbatch squeue` as most calls run it, drawn straight from a listing's columns.

Slurm's default format and sort, from ListJobs' `columns` (listings.listing_columns),
asked for with a request built here. No Job is built, so neither gbatch.core.model, the
request types, the Job decoders nor squeue's full renderer (gbatch.render.squeue) is
imported, nor the dataclasses and inspect they load: a large share of the command's
start-up (bench/bench_startup.py). The constants it shares with them are
gbatch.core.constants'.

squeue.format_squeue over listings.jobs_from_columns stays the definition of squeue's
output: tests/unit/test_squeue_brief.py checks that this path prints the same bytes for
any rows (array tasks folded into `N_[4-15]` rows as jobids.collapse_pending folds
them), and sends a request the daemon reads as the same ListJobs.
"""

from __future__ import annotations

from gbatch.core.constants import (
    IMPLICIT_PARTITION,
    REASON_STATES,
    SQUEUE_DEFAULT_FORMAT,
    STATE_CODES,
)
from gbatch.core.labels import folded_label, printable, shown_partition
from gbatch.core.timefmt import format_duration

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# SQUEUE_DEFAULT_FORMAT's widths ("%.18i" -> 18), one per cell before NODELIST(REASON):
# each cell right-justified in its width and cut to it, NODELIST(REASON) as it is.
_WIDTHS = tuple(int(part[2:-1]) for part in SQUEUE_DEFAULT_FORMAT.split()[:-1])
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
    """The ListJobs request of `fields` (requests.ListJobs' names), as a plain dict.

    Built without the request types: the fields not given are left out, and the
    daemon's decoder gives them their defaults, as for any request.
    """
    return {"op": "jobs", **fields}


def format_default(
    columns: Mapping[str, Any], now: float, *, header: bool = True, expand: bool = False
) -> str:
    """`columns` (a ListJobs reply's) as `gbatch squeue` prints them by default.

    Sorted by partition, state code, then priority highest first with held jobs lowest
    (Slurm's P,t,-p), in the default format, an array's pending tasks folded into one
    row `N_[4-15]` at its first's place; the same text as squeue.format_squeue of
    squeue.sort_squeue of listings.jobs_from_columns. With `expand` (squeue -r), one row
    per task instead: a record standing for more pending tasks (`more`) is followed by a
    line for each of them, made from the record's line with the task's `N_K` in front,
    so a 100,000-task array costs 100,000 strings and no row object per task.
    """
    specs = columns["specs"]
    arrays = columns["array"]
    more = {at: spans for at, spans in columns["more"]}
    # A job across nodes' other nodes (issue 32), by place; sent only when some job has any.
    peers = {at: names for at, names in columns.get("peers", ())}
    tasks = bool(more) or any(array is not None for array in arrays)
    placed = tasks or bool(peers)
    rows = list(
        zip(
            # An array task's row (a job across nodes' too) is known by its place, for its
            # label (array_labels) and its nodes.
            range(len(arrays)) if placed else columns["id"],
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
    # Slurm's P,t,-p as one stable sort (squeue.sort_squeue makes one a key, the last
    # first): partition, state code, then held last and priority highest first, ties in
    # the listing's order. A spec's keys are read once, not once a row.
    part = [spec["partition"] or IMPLICIT_PARTITION for spec in specs]
    rank = [spec["nice"] - spec["priority"] for spec in specs]
    codes = STATE_CODES
    rows.sort(key=lambda r: (part[r[2]], codes[r[3]], r[5], rank[r[2]]))
    labels: list[str | None]
    if tasks and expand:
        ids, arrays_of, task_of = columns["id"], columns["array"], columns["task"]
        labels = [
            str(ids[row[0]])
            if arrays_of[row[0]] is None
            else f"{arrays_of[row[0]]}_{task_of[row[0]]}"
            for row in rows
        ]
    elif tasks:
        labels = array_labels(rows, columns, more)
    elif placed:
        labels = [str(columns["id"][row[0]]) for row in rows]
    else:
        labels = [str(row[0]) for row in rows]
    lines = [HEADER + "\n"] if header else []
    # A line's cells but its JOBID, by what they are made of: down a long queue most
    # repeat (one user's held jobs of one spec), and each is made once.
    made: dict[tuple[Any, ...], str] = {}
    for label, (at, user, spec_at, state, reason, held, start, end, node) in zip(
        labels, rows, strict=True
    ):
        if label is None:  # a pending task folded into its array's first row
            continue
        if state == "PENDING" or start is None:
            elapsed = 0
        else:
            elapsed = max(0, int((end if end is not None else now) - start))
        others = peers.get(at) if placed else None
        shared = None if others is None else tuple(others)
        key = (spec_at, user, state, reason, held, elapsed, node, shared)
        rest = made.get(key)
        if rest is None:
            rest = made[key] = _rest_of_line(
                specs[spec_at], user, state, reason, held, elapsed, node, others
            )
        lines.append(f"{label[:18]:>18}{rest}")
        if expand and at in more:  # the tasks the record stands for, each its own line
            lines.extend(task_lines(f"{columns['array'][at]}_", more[at], rest))
    return "".join(lines)


def _rest_of_line(
    spec: Mapping[str, Any],
    user: str,
    state: str,
    reason: str,
    held: bool,
    elapsed: int,
    node: Any,  # str | None; a job across nodes' first node when `others`
    others: list[str] | None,
) -> str:
    """A squeue line but its JOBID: PARTITION to NODELIST(REASON), and its newline."""
    # NODES: the nodes it holds once on any, else those it asks for (-N).
    if node is None:
        count = str(spec.get("nodes", 1))[:6]
    else:
        count = "1" if others is None else str(1 + len(others))[:6]
    if state in REASON_STATES:
        if held and state == "PENDING" and not reason.startswith("JobHeld"):
            reason = "JobHeldUser"
        where = f"({printable(reason) if reason else 'None'})"
    elif others:
        from gbatch.core.hostlist import compress  # deferred: jobs across nodes only

        where = printable(compress([node, *others]))
    else:
        where = printable(node or "")
    return (
        f" {printable(partition_shown(spec, state))[:9]:>9} "
        f"{printable(spec['name'])[:8]:>8} {printable(user)[:8]:>8} "
        f"{STATE_CODES[state][:2]:>2} {format_duration(elapsed)[:10]:>10} {count:>6} {where}\n"
    )


def task_lines(prefix: str, spans: Any, rest: str) -> list[str]:
    """One squeue line per index of `spans`, in chunks of lines joined.

    Each line is `prefix` + index right-justified in JOBID's 18 columns (cut to them, as
    any label) in front of the line's `rest`.

    Indices of as many digits share their padding, so a run of them is made by str.join
    (the interpreter's C loop) rather than a format per line; a whole thousand (K000 to
    K999) joins the 1,000 three-digit endings, so not even a number is formatted each.
    """
    chunks: list[str] = []
    for first, last in spans:
        low = first
        while low <= last:
            digits = len(str(low))
            high = min(last, 10**digits - 1)
            width = len(prefix) + digits
            if low < 0 or width > 18:  # cut or odd: each line as any label's
                chunks.extend(
                    f"{(prefix + str(index))[:18]:>18}{rest}" for index in range(low, high + 1)
                )
            else:
                chunks.extend(_padded_run(" " * (18 - width) + prefix, low, high, rest))
            low = high + 1
    return chunks


_ENDINGS = [f"{n:03d}" for n in range(1000)]


def _padded_run(lead: str, low: int, high: int, rest: str) -> list[str]:
    """The lines `lead` + index + `rest` for low..high, indices of one length."""
    if high - low < 2000:
        return [lead + (rest + lead).join(map(str, range(low, high + 1))) + rest]
    whole = -(-low // 1000)  # the first whole thousand's K (low <= K000)
    end = (high + 1) // 1000  # past the last whole thousand's K
    out = _padded_run(lead, low, whole * 1000 - 1, rest) if low < whole * 1000 else []
    for thousand in range(whole, end):
        head = lead + str(thousand)
        out.append(head + (rest + head).join(_ENDINGS) + rest)
    if end * 1000 <= high:
        out.extend(_padded_run(lead, end * 1000, high, rest))
    return out


def array_labels(
    rows: list[tuple[Any, ...]], columns: Mapping[str, Any], more: Mapping[int, Any]
) -> list[str | None]:
    """Each sorted row's JOBID as jobids.collapse_pending gives it; None for rows folded in.

    A row's first cell is its place in `columns`. The labels: `N`, task K of array N
    `N_K`, the PENDING tasks of one array (and the tasks a record stands for, `more`) as
    one row `N_[4-15%2]` at its first's place (Slurm's %MAX: the array's throttle).
    """
    ids, arrays, tasks, specs = columns["id"], columns["array"], columns["task"], columns["specs"]
    pending: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        at = row[0]
        if row[3] == "PENDING" and arrays[at] is not None:
            spans = pending.setdefault(arrays[at], [])
            spans.append((tasks[at], tasks[at]))
            spans.extend((a, b) for a, b in more.get(at, ()))
    labels: list[str | None] = []
    for row in rows:
        at = row[0]
        array = arrays[at]
        throttle = specs[row[2]]["array_throttle"]
        if array is None:
            labels.append(str(ids[at]))
        elif row[3] != "PENDING":
            extra = more.get(at)
            own = [(tasks[at], tasks[at]), *((a, b) for a, b in extra)] if extra else None
            labels.append(
                f"{array}_{tasks[at]}" if own is None else folded_label(array, own, throttle)
            )
        elif array in pending:
            spans = pending.pop(array)  # its first row: the others fold into it
            single = len(spans) == 1 and spans[0][0] == spans[0][1]
            labels.append(
                f"{array}_{spans[0][0]}" if single else folded_label(array, spans, throttle)
            )
        else:
            labels.append(None)
    return labels


def partition_shown(spec: Mapping[str, Any], state: str) -> str:
    """squeue's PARTITION: `gpu,uni` while a job of `-p gpu,uni` waits."""
    partition = spec["partition"] or IMPLICIT_PARTITION
    return shown_partition(partition, spec.get("alternate"), state == "PENDING")
