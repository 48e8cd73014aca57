"""Users' cluster logins as a per-user partition's backend reaches them: from the store.

The backend (gbatch/nodes/cluster.py SlurmBackend) asks whose jobs to watch, a user's
link with its key unsealed, and says when the cluster refused a key; this is the
store's side of that (gbatch/head/store/clusterlinks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from gbatch.core.loglines import loggable
from gbatch.head.secretbox import SecretKeyError
from gbatch.head.store import Store
from gbatch.nodes.backend import LinkedLogin

log = logging.getLogger("gbatchd")


class StoreLogins:
    """The links to one partition (SlurmBackend's `Logins`)."""

    def __init__(self, store: Store, partition: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.partition = partition
        self.clock = clock

    def users(self) -> Sequence[str]:
        return self.store.cluster_link_users(self.partition)

    def login(self, user: str) -> LinkedLogin | None:
        try:
            found = self.store.cluster_login(self.partition, user)
        except SecretKeyError as err:
            # The store's key was replaced: the link cannot be used; relinking mends it.
            self.refused(user, f"its key cannot be unsealed ({err})", None)
            return None
        return None if found is None else LinkedLogin(user, *found)

    def accepted(self, user: str) -> None:
        self.store.accept_cluster_link(self.partition, user)

    def refused(self, user: str, why: str, job_id: int | None) -> None:
        if self.store.break_cluster_link(self.partition, user, why, job_id, self.clock()):
            log.warning(
                "cluster link of %s to partition %s broken: %s",
                loggable(user),
                self.partition,
                why,
            )
