"""Job dependencies (sbatch's -d/--dependency): the grammar and its evaluation. Pure.

Slurm's grammar: `TYPE:ID[:ID...]` terms joined by `,` (all must hold) or by `?`
(any one is enough; each id then counts on its own), never both; and `singleton`.
An id is a job id `N`, an array task `N_K`, or a whole array `N_*` (the daemon rewrites
a plain `N` that names an array to `N_*` at submit, as scontrol shows it).

`after:N+MIN` holds MIN minutes after N started (or ended without starting: cancelled).
`afterany` holds once N ended, `afterok` once it COMPLETED (never when it ended
otherwise), `afternotok` once it ended in any other final state (never when it
COMPLETED), `aftercorr` like afterok for the task of the other array with the same
index as this one. `singleton`: no other job of the same user and name is on a node,
nor pending ahead of this one.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from gbatch.core.jobids import NUMBER
from gbatch.core.model import JobState

TYPES = ("after", "afterany", "afterok", "afternotok", "aftercorr")
SINGLETON = "singleton"
MAX_TEXT = 16 * 1024  # a dependency on a few hundred jobs; past this, use an array
MAX_REFS = 1000
USAGE = (
    "Use TYPE:ID[:ID...] with TYPE one of after, afterany, afterok, afternotok, aftercorr "
    "(after:ID+MINUTES too), or singleton; join terms with , (all) or ? (any)"
)

# Pending reasons, as Slurm's squeue prints them.
WAITING_REASON = "Dependency"
NEVER_REASON = "DependencyNeverSatisfied"


class DependencyError(ValueError):
    """A dependency text that is not Slurm's grammar; the message is one line."""


@dataclass(frozen=True, order=True)
class JobRef:
    """A job a dependency names: `N`, task K of array N (`N_K`) or all of array N (`N_*`)."""

    id: int
    task: int | None = None
    whole_array: bool = False

    def __str__(self) -> str:
        if self.whole_array:
            return f"{self.id}_*"
        return str(self.id) if self.task is None else f"{self.id}_{self.task}"


@dataclass(frozen=True)
class Term:
    """One `TYPE:ID[+MIN]...` (or singleton: kind "singleton", no refs)."""

    kind: str
    refs: tuple[JobRef, ...] = ()
    delays: tuple[int, ...] = ()  # minutes, per ref (after only; 0 elsewhere)

    def __str__(self) -> str:
        if self.kind == SINGLETON:
            return SINGLETON
        ids = ":".join(
            f"{ref}+{delay}" if delay else str(ref)
            for ref, delay in zip(self.refs, self.delays, strict=True)
        )
        return f"{self.kind}:{ids}"


@dataclass(frozen=True)
class Dependency:
    terms: tuple[Term, ...]
    any_of: bool = False  # joined by `?`

    def __str__(self) -> str:
        return ("?" if self.any_of else ",").join(map(str, self.terms))

    @property
    def refs(self) -> tuple[JobRef, ...]:
        return tuple(ref for term in self.terms for ref in term.refs)


# Ids and tasks as gbatch/core/jobids.py reads them (no leading zero, at most 18 digits).
_ID_RE = re.compile(rf"({NUMBER})(?:_({NUMBER}|\*))?(?:\+([0-9]{{1,9}}))?", re.ASCII)


@lru_cache(maxsize=4096)
def parse(text: str) -> Dependency:
    """The dependency `text` means; DependencyError (what is wrong and what to do)."""
    text = text.strip()
    if not text:
        raise DependencyError(f"the dependency is empty. {USAGE}")
    if len(text) > MAX_TEXT:
        raise DependencyError(
            f"the dependency is longer than {MAX_TEXT} characters. Depend on an array instead"
        )
    if "," in text and "?" in text:
        raise DependencyError(
            "both , and ? are used. Use one separator: , (all must hold) or ? (any one)"
        )
    any_of = "?" in text
    terms = [_parse_term(part) for part in text.split("?" if any_of else ",")]
    dependency = Dependency(tuple(terms), any_of)
    if len(dependency.refs) > MAX_REFS:
        raise DependencyError(f"more than {MAX_REFS} job ids. Depend on an array instead")
    return dependency


