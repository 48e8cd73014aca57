"""Reservations as the store keeps them (migration 19): each record, and its story.

Every change is one transaction with its event (reservation_events), so a restarted
gbatchd has every reservation and knows which window's start and end it told.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gbatch.core.reservations import Reservation
from gbatch.head.store.outbox import Outbox


class Reservations(Outbox):
    """Reservations: made, changed, deleted, their windows' start and end told."""

    _reservation_cache: tuple[Reservation, ...] | None = None

    def reservations(self) -> tuple[Reservation, ...]:
        """Every reservation, by name (kept in memory: gbatchd is the only writer)."""
        cached = self._reservation_cache
        if cached is not None:
            return cached
        with self._lock:
            rows = self._db.execute("SELECT record FROM reservations ORDER BY name").fetchall()
        cached = tuple(Reservation.from_dict(json.loads(row[0])) for row in rows)
        self._reservation_cache = cached
        return cached

    def put_reservation(self, reservation: Reservation, what: str, now: float) -> None:
        """Write `reservation` (made or changed) with its event `what`, in one transaction."""
        record = json.dumps(reservation.to_dict(), sort_keys=True)
        with self._write() as db:
            db.execute(
                "INSERT INTO reservations (name, record) VALUES (?, ?)"
                " ON CONFLICT(name) DO UPDATE SET record = excluded.record",
                (reservation.name, record),
            )
            db.execute(
                "INSERT INTO reservation_events (name, time, what) VALUES (?, ?, ?)",
                (reservation.name, now, what),
            )
        self._reservation_cache = None

    def delete_reservation(self, name: str, what: str, now: float) -> bool:
        """Delete reservation `name` with its event; False when there is none."""
        with self._write() as db:
            gone = db.execute("DELETE FROM reservations WHERE name = ?", (name,)).rowcount > 0
            if gone:
                db.execute(
                    "INSERT INTO reservation_events (name, time, what) VALUES (?, ?, ?)",
                    (name, now, what),
                )
        self._reservation_cache = None
        return gone

    def reservation_told(self) -> dict[str, tuple[float, float]]:
        """name -> (the window start told begun, the window end told over)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT name, told_start, told_end FROM reservations"
            ).fetchall()
        return {name: (start, end) for name, start, end in rows}

    def tell_reservation(
        self,
        reservation: Reservation,
        start: float | None,
        end: float | None,
        what: str,
        now: float,
        *,
        delete: bool = False,
    ) -> None:
        """Record that a window of `reservation` began (`start`) or ended (`end`).

        In one transaction: its event, the notification owed to the admins' webhooks that
        ask (RESV_START, RESV_END) and the event log's line; with `delete`, the
        reservation is gone (a window that does not repeat, over)."""
        name = reservation.name
        nodes = ",".join(reservation.node_names)
        with self._write() as db:
            if start is not None:
                db.execute("UPDATE reservations SET told_start = ? WHERE name = ?", (start, name))
            if end is not None:
                db.execute("UPDATE reservations SET told_end = ? WHERE name = ?", (end, name))
            if delete:
                db.execute("DELETE FROM reservations WHERE name = ?", (name,))
            db.execute(
                "INSERT INTO reservation_events (name, time, what) VALUES (?, ?, ?)",
                (name, now, what),
            )
            kind = "RESV_START" if start is not None else "RESV_END"
            self._queue_node_event(db, nodes, kind, f"reservation {name}: {what}", now)
        if delete:
            self._reservation_cache = None

    def job_events(self, rows: Sequence[tuple[int, float, str, str]]) -> None:
        """Events of jobs that stay in their state: (job id, time, state, what).

        A window holding pending jobs back."""
        with self._write() as db:
            self._insert_events(db, rows)

    def reservation_events(self, name: str) -> Sequence[tuple[float, str]]:
        """The story of reservation `name`, oldest first: (time, what)."""
        with self._lock:
            return self._db.execute(
                "SELECT time, what FROM reservation_events WHERE name = ? ORDER BY id", (name,)
            ).fetchall()
