"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pwd
from collections.abc import Callable, Iterator
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


@pytest.fixture
def fake_accounts(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, int], pwd.struct_passwd]:
    """Adds accounts to the system's user database for one test: `add(name, uid)`.

    Each is a robot's (no home, no login shell); pwd's lookups by name and by uid see
    them first, then the real database (a unit test makes no real users)."""
    made: dict[str, pwd.struct_passwd] = {}
    by_name, by_uid = pwd.getpwnam, pwd.getpwuid

    def getpwnam(name: str) -> pwd.struct_passwd:
        return made[name] if name in made else by_name(name)

    def getpwuid(uid: int) -> pwd.struct_passwd:
        found = [entry for entry in made.values() if entry.pw_uid == uid]
        return found[0] if found else by_uid(uid)

    def add(name: str, uid: int) -> pwd.struct_passwd:
        made[name] = pwd.struct_passwd((name, "x", uid, uid, "", "/nonexistent", "/sbin/nologin"))
        return made[name]

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    return add
