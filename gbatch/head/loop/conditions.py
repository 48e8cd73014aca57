"""The loop's last step: GPU_FOREIGN, DISK_FULL and NODE_DOWN told once per episode.

They are told to the admins' webhooks; NODE_DOWN from the collect step's liveness.
"""

from __future__ import annotations

from collections.abc import Mapping

from gbatch.head.fleet import Fleet
from gbatch.head.liveness import Liveness
from gbatch.head.notify import DOWN_CONDITIONS, REPORT_CONDITIONS, Episodes, node_conditions
from gbatch.head.store import Store
from gbatch.site.config import Config


class NodeConditions:
    """The node conditions on, and each node's report last read for them."""

    def __init__(self, store: Store, fleet: Fleet, config: Config) -> None:
        self.store = store
        self.fleet = fleet
        self.config = config
        # NODE_DOWN, GPU_FOREIGN and DISK_FULL, told once per episode (read from the
        # store at the first step); the report each node's conditions were last read from
        self._episodes_read: Episodes | None = None
        self._told_seq: dict[str, int] = {}

    def tell(self, now: float) -> None:
        """Tell GPU_FOREIGN and DISK_FULL to the admins' webhooks, once per episode.

        Read from each node's new report (one not read here yet).
        """
        for name, node in self.fleet.nodes.items():
            seq = node.report_seq
            if seq == self._told_seq.get(name):
                continue
            report, _ = node.report()
            if report is None:
                continue  # down: NODE_DOWN's business; its conditions stay as they were
            conditions = node_conditions(node.gpus(report), report.disk_free_bytes)
            # A store that cannot write it (full) leaves the report unread: next tick.
            self._record(name, conditions, REPORT_CONDITIONS, now)
            self._told_seq[name] = seq

    def tell_nodes_down(self, liveness: Mapping[str, Liveness], now: float) -> None:
        """Tell NODE_DOWN to the admins' webhooks, once per episode.

        An episode lasts from when a node is down and silent for node_down_seconds (one
        down when the daemon starts, once it has had that long to report) until it is up
        again.
        """
        self._episodes()  # read now (the first step), even with no node to tell of
        for name, each in liveness.items():
            if each.state == "down" and each.silent_seconds >= self.config.node_down_seconds:
                self._record(name, {"NODE_DOWN": each.describe("")}, DOWN_CONDITIONS, now)
            elif each.state == "up":
                self._record(name, {}, DOWN_CONDITIONS, now)

    def _episodes(self) -> Episodes:
        """The node conditions on, from the store; read at the first use, when the
        episodes of nodes no longer in the inventory end."""
        if self._episodes_read is None:
            self.store.forget_node_episodes(self.fleet.nodes.keys())
            self._episodes_read = Episodes(self.store.node_episodes())
        return self._episodes_read

    def _record(
        self, node: str, conditions: Mapping[str, str], scope: frozenset[str], now: float
    ) -> None:
        """`conditions`: all of `scope` on at `node` now. Those begun are told."""
        episodes = self._episodes()
        begun, ended = episodes.changes(node, conditions, scope)
        if begun or ended:
            self.store.record_episodes(node, begun, ended, now)
            episodes.record(node, begun, ended)
