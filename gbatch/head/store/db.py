"""The store's connection: one SQLite file in WAL mode, its transactions and change numbers.

Its transactions (`_write`, `_reading`), change numbers, migrations, and the errors a
write leaves with.

SQLite in WAL mode with synchronous=FULL, so a commit that `sbatch` acknowledged
survives a power cut. Every write is one `BEGIN IMMEDIATE` transaction. The daemon
is the only writer; its threads share one connection behind a lock. A long read (a
listing streamed into its reply) takes a connection of its own (`_reading`), so
that writers are not kept waiting while it is read.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gbatch.core.model import Job
from gbatch.head.secretbox import SecretBox
from gbatch.head.store import schema
from gbatch.head.store.lock import StoreLock
from gbatch.head.store.notices import NO_NOTICES, Notices
from gbatch.head.store.rows import (
    _JOB_COLUMNS,
    ListingPage,
    _job_from_row,
    _jobs_from_rows,
    _top_change,
)
from gbatch.site.config import make_private

# The key that seals job_secrets, beside the store in the daemon's home.
SECRET_KEY_FILE = "secrets.key"
# Read connections kept idle for _reading (a listing streaming holds one).
_IDLE_READERS = 4


class StoreError(Exception):
    """The store cannot do what was asked (a missing job, a full disk)."""


class StoreFull(StoreError):
    """A write found the store's disk full (SQLITE_FULL); nothing of it was written.

    Its transaction rolled back, and what was committed before is intact.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__(f"the job store cannot write: disk full ({directory})")
        self.directory = directory


class JobNotFound(StoreError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} does not exist")
        self.job_id = job_id


def _is_disk_full(err: sqlite3.OperationalError) -> bool:
    """SQLITE_FULL: the disk (or SQLite's max_page_count) has no room for the write."""
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == sqlite3.SQLITE_FULL)
    return "database or disk is full" in str(err)


