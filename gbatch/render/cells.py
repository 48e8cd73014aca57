"""What every command's output shares: job and node texts, JSON, `-o` formats, tables.

The texts of a job's facts and a node's are Slurm's (time used, `(Reason)`, exit code,
partition, memory, command line); beside them come JSON and line output, `-o` format
parsing, and tables whose columns fit their cells. Every function is pure: the clock is
the `now` parameter, and user names arrive inside the jobs.

Text outputs end with a newline when they hold any line, so a caller writes them as is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Iterator, Sequence

from gbatch.core.constants import FORMAT_MAX_WIDTH, IMPLICIT_PARTITION, REASON_STATES
from gbatch.core.hostlist import compress
from gbatch.core.labels import memory_text, printable, shown_partition
from gbatch.core.model import Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.core.timefmt import format_elapsed_fixed


class FormatError(ValueError):
    """A format string or field list names something the renderers cannot print."""


def elapsed_seconds(job: Job, now: float) -> int:
    """Whole seconds the current run has lasted: start..end, or start..now while it runs.

    0 for a pending job (a requeued one keeps an old start_time) or one never started.
    """
    if job.state is JobState.PENDING or job.start_time is None:
        return 0
    end = job.end_time if job.end_time is not None else now
    return max(0, int(end - job.start_time))


def reason_text(job: Job) -> str:
    """Slurm's reason text for a job; an empty reason reads `None`.

    A held pending job says so (`JobHeldUser`) even if its stored reason predates the hold.
    """
    if job.held and job.state is JobState.PENDING and not job.reason.startswith("JobHeld"):
        return "JobHeldUser"
    return printable(job.reason) if job.reason else "None"


def dependency_text(job: Job) -> str:
    """scontrol's Dependency= value: `afterok:12(unfulfilled)` while the job waits."""
    from gbatch.core.dependency import shown

    reason = job.reason if job.state is JobState.PENDING else ""
    return printable(shown(job.spec.dependency or "", reason))


def exit_code_text(job: Job) -> str:
    """Slurm's `exit code:signal`, `0:0` until the job has ended."""
    return f"{job.exit_code or 0}:{job.exit_signal or 0}"


# Slurm shows the reason instead of the node list for these (squeue's print.c).
_REASON_STATES = frozenset(JobState(name) for name in REASON_STATES)


def nodelist_or_reason(job: Job) -> str:
    """squeue's NODELIST(REASON): `(Reason)` for a pending or failed job, else its nodes."""
    if job.state in _REASON_STATES:
        return f"({reason_text(job)})"
    return nodelist_text(job)


def nodelist_text(job: Job) -> str:
    """The job's nodes as Slurm's host list (`gpu[01-02]`), "" while it is on none."""
    if not job.peers:
        return printable(job.node or "")
    return printable(compress(job.node_names))


def node_count(job: Job) -> int:
    """Slurm's NODES (squeue %D, NumNodes, NNodes) of a job.

    The nodes it holds once allocated, else the nodes it asks for (-N)."""
    return 1 + len(job.peers) if job.node is not None else job.spec.nodes


