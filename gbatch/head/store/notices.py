"""What the store is handed to write notifications, and the outbox rows it hands back.

Notices: whom each event is owed to and what it says (the notifier's decisions,
gbatch/head/notify.py Policy). Notification: the outbox's rows as the store hands them
back.

The store decides when an event happens (a state change, an array's last task
ending) and writes its rows in that change's transaction; who is told and in what
words is the notifier's to say, so the store imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from gbatch.core.model import Job, JobState

# One outbox row owed: (kind, channel, target, event id, payload as JSON text). A
# kind's destinations share its event id.
Owed = tuple[str, str, str, str, str]

# The outbox's attempt of an array's whole-array events (its job_id is the array's id):
# no run of a task has it, so one of them is owed once (outbox_once).
ARRAY_ATTEMPT = -1


class Notification(NamedTuple):
    """One outbox row: an event owed to one destination, not yet delivered."""

    id: int
    event_id: str
    kind: str
    channel: str  # MAIL or WEBHOOK
    target: str  # a mail address, or an admin webhook's name
    payload: Mapping[str, object]
    attempts: int


class Notices(Protocol):
    """Whom a job's, an array's or a node's event is owed to, and the rows that say it."""

    @property
    def active(self) -> bool:
        """Whether anyone may be owed anything (mail, or any webhook)."""
        ...

    def may_notify(self, old: JobState, new: JobState) -> bool:
        """Whether a change from `old` to `new` is an event at all.

        Asked before the job is read.
        """
        ...

    def job_events(self, old: JobState, job: Job) -> tuple[str, ...]:
        """The event kinds of `job` having just moved from `old` to its state."""
        ...

    def job_rows(self, job: Job, kinds: tuple[str, ...], now: float) -> list[Owed]:
        """The rows owed for `kinds` of `job` (its array's whole-array mail apart)."""
        ...

    def array_mailed(self, job: Job) -> bool:
        """Whether `job`'s array is mailed as a whole (array_begin_rows, array_end_rows)."""
        ...

    def array_begin_rows(self, job: Job, now: float) -> list[Owed]:
        """The rows owed when task `job` is its array's first to start."""
        ...

    def array_end_rows(
        self,
        job: Job,
        counts: Mapping[JobState, int],
        exit_codes: tuple[int, int],
        max_signal: int | None,
        now: float,
    ) -> list[Owed]:
        """The rows owed when the last task of `job`'s array ended.

        `counts`: its tasks in each final state; `exit_codes`: their exit codes' range;
        `max_signal`: their largest signal.
        """
        ...

    def node_rows(self, node: str, kind: str, reason: str, now: float) -> list[Owed]:
        """The rows owed for a node's event (NODE_DOWN, GPU_FOREIGN)."""
        ...

    def asked_in_spec(self, kind: str) -> Sequence[str] | None:
        """The spec keys of which a job needs one to be owed `kind`; None if any job may be.

        None when any job may be owed `kind` whatever its spec (an admin's webhook wants
        it).
        """
        ...


class _NoNotices:
    """Nobody is owed anything: a store opened without a notifier."""

    active = False

    def may_notify(self, old: JobState, new: JobState) -> bool:
        return False

    def job_events(self, old: JobState, job: Job) -> tuple[str, ...]:
        return ()

    def job_rows(self, job: Job, kinds: tuple[str, ...], now: float) -> list[Owed]:
        return []

    def array_mailed(self, job: Job) -> bool:
        return False

    def array_begin_rows(self, job: Job, now: float) -> list[Owed]:
        return []

    def array_end_rows(
        self,
        job: Job,
        counts: Mapping[JobState, int],
        exit_codes: tuple[int, int],
        max_signal: int | None,
        now: float,
    ) -> list[Owed]:
        return []

    def node_rows(self, node: str, kind: str, reason: str, now: float) -> list[Owed]:
        return []

    def asked_in_spec(self, kind: str) -> Sequence[str] | None:
        return ()


NO_NOTICES: Notices = _NoNotices()
