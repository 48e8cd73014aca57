"""A store that SQLite itself finds full, without filling a disk, and its integrity
check: shared by the store's and the handlers' unit tests (pytest puts tests/ on
sys.path)."""

from __future__ import annotations

import sqlite3

import pytest

from gbatch.head.store import Store


def pack_store(store: Store, pad_job: int) -> None:
    """Make the next write that adds an event fail with SQLite's real SQLITE_FULL
    ("database or disk is full"): the file may not grow, and the events table's last
    page is packed with padding events of `pad_job`."""
    db = store._db
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        for _ in range(100_000):
            db.execute(
                "INSERT INTO events (job_id, time, state, reason) VALUES (?, 0, 'PENDING', '')",
                (pad_job,),
            )


def unpack_store(store: Store) -> None:
    store._db.execute("PRAGMA max_page_count = 1073741823")


def integrity_ok(store: Store) -> bool:
    """SQLite's own check of the store's file, on the store's connection."""
    return bool(store._db.execute("PRAGMA integrity_check").fetchall() == [("ok",)])
