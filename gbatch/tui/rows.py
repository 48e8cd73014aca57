"""What the queue and nodes views show, as plain values: filter, sort, count, cells.

Pure (no textual, no clock): `now` is the daemon's. Cell text comes from gbatch.render
(squeue's renderer and its cells) so the TUI says exactly what squeue and sinfo say
(elapsed time, limits, `(Reason)` for pending jobs, control characters made harmless).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any

from gbatch.core.jobids import job_label
from gbatch.core.labels import printable
from gbatch.core.model import Gpu, Job, JobState, NodeInfo, NodeState
from gbatch.core.reservations import windows_text
from gbatch.core.shares import card_text
from gbatch.render import squeue
from gbatch.render.cells import node_reason

# (column key, header). TIME is squeue's elapsed/limit; NODE(REASON) is squeue's %R (a
# job across nodes: its host list, gpu[01-02]); GPUS per node, `2x4` across 2 nodes.
QUEUE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "JOBID"),
    ("user", "USER"),
    ("name", "NAME"),
    ("state", "ST"),
    ("gpus", "GPUS"),
    ("time", "TIME/LIMIT"),
    ("where", "NODE(REASON)"),
)
# The states the state filter steps through: in the queue of active jobs, and in the
# finished-jobs view.
STATE_FILTERS: tuple[JobState | None, ...] = (
    None,
    JobState.PENDING,
    JobState.RUNNING,
    JobState.COMPLETING,
)
FINISHED_STATE_FILTERS: tuple[JobState | None, ...] = (
    None,
    *(state for state in JobState if state.is_final),
)
# A separator no cell can hold: the renderers replace control characters with '?'.
_SEP = "\x1f"
_SQUEUE_FIELDS = ("%A", "%u", "%j", "%t", "%M", "%l", "%R")
_NAME_WIDTH = 16  # keeps the table readable at 80 columns


@dataclass(frozen=True)
class QueueFilter:
    """What the queue view shows: `mine`, `state` and `text` narrow the jobs.

    `mine` keeps `user`'s jobs, `state` one state, `text` jobs whose id, name, user, node or
    reason contain it (any case).
    """

    user: str
    mine: bool = True
    state: JobState | None = None
    text: str = ""


def ordered_counts(
    counts: Mapping[JobState, int], *, finished: bool = False
) -> dict[JobState, int]:
    """`counts` (jobs per state, as the daemon counted them) in the view's order.

    Every active (or, with `finished`, final) state comes first (0 when none), in lifecycle
    order, then any other state that occurs.
    """
    ordered = {state: counts.get(state, 0) for state in JobState if state.is_final is finished}
    for state in JobState:
        if state.is_final is not finished and counts.get(state):
            ordered[state] = counts[state]
    return ordered


def format_counts(counts: Mapping[JobState, int]) -> str:
    """`PD 3  CF 0  R 2  CG 0`: the codes squeue's ST column uses."""
    return "  ".join(f"{state.code} {count}" for state, count in counts.items())


def job_cells(
    jobs: Sequence[Job], now: float, labels: Mapping[int, str] | None = None
) -> dict[int, tuple[str, ...]]:
    """Each job's cells in QUEUE_COLUMNS order, rendered by squeue's own formatter.

    JOBID is `labels`' entry for the job (an array task's `N_K`, as squeue -r shows it; a
    job table's Jobs do not carry their array), else its job_label.

    Jobs alike in every field the cells show but their id (the held jobs of a sweep:
    thousands, whether one array or submitted one by one) are formatted once: their
    cells differ in the JOBID cell alone.
    """
    named = labels or {}
    alike: dict[tuple[Any, ...], list[Job]] = {}
    for shape, job in zip(map(_shape, jobs), jobs, strict=True):
        group = alike.get(shape)
        if group is None:
            alike[shape] = [job]
        else:
            group.append(job)
    formatted = _formatted_cells([group[0] for group in alike.values()], now)
    cells: dict[int, tuple[str, ...]] = {}
    for group in alike.values():
        rest = formatted[group[0].id][1:]
        for job in group:
            cells[job.id] = (named.get(job.id) or job_label(job), *rest)
    return cells


# What job_cells tells jobs apart by: every Job field but `id` (the one cell it fills
# is made per job) and `submit_time` (no cell shows it: squeue's %V is not among
# _SQUEUE_FIELDS), as a tuple (hashable: Job and its spec are frozen).
_NOT_IN_SHAPE = ("id", "submit_time")
_shape = attrgetter(*(field.name for field in fields(Job) if field.name not in _NOT_IN_SHAPE))
assert "%V" not in _SQUEUE_FIELDS


def _formatted_cells(jobs: Sequence[Job], now: float) -> dict[int, tuple[str, ...]]:
    fmt = _SEP.join(_SQUEUE_FIELDS)
    # One row a job: the TUI folds no array (squeue -r). A record standing for more
    # pending tasks (Job.array_more: an array's tail) is one row too, its JOBID the
    # label `N_[K-M]` (job_cells): squeue -r would print each of its tasks.
    one_each = [replace(job, array_more=()) if job.array_more else job for job in jobs]
    lines = squeue.format_squeue(
        one_each, now, fmt=fmt, header=False, expand_arrays=True
    ).splitlines()
    cells: dict[int, tuple[str, ...]] = {}
    for job, line in zip(jobs, lines, strict=True):
        job_id, user, name, code, elapsed, limit, where = line.split(_SEP)
        assert job_id == str(job.id), "job_cells: JOBID is the id alone"
        if len(name) > _NAME_WIDTH:
            name = name[: _NAME_WIDTH - 1] + "…"
        kind = job.spec.gpu_type
        gpus = f"{kind}:{job.spec.gpus}" if kind else str(job.spec.gpus)
        if job.spec.nodes > 1:  # across nodes (issue 32): nodes x GPUs on each
            gpus = f"{job.spec.nodes}x{gpus}"
        cells[job.id] = (job_id, user, name, code, gpus, f"{elapsed}/{limit}", where)
    return cells


