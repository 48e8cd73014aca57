"""Users' links to cluster partitions (identity per_user, migration 23).

A link is a user's login on a cluster and the key pair the head made for it: the
private half sealed with the store's secret box (as jobs' secret env values are), the
public half kept to show again. A link is `new` until the cluster first takes its key
(the user adds it to authorized_keys after linking: a refusal then is no news), `ok`
from then on. A key the cluster refuses once it worked marks the link `broken`, and the
user is owed a CLUSTER_LINK event (mail, webhooks) in the same transaction, once per
break: a relink makes it new again.
"""

from __future__ import annotations

from dataclasses import dataclass

from gbatch.core.model import CLUSTER_LINK_EVENT, CLUSTER_LINK_REASON
from gbatch.head.store.outbox import Outbox


@dataclass(frozen=True)
class ClusterLink:
    """A link as `gbatch cluster status` shows it (no private key)."""

    partition: str
    user: str
    login: str
    public: str
    linked: float
    state: str  # "new" (key not taken yet), "ok" or "broken"
    reason: str
    since: float | None


_COLUMNS = "partition, user, login, public, linked, state, reason, since"


class ClusterLinks(Outbox):
    """Links: made, dropped, read (with or without the key), broken."""

    def link_cluster(
        self, partition: str, user: str, login: str, private_key: str, public: str, now: float
    ) -> None:
        """Record (or replace) `user`'s link to `partition`: new until its key is taken."""
        sealed = self._secrets.seal({"private_key": private_key})
        with self._write() as db:
            db.execute(
                "INSERT INTO cluster_links (partition, user, login, sealed, public, linked,"
                " state, reason, since) VALUES (?, ?, ?, ?, ?, ?, 'new', '', NULL)"
                " ON CONFLICT(partition, user) DO UPDATE SET login = excluded.login,"
                " sealed = excluded.sealed, public = excluded.public, linked = excluded.linked,"
                " state = 'new', reason = '', since = NULL",
                (partition, user, login, sealed, public, now),
            )

    def unlink_cluster(self, partition: str, user: str) -> bool:
        """Forget `user`'s link to `partition` (its key with it); False when none."""
        with self._write() as db:
            return (
                db.execute(
                    "DELETE FROM cluster_links WHERE partition = ? AND user = ?",
                    (partition, user),
                ).rowcount
                > 0
            )

    def cluster_links(self, user: str | None = None) -> list[ClusterLink]:
        """The links of `user` (None: everyone's), by partition then user."""
        where, args = ("WHERE user = ?", (user,)) if user is not None else ("", ())
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM cluster_links {where} ORDER BY partition, user", args
            ).fetchall()
        return [ClusterLink(*row) for row in rows]

    def cluster_login(self, partition: str, user: str) -> tuple[str, str, bool] | None:
        """`user`'s unbroken link to `partition`: (login, private key, key taken?), or None.

        The key is unsealed; taken: whether the cluster has taken it yet. Raises
        SecretKeyError when the store's key does not open it."""
        with self._lock:
            row = self._db.execute(
                "SELECT login, sealed, state FROM cluster_links"
                " WHERE partition = ? AND user = ? AND state != 'broken'",
                (partition, user),
            ).fetchone()
        if row is None:
            return None
        return row[0], self._secrets.open(row[1])["private_key"], row[2] == "ok"

    def accept_cluster_link(self, partition: str, user: str) -> None:
        """The cluster took `user`'s new key: the link is ok (a refusal now breaks it)."""
        with self._write() as db:
            db.execute(
                "UPDATE cluster_links SET state = 'ok', reason = '', since = NULL"
                " WHERE partition = ? AND user = ? AND state = 'new'",
                (partition, user),
            )

    def cluster_link_users(self, partition: str) -> list[str]:
        """The users with an unbroken link to `partition` and a job open there."""
        with self._lock:
            rows = self._db.execute(
                "SELECT l.user FROM cluster_links l WHERE l.partition = ?"
                " AND l.state != 'broken'"
                " AND EXISTS (SELECT 1 FROM cluster_jobs c JOIN jobs j ON j.id = c.job_id"
                " WHERE c.partition = l.partition AND c.open = 1 AND j.user = l.user)"
                " ORDER BY l.user",
                (partition,),
            ).fetchall()
        return [row[0] for row in rows]

    def cluster_jobs_of(self, partition: str, user: str) -> list[int]:
        """The ids of `user`'s jobs the cluster of `partition` may still hold."""
        with self._lock:
            rows = self._db.execute(
                "SELECT c.job_id FROM cluster_jobs c JOIN jobs j ON j.id = c.job_id"
                " WHERE c.partition = ? AND c.open = 1 AND j.user = ? ORDER BY c.job_id",
                (partition, user),
            ).fetchall()
        return [row[0] for row in rows]

    def break_cluster_link(
        self, partition: str, user: str, why: str, job_id: int | None, now: float
    ) -> bool:
        """Mark `user`'s link to `partition` broken, and owe them the news on `job_id`.

        One transaction; False (nothing owed) when it was not an ok link. A new link
        stays new, its reason saying why: its key is not on the cluster yet."""
        with self._write() as db:
            db.execute(
                "UPDATE cluster_links SET reason = ? WHERE partition = ? AND user = ?"
                " AND state = 'new'",
                (f"waiting for its key on the cluster: {why}", partition, user),
            )
            changed = db.execute(
                "UPDATE cluster_links SET state = 'broken', reason = ?, since = ?"
                " WHERE partition = ? AND user = ? AND state = 'ok'",
                (why, now, partition, user),
            ).rowcount
            if changed and job_id is None:
                # Found by a pass, not a send: told on the user's first job there.
                first = db.execute(
                    "SELECT min(c.job_id) FROM cluster_jobs c JOIN jobs j ON j.id = c.job_id"
                    " WHERE c.partition = ? AND c.open = 1 AND j.user = ?",
                    (partition, user),
                ).fetchone()
                job_id = first[0] if first is not None else None
            state = None
            if changed and job_id is not None:
                state = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if state is not None and job_id is not None:
                told = f"cluster link of {user} broken: {why}"
                self._insert_events(db, [(job_id, now, state[0], told)])
                db.execute(
                    "UPDATE jobs SET reason = ?, changed = ? WHERE id = ? AND state = 'PENDING'",
                    (CLUSTER_LINK_REASON, self._change_number(db), job_id),
                )
                self._queue_job_events(db, job_id, now, kinds=(CLUSTER_LINK_EVENT,))
        return bool(changed)
