"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from gbatch.head.daemon import Daemon
from gbatch.head.store import Store
from gbatch.site.config import Config, Paths

# Property tests run on loaded 2-core machines: how long an example takes is no finding
# (a test that asks for a deadline or the check sets its own).
settings.register_profile("gbatch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gbatch")


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
