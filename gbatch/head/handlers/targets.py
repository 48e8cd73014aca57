"""The jobs a request names, read a batch at a time, and the tally of what was done to them.

`scancel -u student` over 500,000 pending jobs must neither stall the daemon nor hold
500,000 Jobs in memory. So the requests over many jobs (cancel, hold, release, requeue)
read the jobs they name a batch at a time as JobBriefs (id, owner, state), and pending
jobs are cancelled, held or released by set in one transaction per batch
(Store.cancel_pending, set_held_many). The store's lock is let go between batches, so
other requests and the loop run meanwhile. Running jobs are few: they go one by one
through set_states, and the loop signals them.

A reply lists only what failed ({"id", "ok": false, "error"}), the first
LISTED_FAILURES of them, and counts: {"results": [...], "done": N, "failed": M}.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gbatch.core.constants import MAX_ID_DIGITS
from gbatch.core.jobids import NUMBER, JobIdError, parse_job_ids
from gbatch.core.limits import ARRAY_HARD_CAP
from gbatch.core.model import Job, JobState
from gbatch.core.selection import JobFilter
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit, audit_jobs, loggable
from gbatch.head.handlers.auth import may_act_on
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.store import JobBrief
from gbatch.protocol import requests

# The most tasks an array holds, and so the most a request's N_[K-M] may name.
MAX_ARRAY = ARRAY_HARD_CAP


def named_job(daemon: Daemon, caller: Caller, job_id: int, op: str, task: int | None = None) -> Job:
    """The one job a request names, or Refused (not_found) as Slurm says it.

    With `task`, task `task` of the array `job_id` (N_K). Under private_data another
    user's job answers as a job that does not exist (Slurm's PrivateData=jobs), and the
    attempt is audited."""
    if task is not None:
        tasks = daemon.store.array_tasks_in(job_id, ((task, task),), MAX_ARRAY)
        if task not in tasks:
            raise Refused("not_found", f"Invalid job id specified: {job_id}_{task}")
        job_id = tasks[task]
    found = stored_job(daemon, job_id)
    if daemon.config.private_data and not may_act_on(daemon, caller, found):
        audit(daemon, caller, op, found, "refused: not the owner (private_data: not found)")
        raise Refused("not_found", f"Invalid job id specified: {found.id}")
    return found


def stored_job(daemon: Daemon, job_id: int) -> Job:
    """The job `job_id` as stored; Refused (not_found) when there is none."""
    job = daemon.store.get(job_id)
    if job is None:
        raise Refused("not_found", f"Invalid job id specified: {job_id}")
    return job


def parse_states(states: Sequence[str]) -> list[JobState] | None:
    """A request's state filter (names or codes, any case); None when empty."""
    if not states:
        return None
    try:
        return [JobState.parse(s) for s in states]
    except ValueError as err:
        raise Refused("invalid", f"unknown job state {err}. Use e.g. PD, R, CD or PENDING") from err


# Jobs per batch: one read and one transaction each, short enough that a squeue waits
# little behind one.
BULK_BATCH = 5000
LISTED_FAILURES = 1000
# The longest the audit line of a request's refusals makes its list of job ids.
AUDITED_IDS = 5


@dataclass
class _Refusals:
    """Jobs of one request refused for one reason: how many, the first few and owners."""

    count: int = 0
    ids: list[int] = field(default_factory=list)
    owners: set[str] = field(default_factory=set)
    first: JobBrief | None = None


class Tally:
    """What a request over many jobs did: how many it acted on, what failed, what was refused.

    Failures: the first LISTED_FAILURES kept, all counted. Refusals: each kind audited in
    ONE line when the request ends (a refused sweep of 500,000 jobs is one line, not
    500,000)."""

    def __init__(self, daemon: Daemon, caller: Caller, op: str) -> None:
        self.daemon = daemon
        self.caller = caller
        self.op = op
        self.done = 0
        self.failed = 0
        self.failures: list[dict[str, Any]] = []
        self._refused: dict[str, _Refusals] = {}  # by the audit line's outcome

    def fail(self, target: int | str, error: str) -> None:
        """Count `target` failed with `error`, listed when under LISTED_FAILURES."""
        self.failed += 1
        if len(self.failures) < LISTED_FAILURES:
            self.failures.append({"id": target, "ok": False, "error": error})

    def refuse(self, job: JobBrief, outcome: str, error: str | None) -> None:
        """Refuse `job`, audited with `outcome`; `error`, when given, is what the caller reads.

        None: the job is left out silently, as one private_data hides in a range.
        """
        refused = self._refused.setdefault(outcome, _Refusals(first=job))
        refused.count += 1
        if len(refused.ids) < AUDITED_IDS:
            refused.ids.append(job.id)
            refused.owners.add(job.user)
        if error is not None:
            self.fail(job.id, error)

    def finish(self) -> dict[str, Any]:
        """Audit the refusals and return the reply's fields."""
        for outcome, refused in self._refused.items():
            if refused.count == 1 and refused.first is not None:
                audit(self.daemon, self.caller, self.op, refused.first, outcome)
            else:
                audit_jobs(
                    self.daemon,
                    self.caller,
                    self.op,
                    refused.count,
                    refused.ids,
                    refused.owners,
                    outcome,
                )
        return {"results": self.failures, "done": self.done, "failed": self.failed}


