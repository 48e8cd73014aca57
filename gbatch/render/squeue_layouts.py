"""`gbatch squeue -o`, `-O`, `-l` and `-S` as most calls write them, drawn from a listing's columns.

squeue_brief's way for other layouts and orders (issue 35): the `-o` letters a listing's
columns and brief specs hold (LETTERS), sorted by the `-S` keys they hold (SORT_KEYS),
an array's pending tasks folded as squeue_brief folds them. Without the model or
render.squeue; imported only when such an option is given, so that plain `squeue` loads
none of it. parse_format, fields_format and parse_sort read the options as render.squeue
does or answer None, and the full path then reads (or refuses) them.
tests/unit/test_squeue_brief.py holds format_table to render.squeue's format_squeue of
sort_squeue for any rows, format and keys.
"""

from __future__ import annotations

from gbatch.core.constants import (
    FORMAT_MAX_WIDTH,
    IMPLICIT_PARTITION,
    REASON_STATES,
    SQUEUE_FIELD_WIDTH,
    SQUEUE_FIELDS,
    STATE_CODES,
)
from gbatch.core.labels import printable
from gbatch.core.timefmt import format_duration, format_timestamp
from gbatch.render.squeue_brief import array_labels, partition_shown

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

# The `-o` letters and `-S` keys drawn here from a listing's columns and brief specs;
# any other (a whole spec's, an expected start's, QOS, TRES) is render.squeue's.
LETTERS = frozenset("iAFKPjuUtTMlLDRNrVYpQ")
SORT_KEYS = frozenset("ijuUtTPpQVlLMDNB")
_HEADERS = {
    "i": "JOBID",
    "A": "JOBID",
    "F": "ARRAY_JOB_ID",
    "K": "ARRAY_TASK_ID",
    "P": "PARTITION",
    "j": "NAME",
    "u": "USER",
    "U": "UID",
    "t": "ST",
    "T": "STATE",
    "M": "TIME",
    "l": "TIME_LIMIT",
    "L": "TIME_LEFT",
    "D": "NODES",
    "R": "NODELIST(REASON)",
    "N": "NODELIST",
    "r": "REASON",
    "V": "SUBMIT_TIME",
    "Y": "SCHEDNODES",
    "p": "PRIORITY",
    "Q": "PRIORITY",
}
_DIGITS = "0123456789"


def parse_format(fmt: str) -> list[Any] | None:
    """A squeue `-o` format as render.squeue reads it; None for one it reads otherwise or refuses.

    Literal text and (letter, width, right) fields, `%%` a '%'. None also for a letter not
    among LETTERS (render.squeue's to draw) or a width over FORMAT_MAX_WIDTH (its to refuse).
    """
    parts: list[Any] = []
    at = 0
    while True:
        mark = fmt.find("%", at)
        if mark < 0:
            break
        if mark > at:
            parts.append(fmt[at:mark])
        end = mark + 1
        right = fmt[end : end + 1] == "."
        end += right
        first = end
        while end < len(fmt) and fmt[end] in _DIGITS:
            end += 1
        digits = fmt[first:end]
        letter = fmt[end : end + 1]
        at = end + len(letter)
        if letter == "%" and not right and not digits:
            parts.append("%")
            continue
        if letter not in LETTERS or not letter:
            return None
        width = int(digits or 0)
        if width > FORMAT_MAX_WIDTH:
            return None
        parts.append((letter, width, right))
    if at < len(fmt):
        parts.append(fmt[at:])
    return parts


def fields_format(fields: str) -> str | None:
    """squeue -O's list as the `-o` format squeue_format_from_fields makes; None if refused."""
    out = []
    for raw in fields.split(","):
        name, _, size = raw.strip().partition(":")
        letter = SQUEUE_FIELDS.get(name.lower())
        if letter is None:
            return None
        right = size.startswith(".")
        digits = size[1:] if right else size
        if digits and not digits.isdecimal():  # as squeue_format_from_fields refuses
            return None
        width = int(digits) if digits else SQUEUE_FIELD_WIDTH  # any script's digits
        if width > FORMAT_MAX_WIDTH:
            return None
        out.append(f"%{'.' if right else ''}{width}{letter}")
    return "".join(out)


def parse_sort(text: str) -> list[tuple[str, bool]] | None:
    """squeue -S's keys as parse_squeue_sort reads them, (key, descending); None for others.

    None for a list it refuses, or a key not among SORT_KEYS (render.squeue's to sort by).
    """
    keys = []
    at = 0
    while at < len(text):
        if text[at] in ", ":
            at += 1
            continue
        sign = text[at] if text[at] in "+-" else ""
        at += len(sign)
        at += text[at : at + 1] == "%"
        if text[at : at + 7].lower() == "cluster":
            at += 7
            continue
        key = text[at : at + 1]
        if key not in SORT_KEYS or not key:
            return None
        at += 1
        keys.append((key, sign == "-"))
    return keys or None


