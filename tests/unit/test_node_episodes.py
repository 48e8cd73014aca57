"""Node conditions (NODE_DOWN, GPU_FOREIGN, DISK_FULL) are told once per episode, and
the episodes live in the store: a restarted daemon neither tells again one still on
nor misses one that ended meanwhile and came back; a node already down when the
daemon starts is told once it has had node_down_seconds to report. On fake clocks and
fake nodes (tests/unit/test_node_loss_rules.py), a real store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_node_loss_rules import DOWN_AFTER, LEASE, Clocks, FakeNode

from gbatch.core.model import Gpu
from gbatch.head import notify
from gbatch.head.daemon import Daemon
from gbatch.head.store import Store
from gbatch.nodes.report import NodeReport
from gbatch.site.config import Config, Paths, Webhook

HOOK = Webhook("ops", "https://hooks.example.org/x", "", ("NODE_DOWN", "GPU_FOREIGN"))


class GpuNode(FakeNode):
    """A fake node whose GPU 0 may hold a process gbatch did not start."""

    foreign = 0

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return (Gpu(0, "GPU-0", "H100", 81559, 0, foreign_processes=self.foreign),)

    def seen(self) -> None:
        """A new report."""
        self.seq += 1
        self.hear()


class Heads:
    """Daemons on one home, started one after another (a restart)."""

    def __init__(self, home: Path, clocks: Clocks) -> None:
        self.home = home
        self.clocks = clocks
        self.node = GpuNode("gpu01", clocks)
        self.daemon: Daemon | None = None

    def start(self) -> Daemon:
        self.stop()
        paths = Paths(self.home)
        config = Config(node_down_seconds=DOWN_AFTER, node_lease_seconds=LEASE, webhooks=(HOOK,))
        store = Store(paths.store, notify.Policy.from_config(config))
        clocks = self.clocks
        self.daemon = Daemon(
            paths, config, store, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono
        )
        self.daemon.fleet.nodes = {"gpu01": self.node}
        return self.daemon

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.committer.close()
            self.daemon.store.close()
            self.daemon = None

    def step(self, seconds: float = 1.0) -> None:
        self.clocks.mono += seconds
        self.clocks.wall += seconds
        assert self.daemon is not None
        self.daemon.collect_ended_runs(self.clocks.wall)
        self.daemon.tell_node_conditions(self.clocks.wall)

    def told(self) -> list[tuple[str, str]]:
        store = Store(Paths(self.home).store)
        try:
            return [
                (str(r["kind"]), json.loads(str(r["payload"]))["node"]["reason"])
                for r in store.outbox()
            ]
        finally:
            store.close()


@pytest.fixture
def heads(tmp_path: Path) -> Iterator[Heads]:
    made = Heads(tmp_path, Clocks())
    yield made
    made.stop()


def test_a_condition_still_on_after_a_restart_is_not_told_again(heads: Heads) -> None:
    heads.start()
    heads.node.foreign = 1
    heads.node.seen()
    heads.step()
    heads.node.seen()
    heads.step()  # the next report: the same episode
    assert [kind for kind, _ in heads.told()] == ["GPU_FOREIGN"]

    heads.start()  # a restart, the process still there
    heads.node.seen()
    heads.step()
    assert [kind for kind, _ in heads.told()] == ["GPU_FOREIGN"]


def test_one_that_ended_while_the_daemon_was_down_and_comes_back_is_told(heads: Heads) -> None:
    heads.start()
    heads.node.foreign = 1
    heads.node.seen()
    heads.step()
    heads.stop()

    heads.node.foreign = 0  # gone while no daemon ran
    heads.start()
    heads.node.seen()
    heads.step()
    assert [kind for kind, _ in heads.told()] == ["GPU_FOREIGN"]
    heads.node.foreign = 2  # back: a new episode
    heads.node.seen()
    heads.step()
    assert [kind for kind, _ in heads.told()] == ["GPU_FOREIGN", "GPU_FOREIGN"]


def test_a_node_down_when_the_daemon_starts_is_told_once_across_restarts(heads: Heads) -> None:
    heads.node.reporting, heads.node.heard_at = False, None  # never heard by this daemon
    heads.start()
    heads.step()
    assert heads.told() == []  # it may yet connect
    heads.step(DOWN_AFTER)
    ((kind, why),) = heads.told()
    assert kind == "NODE_DOWN" and why.startswith("no report for ")
    heads.step(DOWN_AFTER)
    assert len(heads.told()) == 1  # still down: the same episode

    heads.start()
    heads.step(DOWN_AFTER)
    assert len(heads.told()) == 1  # a restart does not tell it again

    heads.node.seen()  # up again: the episode is over
    heads.step()
    heads.node.reporting = False
    heads.step(DOWN_AFTER)
    assert [kind for kind, _ in heads.told()] == ["NODE_DOWN", "NODE_DOWN"]


def test_a_node_up_then_down_is_told_when_it_goes_down(heads: Heads) -> None:
    heads.start()
    heads.node.seen()
    heads.step()
    heads.node.reporting = False
    heads.step(10)  # suspect
    assert heads.told() == []
    heads.step(DOWN_AFTER)
    assert [kind for kind, _ in heads.told()] == ["NODE_DOWN"]


def test_the_episodes_of_a_node_that_left_the_inventory_end(heads: Heads) -> None:
    heads.start()
    heads.node.foreign = 1
    heads.node.seen()
    heads.step()
    daemon = heads.start()
    daemon.fleet.nodes = {}  # gpu01 taken out of the inventory
    heads.step()
    assert daemon.store.node_episodes() == {}
