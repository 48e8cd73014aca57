"""Job ids as users write them, one grammar for every command and for the daemon.

    N            a job (or, when N is an array's id, the whole array, as in Slurm)
    N_K          task K of array N
    N_[K-M,J]    several tasks of array N
    FIRST-LAST   every job with an id in that range (scancel, scontrol hold/...)

and comma lists of those (`12,13_2,20_[1-3]`). Numbers are plain decimal digits, at most
18 of them (SQLite's integers hold 19; 18 keeps every id and task inside them), with no
sign, no `_` separator, no space and no leading zero: `4_5` is task 5 of array 4, never
job 45, and no text names a job other than the one it reads as. Each command takes
some of these forms (`Forms`: ANY, ONE, JOBS) and its refusal offers just those.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gbatch.core.constants import MAX_ID_DIGITS as MAX_DIGITS
from gbatch.core.constants import MAX_ID_TEXT as MAX_TEXT
from gbatch.core.labels import folded_label, format_spans
from gbatch.core.model import Job, JobState

# A number as every id grammar reads it (dependency.py's too): canonical decimal.
NUMBER = rf"(?:0|[1-9][0-9]{{0,{MAX_DIGITS - 1}}})"
_NUMBER = NUMBER
_SPAN = rf"{_NUMBER}(?:-{_NUMBER})?"
_ITEM = re.compile(
    rf"(?P<job>{_NUMBER})"
    rf"(?:-(?P<last>{_NUMBER})"
    rf"|_(?P<task>{_NUMBER})"
    rf"|_\[(?P<tasks>{_SPAN}(?:,{_SPAN})*)\])?"
)
# Commas split items except inside the brackets of a task list.
_SPLIT = re.compile(r",(?![^\[]*\])")


class JobIdError(ValueError):
    """Text that is not a job id; the message names it and says what to write."""


@dataclass(frozen=True)
class Forms:
    """Which forms of the grammar a command takes, and the usage its refusals give.

    A command that takes one job never offers a list or a range in its error.
    """

    usage: str
    several: bool = True  # a comma list
    ranges: bool = True  # FIRST-LAST
    tasks: bool = True  # N_K, N_[K]
    task_lists: bool = True  # N_[K-M,J]


# scancel, scontrol hold/release/requeue, squeue -j, sacct -j (and the daemon).
ANY = Forms(
    "Give N, N_K (task K of array N), N_[K-M] or FIRST-LAST, or a comma list of those, "
    "e.g. 12,13_2,20_[1-3]"
)
# scontrol show job and update, logs, seff.
ONE = Forms(
    "Give N or N_K (task K of array N), e.g. 12 or 12_3",
    several=False,
    ranges=False,
    task_lists=False,
)
# sprio -j.
JOBS = Forms(
    "Give N or a comma list of those, e.g. 12,13", ranges=False, tasks=False, task_lists=False
)


@dataclass(frozen=True)
class JobTarget:
    """One item of a job id list: a job, a range of ids, or tasks of an array.

    Job `job`; with `last`, every id job..last; with `tasks`, those tasks (inclusive
    spans) of the array whose id is `job`.
    """

    job: int
    last: int | None = None
    tasks: tuple[tuple[int, int], ...] | None = None

    def __str__(self) -> str:
        if self.last is not None:
            return f"{self.job}-{self.last}"
        if self.tasks is None:
            return str(self.job)
        if len(self.tasks) == 1 and self.tasks[0][0] == self.tasks[0][1]:
            return f"{self.job}_{self.tasks[0][0]}"
        return f"{self.job}_[{format_spans(self.tasks)}]"

    @property
    def single_task(self) -> int | None:
        """K of `N_K`; None for anything else."""
        if self.tasks is not None and len(self.tasks) == 1 and self.tasks[0][0] == self.tasks[0][1]:
            return self.tasks[0][0]
        return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def parse_job_ids(text: str, forms: Forms = ANY) -> list[JobTarget]:
    """The targets a comma list of job ids names, in order.

    JobIdError for anything else: an empty item, a sign, a space, `_` between digits,
    more than 18 digits, a zero job id, a range or task span that runs backwards, or a
    form `forms` does not take; the message names the bad item and ends in `forms.usage`.
    """
    usage = forms.usage
    if len(text) > MAX_TEXT:
        advice = "Name a range or an array" if forms.ranges else usage
        raise JobIdError(f"more than {MAX_TEXT} characters of job ids. {advice}")
    targets = []
    for item in _SPLIT.split(text):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise JobIdError(f"{_shown(item)} is not a job id. {usage}")
        job = int(match["job"])
        if job == 0:
            raise JobIdError(f"{_shown(item)} is not a job id: ids start at 1. {usage}")
        if match["last"] is not None:
            last = int(match["last"])
            if not forms.ranges:
                raise JobIdError(f"{_shown(item)}: a range of ids is not taken here. {usage}")
            if last < job:
                raise JobIdError(f"{_shown(item)} runs backwards. Write {last}-{job}")
            targets.append(JobTarget(job, last=last))
        elif match["task"] is not None or match["tasks"] is not None:
            spans = []
            for span in (match["task"] or match["tasks"]).split(","):
                first, _, last_text = span.partition("-")
                a, b = int(first), int(last_text or first)
                if b < a:
                    raise JobIdError(f"{_shown(item)}: task span {span} runs backwards")
                spans.append((a, b))
            if not forms.tasks:
                raise JobIdError(
                    f"{_shown(item)}: not an array task here; name the task by its own job id "
                    f"(`gbatch sacct -j {job} -o JobID,JobIDRaw` shows it). {usage}"
                )
            if not forms.task_lists and spans != [(spans[0][0],) * 2]:
                raise JobIdError(f"{_shown(item)}: one task here, not several. {usage}")
            targets.append(JobTarget(job, tasks=tuple(spans)))
        else:
            targets.append(JobTarget(job))
    if not forms.several and len(targets) > 1:
        raise JobIdError(f"{_shown(text)}: one job here, not a list. {usage}")
    return targets


def parse_one_job(text: str, forms: Forms = ONE) -> JobTarget:
    """The one job `text` names: `N` or `N_K` (logs, scontrol show job), or as `forms` says.

    JobIdError for any other text. `forms` must take one job only: forms that take a list
    are a caller's mistake (ValueError).
    """
    if forms.several:
        raise ValueError("parse_one_job needs forms that take one job")
    return parse_job_ids(text, forms)[0]


def job_label(job: Job) -> str:
    """A job's id as Slurm shows it: `N_K` for task K of array N, else `N`.

    A record standing for more pending tasks (Job.array_more) reads `N_[K-M]`, with the
    array's `%MAX` when it is throttled.
    """
    array = job.array_job_id
    if array is None:
        return str(job.id)
    if job.array_more:
        return folded_label(
            array, [(job.spec.array_task or 0,) * 2, *job.array_more], job.spec.array_throttle
        )
    return f"{array}_{job.spec.array_task}"


_PENDING = JobState.PENDING  # a global: Enum member access through the class is slow


def collapse_pending(jobs: Sequence[Job]) -> list[tuple[Job, str]]:
    """squeue's default rows: each job with its label, an array's PENDING tasks as one row.

    The PENDING tasks of one array fold into one row `N_[4-15]` (at the place of its
    first), as Slurm shows them. A record standing for more tasks (Job.array_more) folds
    them in too.
    """
    tasks: dict[int, list[tuple[int, int]]] = {}
    for job in jobs:
        if job.state is _PENDING and job.array_job_id is not None:
            spans = tasks.setdefault(job.array_job_id, [])
            spans.append((job.spec.array_task or 0,) * 2)
            spans.extend(job.array_more)
    rows: list[tuple[Job, str]] = []
    shown: set[int] = set()
    for job in jobs:
        array = job.array_job_id
        if job.state is not _PENDING or array is None:
            rows.append((job, job_label(job)))
        elif array not in shown:
            shown.add(array)
            spans = tasks[array]
            single = len(spans) == 1 and spans[0][0] == spans[0][1]
            rows.append(
                (
                    job,
                    f"{array}_{spans[0][0]}"
                    if single
                    else folded_label(array, spans, job.spec.array_throttle),
                )
            )
    return rows


def expand_more(job: Job, positions_of: Callable[[int], int]) -> list[Job]:
    """A record standing for more tasks as one Job per task (squeue -r); any other as itself.

    Task K is job `array id + positions_of(K)`.
    """
    if not job.array_more:
        return [job]
    array = job.array_job_id
    assert array is not None
    out = [replace(job, array_more=())]
    for first, last in job.array_more:
        for index in range(first, last + 1):
            pos = positions_of(index)
            spec = replace(job.spec, array_task=index, array_pos=pos)
            out.append(replace(job, id=array + pos, spec=spec, array_more=()))
    return out