def _parse_term(part: str) -> Term:
    part = part.strip()
    if part == SINGLETON:
        return Term(SINGLETON)
    kind, colon, rest = part.partition(":")
    if kind not in TYPES:
        shown = part if len(part) <= 40 else part[:40] + "..."
        raise DependencyError(f"{shown!r} is not a dependency. {USAGE}")
    if not colon or not rest:
        raise DependencyError(f"{kind} names no job. Write {kind}:ID, e.g. {kind}:12")
    refs: list[JobRef] = []
    delays: list[int] = []
    for item in rest.split(":"):
        match = _ID_RE.fullmatch(item.strip())
        if match is None or int(match.group(1)) == 0:
            shown = item if len(item) <= 40 else item[:40] + "..."
            raise DependencyError(
                f"{shown!r} is not a job id. Use N, N_TASK or N_* (an array), e.g. {kind}:12"
            )
        job_id, task, delay = match.groups()
        if delay is not None and kind != "after":
            raise DependencyError(
                f"+{delay} (minutes) is for after only. Write after:{job_id}+{delay}, "
                f"or drop +{delay}"
            )
        refs.append(
            JobRef(
                int(job_id),
                None if task in (None, "*") else int(task),
                whole_array=task == "*",
            )
        )
        delays.append(int(delay or 0))
    return Term(kind, tuple(refs), tuple(delays))


def normalize(text: str) -> str:
    """The dependency as gbatch stores and shows it (DependencyError if not one)."""
    return str(parse(text))


def with_arrays(dependency: Dependency, arrays: set[int]) -> Dependency:
    """`dependency` with each plain id that is in `arrays` made `N_*`, all its tasks.

    `arrays` holds arrays' ids; this is how Slurm reads an array's id in a dependency.
    """
    terms = tuple(
        Term(
            term.kind,
            tuple(
                JobRef(ref.id, whole_array=True) if ref.task is None and ref.id in arrays else ref
                for ref in term.refs
            ),
            term.delays,
        )
        for term in dependency.terms
    )
    return Dependency(terms, dependency.any_of)


# ------------------------------------------------------------------------- evaluation


class Status(enum.Enum):
    SATISFIED = "satisfied"
    WAITING = "waiting"
    NEVER = "never"


class RefJob(NamedTuple):
    """What the evaluation needs of one referenced job."""

    state: JobState
    start_time: float | None
    end_time: float | None


def evaluate(
    dependency: Dependency,
    jobs: Mapping[int, RefJob],
    arrays: Mapping[int, Mapping[int, int]],
    now: float,
    *,
    task: int | None = None,
    singleton_free: bool = True,
) -> Status:
    """Whether `dependency` holds at `now`.

    `jobs`: job id -> its RefJob, for every job the dependency names (a job left out is
    taken as one that no longer exists: `after`/`afterany` hold, the others never).
    `arrays`: array id -> {task index: job id}, for each `N_K`, `N_*` and aftercorr id.
    `task`: the dependent's own array index (aftercorr). `singleton_free`: no other job
    of the dependent's user and name is on a node or pending ahead of it.
    """
    results: list[Status] = []
    for term in dependency.terms:
        if term.kind == SINGLETON:
            results.append(Status.SATISFIED if singleton_free else Status.WAITING)
            continue
        for ref, delay in zip(term.refs, term.delays, strict=True):
            ids = _ids_of(term.kind, ref, arrays, task)
            statuses = [_one(term.kind, jobs.get(job_id), delay, now) for job_id in ids]
            results.append(_all(statuses))
    return _any(results) if dependency.any_of else _all(results)