def format_table(
    columns: Mapping[str, Any],
    now: float,
    parts: list[Any],
    keys: list[tuple[str, bool]],
    *,
    header: bool = True,
) -> str:
    """`columns` in the layout `parts` (parse_format's) and the order `keys` (parse_sort's).

    The same text as render.squeue.format_squeue of sort_squeue of
    listings.jobs_from_columns, an array's pending tasks folded into one `N_[4-15]` row at
    its first's place (not -r: render.squeue's).
    """
    specs = columns["specs"]
    ids, uids, submits = columns["id"], columns["uid"], columns["submit_time"]
    arrays, tasks = columns["array"], columns["task"]
    more = {at: spans for at, spans in columns["more"]}
    peers = {at: names for at, names in columns.get("peers", ())}
    rows = list(
        zip(
            range(len(arrays)),
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

    def elapsed(row: tuple[Any, ...]) -> int:
        if row[3] == "PENDING" or row[6] is None:
            return 0
        return max(0, int((row[7] if row[7] is not None else now) - row[6]))

    def limit(row: tuple[Any, ...]) -> Any:
        return specs[row[2]]["time_limit"]

    def left(row: tuple[Any, ...]) -> Any:
        seconds = limit(row)
        return None if seconds is None else max(0, seconds - elapsed(row))

    def nodes(row: tuple[Any, ...]) -> str:
        others = peers.get(row[0])
        if not others:
            return printable(row[8] or "")
        from gbatch.core.hostlist import compress  # deferred: jobs across nodes only

        return printable(compress([row[8], *others]))

    def node_count(row: tuple[Any, ...]) -> int:
        if row[8] is None:
            return int(specs[row[2]].get("nodes", 1))
        return 1 + len(peers.get(row[0]) or ())

    def reason(row: tuple[Any, ...]) -> str:
        text = row[4]
        if row[5] and row[3] == "PENDING" and not text.startswith("JobHeld"):
            return "JobHeldUser"
        return printable(text) if text else "None"

    def priority(row: tuple[Any, ...]) -> int:
        spec = specs[row[2]]
        return int(spec["priority"] - spec["nice"])

    def inf(value: Any) -> Any:
        return float("inf") if value is None else value

    sort_values: dict[str, Callable[[tuple[Any, ...]], Any]] = {
        "i": lambda r: (ids[r[0]], -1) if arrays[r[0]] is None else (arrays[r[0]], tasks[r[0]]),
        "j": lambda r: specs[r[2]]["name"],
        "u": lambda r: r[1],
        "U": lambda r: uids[r[0]],
        "t": lambda r: STATE_CODES[r[3]],
        "T": lambda r: r[3],
        "P": lambda r: specs[r[2]]["partition"] or IMPLICIT_PARTITION,
        "p": lambda r: (not r[5], priority(r)),
        "Q": lambda r: (not r[5], priority(r)),
        "V": lambda r: submits[r[0]],
        "l": lambda r: inf(limit(r)),
        "L": lambda r: inf(left(r)),
        "M": elapsed,
        "D": node_count,
        "N": nodes,
        "B": lambda r: r[8] or "",
    }
    for key, descending in reversed(keys):
        rows.sort(key=sort_values[key], reverse=descending)
    labels = array_labels(rows, columns, more)
    cells: dict[str, Callable[[tuple[Any, ...], str], str]] = {
        "i": lambda r, label: label,
        "A": lambda r, label: str(ids[r[0]]),
        "F": lambda r, label: str(arrays[r[0]] or ids[r[0]]),
        "K": lambda r, label: (
            label[label.index("[") :]
            if label.endswith("]")
            else "N/A"
            if tasks[r[0]] is None
            else str(tasks[r[0]])
        ),
        "P": lambda r, label: printable(partition_shown(specs[r[2]], r[3])),
        "j": lambda r, label: printable(specs[r[2]]["name"]),
        "u": lambda r, label: printable(r[1]),
        "U": lambda r, label: str(uids[r[0]]),
        "t": lambda r, label: STATE_CODES[r[3]],
        "T": lambda r, label: r[3],
        "M": lambda r, label: format_duration(elapsed(r)),
        "l": lambda r, label: format_duration(limit(r)),
        "L": lambda r, label: format_duration(left(r)),
        "D": lambda r, label: str(node_count(r)),
        "R": lambda r, label: f"({reason(r)})" if r[3] in REASON_STATES else nodes(r),
        "N": lambda r, label: nodes(r),
        "r": lambda r, label: reason(r),
        "V": lambda r, label: format_timestamp(submits[r[0]]),
        "Y": lambda r, label: "(null)",
        "p": lambda r, label: str(priority(r)),
        "Q": lambda r, label: str(priority(r)),
    }
    drawn = [part if isinstance(part, str) else (cells[part[0]], *part[1:]) for part in parts]
    lines = []
    if header:
        heads = [
            part if isinstance(part, str) else _fit(_HEADERS[part[0]], part[1], part[2])
            for part in parts
        ]
        lines.append("".join(heads) + "\n")
    for label, row in zip(labels, rows, strict=True):
        if label is None:  # a pending task folded into its array's first row
            continue
        line = [
            part if isinstance(part, str) else _fit(part[0](row, label), part[1], part[2])
            for part in drawn
        ]
        lines.append("".join(line) + "\n")
    return "".join(lines)


def _fit(text: str, width: int, right: bool) -> str:
    """render.cells.fit: pad to `width`, cut to its first `width` characters."""
    if width == 0:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)