def tres_text(spec: JobSpec) -> str:
    """Slurm's TRES string of a job, every node's together: `billing=2,cpu=2,gres/gpu=4`.

    `billing=2,cpu=2,gres/gpu=4,mem=8G,node=2` (-c, --mem and the GPUs are per node,
    the text counts them on every node). Billing is the CPU count
    (Slurm's default weights); gres/gpu and mem only when asked for, a GPU type's count
    too (`gres/gpu:a100=2,gres/gpu=2`, in Slurm's order: by name). sacct's AllocTRES and
    ReqTRES, scontrol's ReqTRES and AllocTRES."""
    nodes = spec.nodes
    cpus = spec.cpus_counted * nodes
    gpus = spec.gpus * nodes
    parts = [f"billing={cpus}", f"cpu={cpus}"]
    if gpus and spec.gpu_type:
        parts.append(f"gres/gpu:{spec.gpu_type}={gpus}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    if spec.memory_mb is not None:
        parts.append(f"mem={memory_text(spec.memory_mb * nodes)}")
    return ",".join([*parts, f"node={nodes}"])


def partition_text(job: Job) -> str:
    """The job's partition; the implicit one for a job queued before partitions existed."""
    return printable(partition_name(job))


def partition_name(job: Job) -> str:
    """The job's partition as squeue shows it (`gpu,uni` while a -p gpu,uni job waits)."""
    pending = job.state is JobState.PENDING
    return shown_partition(job.spec.partition or IMPLICIT_PARTITION, job.spec.alternate, pending)


def time_limit_fixed(job: Job) -> str:
    return "UNLIMITED" if job.time_limit is None else format_elapsed_fixed(job.time_limit)


NULL = "(null)"  # what scontrol prints for an unset value


_ANSI_C_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote_arg(arg: str) -> str:
    """shlex.quote, except that an argument holding control characters (a multi-line
    `sh -c` script) is written as bash's $'...' so the record stays one line."""
    if arg.isprintable():
        import shlex  # deferred: only scontrol shows a command line

        return shlex.quote(arg)
    out = []
    for c in arg:
        if c in _ANSI_C_ESCAPES:
            out.append(_ANSI_C_ESCAPES[c])
        elif c.isprintable():
            out.append(c)
        else:
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\U{ord(c):08x}")
    body = "".join(out)
    return f"$'{body}'"


def command_line(argv: Sequence[str]) -> str:
    return " ".join(_quote_arg(arg) for arg in argv)


def params_text(params: Sequence[tuple[str, str]]) -> str:
    """A sweep task's parameters as `lr=1e-3,bs=32`.

    The same text as gbatch.jobspec.sweep.params_text; not imported from there, which
    would bring gbatch.jobspec.spec into squeue's start-up.
    """
    return ",".join(f"{name}={value}" for name, value in params)


def gpu_type(node: NodeInfo) -> str:
    """Its GPUs' model (sinfo --gpus' GPU_TYPE); a node of several: `2x NAME, 1x NAME`.

    A card in MIG mode reads with its slices' profiles: `NAME MIG 3g.40gb+2x1g.10gb`."""
    if not node.gpus:
        return "N/A"
    profiles: dict[int, list[str]] = {}
    for g in node.gpus:
        if g.parent is not None:
            profiles.setdefault(g.parent, []).append(g.profile)
    names = [
        f"{g.name} MIG {_layout(profiles.get(g.index, []))}" if g.mig else g.name
        for g in node.gpus
        if g.parent is None
    ]
    distinct = list(dict.fromkeys(names))
    if len(distinct) == 1:
        name = printable(distinct[0])
    else:
        name = ", ".join(f"{names.count(n)}x {printable(n)}" for n in distinct)
    return f"{name} (simulated)" if node.simulated else name


def _layout(profiles: list[str]) -> str:
    """A MIG card's slices as GBATCH_SIMULATE_GPUS spells them: `3g.40gb+2x1g.10gb`."""
    counts = dict.fromkeys(profiles, 0)
    for profile in profiles:
        counts[profile] += 1
    return "+".join(f"{n}x{p}" if n > 1 else p for p, n in counts.items()) or "(no slices)"


def node_reason(node: NodeInfo) -> str:
    if node.state in (NodeState.DRAINED, NodeState.SUSPECT, NodeState.DOWN):
        return printable(node.reason)
    return ""


def job_to_dict(job: Job, now: float) -> dict[str, object]:
    return {
        "job_id": job.id,
        # Slurm's: the array's id and this task's index (null for a job of no array).
        "array_job_id": job.array_job_id,
        "array_task_id": job.spec.array_task,
        "name": job.spec.name,
        "user": job.user,
        "uid": job.uid,
        "state": job.state.value,
        "state_code": job.state.code,
        "reason": reason_text(job),
        "partition": partition_name(job),
        "node": job.node,
        # Every node of the allocation (issue 32): the host list, the count, each's GPUs.
        "nodes": compress(job.node_names),
        "num_nodes": node_count(job),
        "placements": [{"node": name, "gpus": list(gpus)} for name, gpus in job.placements],
        "gpus": list(job.gpus),
        "gpu_uuids": list(job.gpu_uuids),
        "gpus_requested": job.spec.gpus,
        "gpu_type": job.spec.gpu_type,  # the model the GPUs must be; null: any
        "constraint": job.spec.constraint,
        "time_limit": job.time_limit,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "elapsed": elapsed_seconds(job, now),
        "attempt": job.attempt,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "priority": job.spec.effective_priority,
    }


def jobs_json(jobs: Sequence[Job], now: float) -> str:
    """`{"jobs": [...]}`, one object per job: squeue's and sacct's --json.

    Times are epoch seconds, limits seconds.
    """
    return as_json({"jobs": [job_to_dict(job, now) for job in jobs]})


def jobs_json_pieces(jobs: Iterable[tuple[Job, float]]) -> Iterator[str]:
    """jobs_json's text in pieces, a job (with the `now` to show it at) at a time.

    The same text, for a listing too large to hold whole (sacct --json, issue 35)."""
    yield '{\n  "jobs": ['
    first = True
    for job, now in jobs:
        text = json.dumps(job_to_dict(job, now), indent=2).replace("\n", "\n    ")
        yield ("\n    " if first else ",\n    ") + text
        first = False
    yield "]\n}\n" if first else "\n  ]\n}\n"


def as_json(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


def as_text(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


def aligned_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Collection[str],
    *,
    header: bool,
) -> str:
    """Columns as wide as their widest cell; `numeric` ones right-justified."""
    table = [list(headers), *rows] if header else list(rows)
    if not table:
        return ""
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = []
    for row in table:
        cells = [
            text.rjust(width) if name in numeric else text.ljust(width)
            for name, text, width in zip(headers, row, widths, strict=True)
        ]
        lines.append(" ".join(cells).rstrip())
    return as_text(lines)


# A width beyond any terminal is a typo, not a layout; refusing it keeps a stray
# "%99999999i" from building a huge string.
_MAX_WIDTH = FORMAT_MAX_WIDTH


def checked_width(text: str, what: str) -> int:
    width = int(text or 0)
    if abs(width) > _MAX_WIDTH:
        raise FormatError(f"width {width} in {what} is too large (at most {_MAX_WIDTH})")
    return width


def format_items(
    fmt: str, pattern: re.Pattern[str], letters: Iterable[str], command: str
) -> Iterator[str | tuple[str, str, str, str]]:
    """A squeue or sinfo `-o` format as literal text and (dot, width, letter, spec) items.

    `command` says which of the two; the spec is as written, and `%%` reads as '%'.
    Raises FormatError for a letter not in `letters`, naming those that are.
    """
    pos = 0
    for match in pattern.finditer(fmt):
        if match.start() > pos:
            yield fmt[pos : match.start()]
        pos = match.end()
        dot, width, letter = match.groups()
        if letter == "%" and not dot and not width:
            yield "%"
            continue
        if letter not in letters:
            supported = " ".join(f"%{key}" for key in letters)
            what = f"field letter '%{letter}'" if letter else "a '%' with no field letter"
            raise FormatError(f"unsupported {command} format: {what}; supported: {supported}")
        yield dot, width, letter, match.group()
    if pos < len(fmt):
        yield fmt[pos:]


def fit(text: str, width: int, right: bool) -> str:
    """squeue's _print_str: pad to `width`, cut to its first `width` characters."""
    if width == 0:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)