def tasks_named(
    dependents: Iterable[tuple[Dependency, int | None]],
) -> dict[int, tuple[set[int], bool]]:
    """The array tasks `evaluate` may look up for `dependents`, as {id: (indices, all)}.

    For each id whose being an array can change an answer (`N_K`, `N_*` and aftercorr
    ids): the task indices evaluate may look up alone in arrays[id], and whether it may
    also take all its tasks. `dependents` pairs each dependency with its dependent's own
    index (evaluate's `task`). An id not here is evaluated as itself whether or not it is
    an array's, so a dependency on one task of a large array costs that task, not the
    array.
    """
    named: dict[int, tuple[set[int], bool]] = {}
    for dependency, task in dependents:
        for term in dependency.terms:
            for ref in term.refs:
                if ref.task is not None:
                    index, whole = ref.task, False
                elif term.kind == "aftercorr" and task is not None:
                    index, whole = task, False
                elif ref.whole_array or term.kind == "aftercorr":
                    index, whole = None, True
                else:
                    continue
                indices, all_of = named.setdefault(ref.id, (set(), False))
                if index is not None:
                    indices.add(index)
                if whole and not all_of:
                    named[ref.id] = (indices, True)
    return named


def _ids_of(
    kind: str, ref: JobRef, arrays: Mapping[int, Mapping[int, int]], task: int | None
) -> Sequence[int]:
    tasks = arrays.get(ref.id)
    if tasks is None:
        return (ref.id,)
    if ref.task is not None:
        return (tasks[ref.task],) if ref.task in tasks else ()
    if kind == "aftercorr" and task is not None:
        # Slurm: a task with no counterpart in the other array has nothing to wait for.
        return (tasks[task],) if task in tasks else ()
    if ref.whole_array or kind == "aftercorr":
        return tuple(tasks.values())
    return (ref.id,)


def _one(kind: str, job: RefJob | None, delay: int, now: float) -> Status:
    if job is None:
        return Status.SATISFIED if kind in ("after", "afterany") else Status.NEVER
    ended = job.state.is_final
    if kind == "after":
        if job.start_time is not None:
            since = job.start_time
        elif ended:  # cancelled (or failed) before it started
            since = job.end_time if job.end_time is not None else now
        else:
            return Status.WAITING
        return Status.SATISFIED if now >= since + 60 * delay else Status.WAITING
    if not ended:
        return Status.WAITING
    if kind == "afterany":
        return Status.SATISFIED
    ok = job.state is JobState.COMPLETED
    if kind in ("afterok", "aftercorr"):
        return Status.SATISFIED if ok else Status.NEVER
    return Status.NEVER if ok else Status.SATISFIED  # afternotok


def _all(statuses: Sequence[Status]) -> Status:
    if Status.NEVER in statuses:
        return Status.NEVER
    if Status.WAITING in statuses:
        return Status.WAITING
    return Status.SATISFIED


def _any(statuses: Sequence[Status]) -> Status:
    if Status.SATISFIED in statuses:
        return Status.SATISFIED
    if Status.WAITING in statuses:
        return Status.WAITING
    return Status.NEVER


def reason_for(status: Status) -> str | None:
    """The pending reason of a job whose dependency has `status` (None: it may run)."""
    if status is Status.WAITING:
        return WAITING_REASON
    if status is Status.NEVER:
        return NEVER_REASON
    return None


def shown(text: str, reason: str) -> str:
    """scontrol's `Dependency=` value for dependency `text` of a job pending for `reason`.

    Each term is marked (unfulfilled) while the job waits (reason Dependency), (failed)
    once it can never hold (DependencyNeverSatisfied); `(null)` when there is none left to
    wait for (no text, or any other reason). Every term gets the same mark, whether or not
    that term alone already holds: the reason is all this knows. A text that no longer
    parses is shown whole, the mark after it.
    """
    if not text or reason not in (WAITING_REASON, NEVER_REASON):
        return "(null)"
    mark = "(failed)" if reason == NEVER_REASON else "(unfulfilled)"
    try:
        dependency = parse(text)
    except DependencyError:
        return text + mark
    sep = "?" if dependency.any_of else ","
    return sep.join(f"{term}{mark}" for term in dependency.terms)
