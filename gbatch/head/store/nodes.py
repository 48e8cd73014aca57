"""Nodes as the store keeps them: those an admin drained, and the conditions on each now.

The conditions are node episodes (migration 12); each one begun is owed to the admins'
webhooks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gbatch.head.store.outbox import Outbox
from gbatch.head.store.rows import _marks


class Nodes(Outbox):
    """Drained nodes, and the conditions on each node now (its episodes)."""

    def drain_node(self, name: str, reason: str, now: float) -> None:
        """Take a node out of scheduling (its running jobs carry on)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO drained_nodes (name, reason, since) VALUES (?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET reason = excluded.reason",
                (name, reason, now),
            )

    def resume_node(self, name: str) -> bool:
        """Put a drained node back in service; False when it was not drained."""
        with self._write() as db:
            return db.execute("DELETE FROM drained_nodes WHERE name = ?", (name,)).rowcount > 0

    def drained_nodes(self) -> dict[str, str]:
        """Drained node -> the admin's reason."""
        with self._lock:
            rows = self._db.execute("SELECT name, reason FROM drained_nodes").fetchall()
        return {name: reason for name, reason in rows}

    def drain_times(self) -> dict[str, float]:
        """Drained node -> when it was drained (epoch seconds)."""
        with self._lock:
            rows = self._db.execute("SELECT name, since FROM drained_nodes").fetchall()
        return {name: since for name, since in rows}

    def node_episodes(self) -> dict[str, frozenset[str]]:
        """node -> the conditions on there, as last recorded (record_episodes)."""
        with self._lock:
            rows = self._db.execute("SELECT node, kind FROM node_episodes").fetchall()
        on: dict[str, set[str]] = {}
        for node, kind in rows:
            on.setdefault(node, set()).add(kind)
        return {node: frozenset(kinds) for node, kinds in on.items()}

    def record_episodes(
        self, node: str, begun: Mapping[str, str], ended: Collection[str], now: float
    ) -> None:
        """Record in one transaction which conditions of `node` began and which ended.

        Those that began (`begun`: kind -> why) are on and owed to the admins' webhooks
        that ask (and to the event log); those `ended` are off.
        """
        with self._write() as db:
            for kind, why in begun.items():
                db.execute(
                    "INSERT OR REPLACE INTO node_episodes (node, kind, since) VALUES (?, ?, ?)",
                    (node, kind, now),
                )
                self._queue_node_event(db, node, kind, why, now)
            db.executemany(
                "DELETE FROM node_episodes WHERE node = ? AND kind = ?",
                [(node, kind) for kind in ended],
            )

    def queue_partition_event(self, partition: str, kind: str, reason: str, now: float) -> None:
        """Owe a cluster partition's PARTITION_DOWN or PARTITION_UP to admins' webhooks.

        Those that ask for it; the event log gets it too."""
        with self._write() as db:
            self._queue_node_event(db, partition, kind, reason, now)

    def forget_node_episodes(self, keep: Collection[str]) -> None:
        """End the episodes of every node but those in `keep`.

        The others have left the inventory: one back later is told afresh.
        """
        if not set(self.node_episodes()) - set(keep):
            return  # no write (no fsync) at every start
        with self._write() as db:
            db.execute(f"DELETE FROM node_episodes WHERE node NOT IN ({_marks(keep)})", tuple(keep))
