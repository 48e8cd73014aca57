"""A requeued victim yields to its preemptor (gbatch/head/loop/preempt.py yielding): it
stays out of the plan while its preemptor waits to start, so that it cannot take back
the GPUs it gave up and be preempted again in a loop; at most YIELD_SECONDS past its
grace, and never once its preemptor started, was cancelled or is held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.core.model import JobSpec, JobState
from gbatch.head.loop.preempt import YIELD_SECONDS, Preempter
from gbatch.head.store import Preempting, Store
from gbatch.site.config import Config

T0 = 1_767_225_600.0
WHY = "Preempted by 2 (QOS normal)"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db")
    yield opened
    opened.close()


def requeued_victim(store: Store) -> tuple[int, int]:
    spec = JobSpec(name="j", command=("true",), gpus=2)
    victim, preemptor = store.submit([spec, spec], 1000, "ada", T0)
    store.set_state(victim, JobState.CONFIGURING, "", T0, node="local", attempt=1)
    store.set_state(victim, JobState.RUNNING, "", T0, start_time=T0)
    assert store.begin_preemption(Preempting(victim, preemptor, "requeue", T0 + 10, WHY), T0)
    store.set_state(victim, JobState.PENDING, WHY, T0 + 10, end_time=T0 + 10)
    return victim, preemptor


def test_a_requeued_victim_waits_while_its_preemptor_does(store: Store) -> None:
    victim, preemptor = requeued_victim(store)
    preempter = Preempter(store, None, Config())  # type: ignore[arg-type]
    preempter.forget_ended()  # kept: the victim yields
    jobs = [job for job in (store.get(victim), store.get(preemptor)) if job is not None]
    assert [j.id for j in preempter.yielding(jobs, T0 + 11)] == [preemptor]
    # Its preemptor started: the victim is planned again, its preemption forgotten.
    store.set_state(preemptor, JobState.CONFIGURING, "", T0 + 12, node="local", attempt=1)
    assert [j.id for j in preempter.yielding(jobs, T0 + 12)] == [victim, preemptor]
    assert store.preempting() == {}


def test_a_victim_waits_no_longer_than_yield_seconds_nor_for_a_held_preemptor(
    store: Store,
) -> None:
    victim, preemptor = requeued_victim(store)
    preempter = Preempter(store, None, Config())  # type: ignore[arg-type]
    job = store.get(victim)
    assert job is not None
    assert preempter.yielding([job], T0 + 10 + YIELD_SECONDS) == [job]
    assert store.preempting() == {}
    victim, preemptor = requeued_victim(store)
    store.set_held(preemptor, True, T0 + 11)
    job = store.get(victim)
    assert job is not None
    assert preempter.yielding([job], T0 + 11) == [job]
    assert store.preempting() == {}
