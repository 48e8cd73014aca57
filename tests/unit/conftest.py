"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.config import Config, Paths
from gbatch.head.daemon import Daemon
from gbatch.head.store import Store


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon (not started: no loop, no socket) on a store in tmp_path, two simulated
    GPUs on its local node; handlers are called on it directly."""
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2), store)
    yield made
    made.committer.close()
    store.close()