# FIRST-LAST in the job id grammar's numbers: at most 18 plain digits each, so that an
# id of a range fits the store's integers (a longer one overflowed there).
_RANGE = re.compile(rf"({NUMBER})-({NUMBER})")
_LONG = re.compile(rf"[0-9]{{{MAX_ID_DIGITS + 1}}}")


def _ranges(texts: Sequence[str]) -> list[tuple[int, int]]:
    """`FIRST-LAST` job id ranges (an array as sbatch printed it), checked."""
    ranges = []
    for text in texts:
        match = _RANGE.fullmatch(text)
        if match is None or not 0 < int(match[1]) <= int(match[2]):
            why = f": an id has at most {MAX_ID_DIGITS} digits" if _LONG.search(text) else ""
            raise Refused(
                "invalid",
                f"ranges: {loggable(text, 40)!r} is not a range of job ids{why}. Use "
                "FIRST-LAST, e.g. 12-511",
            )
        ranges.append((int(match[1]), int(match[2])))
    return ranges


def request_targets(
    daemon: Daemon,
    request: requests.Cancel
    | requests.Hold
    | requests.Release
    | requests.Requeue
    | requests.ListJobs,
    tally: Tally | None,
    arrays: list[tuple[int, int]] | None = None,
) -> tuple[list[int], list[tuple[int, int]]]:
    """The ids and id ranges a request names: its `ids`, `ranges` and `jobs` texts.

    A `jobs` text is read by gbatch/core/jobids.py; the request is refused whole when one
    is not a job id. An array's id
    names all its tasks, `N_K` and `N_[K-M]` the tasks of array N; a task or array
    that does not exist fails "Invalid job id specified" (with `tally`). `arrays`, when
    given, receives the ranges that are whole arrays named by their id."""
    ranges = _ranges(getattr(request, "ranges", ()))
    ids = list(request.ids)
    plain: list[int] = []
    for text in request.jobs:
        try:
            targets = parse_job_ids(text)
        except JobIdError as err:
            raise Refused("invalid", f"jobs: {err}") from None
        for target in targets:
            if target.last is not None:
                ranges.append((target.job, target.last))
            elif target.tasks is None:
                plain.append(target.job)
            else:
                tasks = daemon.store.array_tasks_in(target.job, target.tasks, MAX_ARRAY)
                chosen = list(tasks.values())
                if not chosen and tally is not None:
                    tally.fail(str(target), f"Invalid job id specified: {target}")
                ids.extend(sorted(chosen))
    ends = daemon.store.array_ends(plain, MAX_ARRAY) if plain else {}
    for job_id in plain:
        if job_id in ends:
            ranges.append((job_id, ends[job_id]))
            if arrays is not None:
                arrays.append((job_id, ends[job_id]))
        else:
            ids.append(job_id)
    if ids and not isinstance(request, requests.ListJobs):
        # Tasks named alone that still wait in their array's tail become rows, so that
        # what acts on one job (cancel, hold, requeue) acts on them. A listing reads
        # them where they are.
        daemon.store.materialise(ids)
    return ids, ranges


def named_briefs(
    daemon: Daemon,
    caller: Caller,
    tally: Tally,
    ids: Sequence[int],
    ranges: Sequence[tuple[int, int]],
    admin: bool,
    narrow: JobFilter | None = None,
) -> Iterator[list[JobBrief]]:
    """The jobs a request names, a batch of JobBriefs at a time.

    With `narrow` (scancel -n/-p/-w), each brief's `kept` says whether its job passes.

    `ids` in their order, then each range's jobs by id. An id without a job fails
    "Invalid job id specified", and so does a range without one. Under private_data
    another user's job is as one that does not exist (Slurm's PrivateData=jobs), and the
    attempt is audited."""
    hide = daemon.config.private_data and not admin
    private = "refused: not the owner (private_data: not found)"
    for start in range(0, len(ids), BULK_BATCH):
        part = ids[start : start + BULK_BATCH]
        found = {brief.id: brief for brief in daemon.store.briefs(part, narrow)}
        batch = []
        for job_id in part:
            brief = found.get(job_id)
            if brief is None:
                tally.fail(job_id, f"Invalid job id specified: {job_id}")
            elif hide and brief.uid != caller.uid:
                tally.refuse(brief, private, f"Invalid job id specified: {job_id}")
            else:
                batch.append(brief)
        yield batch
    for first, last in ranges:
        after, seen = first - 1, False
        while page := daemon.store.briefs_between(
            first, last, after=after, limit=BULK_BATCH, narrow=narrow
        ):
            after = page[-1].id
            batch = []
            for brief in page:
                if hide and brief.uid != caller.uid:
                    tally.refuse(brief, private, None)
                else:
                    batch.append(brief)
            seen = seen or bool(batch)
            yield batch
        if not seen:
            tally.fail(f"{first}-{last}", f"Invalid job id specified: {first}-{last}")


def owned(caller: Caller, admin: bool, tally: Tally, batch: list[JobBrief]) -> list[JobBrief]:
    """Those of `batch` the caller may act on; the others are refused (and audited)."""
    mine = []
    for brief in batch:
        if admin or brief.uid == caller.uid:
            mine.append(brief)
        else:
            tally.refuse(
                brief, "refused: not the owner", f"Access/permission denied for job {brief.id}"
            )
    return mine