def ticks(job: Job) -> bool:
    """Whether the job's cells change with the clock alone: its elapsed time runs."""
    return job.state is not JobState.PENDING and job.start_time is not None and job.end_time is None


class CellCache:
    """job_cells with a memory, for a view that re-reads the same queue every second.

    A job equal to the one of its id in the last call (the same object, or every
    field equal: Job is frozen) keeps its cells unformatted, unless its elapsed time
    runs (see ticks). Holds the last call's jobs only, so it never grows past the queue.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[Job, tuple[str, ...]]] = {}

    def unseen(self, jobs: Iterable[Job]) -> int:
        """How many of `jobs` the last call did not have (by id)."""
        known = self._known
        return sum(1 for job in jobs if job.id not in known)

    def cells(
        self, jobs: Sequence[Job], now: float, labels: Mapping[int, str] | None = None
    ) -> dict[int, tuple[str, ...]]:
        """What job_cells(jobs, now, labels) returns, reusing the last call's cells where it can.

        A job's label never changes while its id is listed (an array task's id is its own
        for good).
        """
        known = self._known
        kept: dict[int, tuple[Job, tuple[str, ...]]] = {}
        stale: list[Job] = []
        for job in jobs:
            last = known.get(job.id)
            if last is not None and (last[0] is job or last[0] == job) and not ticks(job):
                kept[job.id] = last
            else:
                stale.append(job)
        fresh = job_cells(stale, now, labels)
        kept.update((job.id, (job, fresh[job.id])) for job in stale)
        self._known = kept
        return {job_id: cells for job_id, (_, cells) in kept.items()}


# ---------------------------------------------------------------------------
# nodes

NODE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("what", "NODE/GPU"),
    ("state", "STATE"),
    ("memory", "MEM GiB"),
    ("util", "UTIL"),
    ("job", "JOB"),
    ("user", "USER"),
    ("note", "NOTE"),
)


class GpuUse:
    """How a GPU is used; the view colours each differently."""

    FREE = "free"
    ALLOCATED = "alloc"
    FOREIGN = "busy"  # not free (NodeInfo.free_indices) yet held by no gbatch job
    MIG = "mig"  # a card in MIG mode: its slices (the rows under it) are handed out


@dataclass(frozen=True)
class NodeRow:
    key: str  # `node:NAME` or `gpu:NAME:INDEX`, stable across refreshes
    cells: tuple[str, ...]
    use: str | None = None  # a GpuUse for GPU rows; None for a node's own row
    node_state: NodeState | None = None


def _gpu_row(node: NodeInfo, gpu: Gpu, owners: Mapping[int, str]) -> NodeRow:
    job = node.allocations.get(gpu.index)
    if gpu.mig:
        use = GpuUse.MIG
    elif job is not None:
        use = GpuUse.ALLOCATED
    elif gpu.index in node.free_indices:
        use = GpuUse.FREE
    else:  # the planner's meaning: a foreign process or memory, or a release settling
        use = GpuUse.FOREIGN
    notes = []
    card = next((c for c in node.shares if c.index == gpu.index), None)
    if card is not None:  # a shareable GPU: its shares and room (Fleet.card_shares)
        notes.append("shares " + card_text(card).partition(": ")[2])
    if gpu.foreign_processes:
        notes.append(f"{gpu.foreign_processes} outside gbatch")
    if gpu.simulated:
        notes.append("simulated")
    util = "n/a" if gpu.utilization_pct is None else f"{gpu.utilization_pct}%"
    cells = (
        # A MIG slice sits under its card, one step further in.
        ("    " if gpu.parent is not None else "  ")
        + f"gpu{gpu.index} "
        + (f"{printable(gpu.type)}: " if gpu.type else "")
        + printable(_short_gpu_name(gpu.name) if gpu.parent is None else f"MIG {gpu.profile}"),
        use,
        f"{gpu.memory_used_mib / 1024:.1f}/{gpu.memory_total_mib / 1024:.0f}",
        util,
        "" if job is None else str(job),
        "" if job is None else owners.get(job, "?"),
        ", ".join(notes),
    )
    return NodeRow(f"gpu:{node.name}:{gpu.index}", cells, use=use)


def _short_gpu_name(name: str) -> str:
    """`A100-SXM4-80GB` for `NVIDIA A100-SXM4-80GB`: every GPU here is NVIDIA's, and the
    NOTE column must still fit in 80 columns."""
    return name.removeprefix("NVIDIA ")


def node_rows(nodes: Sequence[NodeInfo], owners: Mapping[int, str]) -> list[NodeRow]:
    """One row per node, then one per GPU of it.

    A node's row shows its GPUs allocated, its state, and why it is drained/suspect/down.
    """
    rows = []
    for node in nodes:
        name = f"{printable(node.name)} {node.gpus_allocated}/{node.gpus_total} alloc"
        note = node_reason(node)
        if node.windows:  # the reservations' windows on it, now or to come
            window = "resv " + windows_text(node.windows)
            note = f"{note}; {window}" if note else window
        state = "maint" if node.maint else node.state.value
        cells = (name, state, "", "", "", "", note)
        rows.append(NodeRow(f"node:{node.name}", cells, node_state=node.state))
        rows.extend(_gpu_row(node, gpu, owners) for gpu in node.gpus_by_card)
    return rows
