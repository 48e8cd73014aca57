"""The job store: the only code that speaks SQL (docs/architecture.md, Store).

`Store` is one facade over the store's concerns, a module each, each a class of the
methods that concern offers (its public ones are its interface; a second backend would
implement the same), all sharing one connection (db.Database):

    db           the connection, transactions (_write, _reading), change numbers, errors
    schema       the migrations, one schema version each (PRAGMA user_version)
    rows         row <-> Job and ArrayTail codecs, and the caches of decoded rows
    events       job events, and the event log's lines of each transaction
    notices      what the store is handed to write notifications (Notices)
    outbox       the notifications outbox: rows owed, read, marked, pruned
    tails        array tails: an array's pending tasks as one record
    submit       queueing jobs, many submissions in one transaction
    transitions  state changes, holds, notes, spec updates, bulk changes
    reads        jobs by id and state, counts, briefs
    dependencies what dependencies are decided on: referenced jobs, array tasks
    listing      listings by filter, as Jobs or rows, streamed in pages
    pages        listing_page: sorted, searched pages
    window       the loop's planning window (RunnableWindow) and the change feed
    usage        fair-share usage and GPU usage samples
    nodes        drained nodes and node episodes
    steps        a job's steps (srun, salloc): opened, ended, listed
    reservations reservations (scontrol create reservation) and their story
    clusterjobs  jobs sent to a Slurm cluster's partition: intent, cluster id, mirror
    clusterlinks users' links to cluster partitions (per-user identity): sealed keys

The store writes what it is handed: whom an event is owed to and what it says come in
as Notices (gbatch/head/notify.py Policy); it imports nothing of the planner or the
notifier (tests/unit/test_import_layers.py).
"""

from __future__ import annotations

from gbatch.core.limits import PendingLimitReached
from gbatch.head.store.clusterjobs import ClusterJob, ClusterJobs
from gbatch.head.store.clusterlinks import ClusterLink, ClusterLinks
from gbatch.head.store.db import SECRET_KEY_FILE, JobNotFound, StoreError, StoreFull
from gbatch.head.store.dependencies import Dependencies
from gbatch.head.store.events import SUBMITTED
from gbatch.head.store.listing import LISTING_PAGE
from gbatch.head.store.nodes import Nodes
from gbatch.head.store.notices import Notices, Notification
from gbatch.head.store.pages import LISTING_SORTS, ListingQuery, Pages
from gbatch.head.store.preempt import Preempting, Preemptions
from gbatch.head.store.reads import JobBrief, Reads
from gbatch.head.store.reservations import Reservations
from gbatch.head.store.rows import ArrayTail, ListingPage, ListingSpecs, listing_spec, listing_specs
from gbatch.head.store.schema import MIGRATIONS
from gbatch.head.store.steps import StepBusy, StepRefused, Steps
from gbatch.head.store.submit import Submission, Submit
from gbatch.head.store.transitions import StateChange, Transitions
from gbatch.head.store.usage import Usage, UsageRecords
from gbatch.head.store.window import RunnableWindow, Window, planning_job, planning_spec

__all__ = [
    "LISTING_PAGE",
    "LISTING_SORTS",
    "MIGRATIONS",
    "SECRET_KEY_FILE",
    "SUBMITTED",
    "ArrayTail",
    "ClusterJob",
    "ClusterLink",
    "JobBrief",
    "JobNotFound",
    "ListingPage",
    "ListingQuery",
    "ListingSpecs",
    "Notices",
    "Notification",
    "PendingLimitReached",
    "Preempting",
    "RunnableWindow",
    "StateChange",
    "StepBusy",
    "StepRefused",
    "Store",
    "StoreError",
    "StoreFull",
    "Submission",
    "Usage",
    "listing_spec",
    "listing_specs",
    "planning_job",
    "planning_spec",
]


class Store(
    Submit,
    Preemptions,
    ClusterJobs,
    ClusterLinks,
    Transitions,
    Reads,
    Dependencies,
    Pages,
    Window,
    UsageRecords,
    Nodes,
    Steps,
    Reservations,
):
    """The job store: SQLite in WAL mode, one writer (gbatchd), every write one transaction.

    Store(path, notify=Notices or None, feed=event log lines or None).
    """