class Database:
    """The state every concern of the store shares, beginning with the one connection.

    The connection and its lock, the write transaction and its change number, read
    connections, the secret box, the event log's lines of the open transaction, and whom
    events are owed to.
    """

    def __init__(
        self,
        path: Path,
        notify: Notices | None = None,
        feed: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        """`notify`: whom job events are owed to and what they say (none by default:
        notify.Policy is the daemon's); they are written to the outbox with the state
        change they tell of. `feed`: given the event log's
        lines (gbatch/head/eventlog.py) of each transaction's events once it commits, in
        commit order; it must not raise."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._notify: Notices = notify or NO_NOTICES
        self._feed = feed
        self._feed_lines: list[str] = []  # the open transaction's, for the feed
        # Called (under the store's lock: it must not block) at the first write a full
        # disk fails since the last that committed: once per spell of full disk.
        self.on_full: Callable[[StoreFull], None] | None = None
        self._full = False
        self._change: int | None = None  # the open transaction's change number, once asked
        # listing_page's latest pages, by their query and the jobs' change number (pages).
        self._pages: dict[tuple[object, ...], ListingPage] = {}
        # Write transactions begun (committed or not). All of them go through _write,
        # on this one object, gbatchd being the store's only writer.
        self._writes = 0
        # settled()'s: durable write transactions begun, and those ended (committed or
        # rolled back). Telemetry's (not durable) write no job and are not counted.
        self._settled_begun = 0
        self._settled_ended = 0
        self._telemetry = False  # a write not durable is open
        # user -> (their pending jobs, the write transaction that left them so): what
        # submit_many's last commit knew. Used only while that transaction is the last
        # one written, so the count is exact (max_pending_jobs), not re-counted over the
        # user's pending jobs (slow when they are many) on each of a burst's submits.
        self._pending_known: dict[str, tuple[int, int]] = {}
        # Jobs' env values and commands are in it: the owner's alone, whatever the umask.
        # SQLite gives the -wal and -shm files the mode of the database file; ones left
        # by an older gbatch are closed here too.
        make_private(path)
        for companion in (f"{path}-wal", f"{path}-shm"):
            if os.path.exists(companion):
                make_private(Path(companion))
        self._lock = StoreLock()  # a submit's work first (store/lock.py)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        self._secrets = SecretBox(path.parent / SECRET_KEY_FILE)
        # Idle read connections for _reading (each used by one reader at a time).
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def close(self) -> None:
        with self._readers_lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
        with self._lock:
            self._db.close()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read connection of its own, in one read transaction for the block: what it
        reads is one snapshot, and, the store being in WAL mode, writers on the main
        connection go on meanwhile (the snapshot holds back only the WAL's checkpoint).
        Not behind the store's lock: a read of 1,000,000 rows must not stop the loop."""
        with self._readers_lock:
            db = self._readers.pop() if self._readers else None
        if db is None:
            db = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=30
            )
            db.execute("PRAGMA query_only=1")
        try:
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")
        except BaseException:
            db.close()
            raise
        with self._readers_lock:
            if len(self._readers) < _IDLE_READERS:
                self._readers.append(db)
                return
        db.close()

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        with self._write():
            version = self.schema_version
            if version > len(schema.MIGRATIONS):
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this gbatch "
                    f"knows ({len(schema.MIGRATIONS)}). Upgrade gbatch"
                )
            for number, script in enumerate(schema.MIGRATIONS[version:], start=version + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")

    @contextmanager
    def _write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: committed when the block ends, rolled back
        when it raises. SQLite's own errors leave as StoreError (StoreFull for a full
        disk), never as sqlite3 exceptions.

        Not `durable`: committed without waiting for the disk (synchronous=NORMAL for it:
        a crash of gbatchd loses none of it, one of the machine may lose the last such
        commits, made durable by the next durable one's fsync). For telemetry alone (GPU
        samples, written at each report: while jobs end, many a second), so that its
        fsyncs do not hold the store's lock before the submits and starts (issue 35)."""
        if not durable:
            with self._lock:
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._telemetry = True
                try:
                    with self._write() as db:
                        yield db
                finally:
                    self._telemetry = False
                    self._db.execute("PRAGMA synchronous=FULL")
            return
        with self._lock:
            self._feed_lines.clear()
            self._change = None
            self._writes += 1
            counted = not self._telemetry
            if counted:
                self._settled_begun += 1
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    self._feed_lines.clear()
                    self._rollback()
                    raise
            except sqlite3.OperationalError as err:
                error = self._write_error(err)
                if isinstance(error, StoreFull) and not self._full:
                    self._full = True
                    if self.on_full is not None:
                        self.on_full(error)
                raise error from err
            finally:
                if counted:
                    self._settled_ended += 1
            self._full = False
            # After the commit (a line never tells of a change that rolled back), still
            # under the lock, so the lines are in the order the changes committed in.
            if self._feed is not None and self._feed_lines:
                lines, self._feed_lines = self._feed_lines, []
                self._feed(lines)

    def settled(self) -> int | None:
        """The durable write transactions begun so far, when none is open; None while one is.

        Two equal answers taken around a read on a connection of its own (_reading)
        bracket a snapshot no write changed: it holds exactly what those writes left,
        and so does any later read that gets the same answer first. Every write to the
        store goes through _write (gbatchd is its only writer), so any change to jobs or
        array tails moves it (issue 35: squeue's listing kept). Telemetry's writes (not
        durable: GPU samples, many a second while jobs run) write no job, and leave it."""
        begun = self._settled_begun
        return begun if begun == self._settled_ended else None

    def _change_number(self, db: sqlite3.Connection) -> int:
        """The open transaction's change number (migration 11), for every jobs row it
        writes: above every row's, so a reader that saw up to N asks for rows > N. One
        index seek per transaction that writes jobs; computed in it, so whichever
        connection wrote last, the numbers only grow."""
        if self._change is None:
            self._change = _top_change(db) + 1
        return self._change

    def _rollback(self) -> None:
        # On SQLITE_FULL SQLite may already have rolled the transaction back itself;
        # a second ROLLBACK would then raise and hide the error that matters.
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _write_error(self, err: sqlite3.OperationalError) -> StoreError:
        if _is_disk_full(err):
            return StoreFull(self.path.parent)
        return StoreError(f"could not write to {self.path}: {err}")

    def first(self) -> contextlib.AbstractContextManager[None]:
        """A block whose waits for the store's lock go before other threads' next takes.

        A submit's, so that it does not wait behind the loop's starts (store/lock.py)."""
        return self._lock.first()

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM jobs").fetchone()[0])

    # -- jobs rows, for every concern -------------------------------------------------

    def _select(self, where: str, params: Iterable[object]) -> list[Job]:
        return self._select_raw(f"{where} ORDER BY id", params)

    def _select_raw(self, tail: str, params: Iterable[object]) -> list[Job]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {tail}", tuple(params)
            ).fetchall()
        return _jobs_from_rows(rows)

    @staticmethod
    def _get(db: sqlite3.Connection, job_id: int) -> Job | None:
        row = db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job_from_row(row) if row else None
