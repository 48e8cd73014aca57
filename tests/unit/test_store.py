"""The store against a real SQLite file: schema, durability settings, transitions,
events, usage and queries."""

from __future__ import annotations

import json
import sqlite3
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fullstore import integrity_ok, pack_store, unpack_store
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import active_jobs

from gbatch.core.model import IllegalTransition, JobSpec, JobState
from gbatch.core.selection import JobFilter
from gbatch.head.store import (
    MIGRATIONS,
    JobNotFound,
    RunnableWindow,
    StateChange,
    Store,
    StoreError,
    StoreFull,
    Usage,
    planning_job,
    rows,
    schema,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0
DAY = 86400.0


def spec(name: str = "train", gpus: int = 1) -> JobSpec:
    return JobSpec(
        name=name,
        command=("python", "train.py"),
        image="pytorch:24.01",
        gpus=gpus,
        time_limit=3600,
        env=(("SEED", "1"),),
        mounts=("/data:/data:ro",),
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "gbatch.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    opened = Store(db_path)
    yield opened
    opened.close()


def submit_one(store: Store, user: str = "alice", now: float = T0, **kwargs: bool) -> int:
    (job_id,) = store.submit([spec()], uid=1000, user=user, now=now, **kwargs)
    return job_id


def run_job(store: Store, job_id: int, now: float = T0) -> None:
    store.set_state(job_id, JobState.CONFIGURING, "", now, node="gpu01", gpus=(0,), attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", now, start_time=now)


def add_usage(store: Store, user: str, gpu_seconds: float, now: float, half_life: float) -> None:
    """A run of `user` ends at `now` having used `gpu_seconds`: usage is written only
    with the end of a run, as the daemon records it."""
    job_id = submit_one(store, user=user, now=now)
    run_job(store, job_id, now)
    usage = Usage(user, gpu_seconds, half_life)
    store.set_state(job_id, JobState.COMPLETED, "", now, end_time=now, usage=usage)


# -- schema and durability --------------------------------------------------------------


def test_new_store_creates_file_and_schema_at_latest_version(db_path: Path) -> None:
    store = Store(db_path)
    try:
        assert db_path.exists()
        assert store.schema_version == len(MIGRATIONS)
        assert store.count() == 0
    finally:
        store.close()
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"jobs", "events", "usage"} <= tables
    finally:
        raw.close()


def test_store_uses_wal_journal_visible_to_other_connections(store: Store) -> None:
    other = sqlite3.connect(store.path)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        other.close()


def test_store_commits_with_synchronous_full(store: Store) -> None:
    # synchronous is per connection, so it must be read on the store's own one; 2 is FULL.
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_reopening_keeps_jobs_events_and_usage(db_path: Path) -> None:
    first = Store(db_path)
    job_id = submit_one(first)
    first.set_state(job_id, JobState.CANCELLED, "cancelled by alice", T0 + 1, end_time=T0 + 1)
    add_usage(first, "alice", 100.0, T0, half_life=DAY)
    first.close()

    second = Store(db_path)
    try:
        assert second.schema_version == len(MIGRATIONS)
        assert second.require(job_id).state is JobState.CANCELLED
        assert second.require(job_id).spec == spec()
        assert [e.state for e in second.events(job_id)] == [
            JobState.PENDING,
            JobState.CANCELLED,
        ]
        assert second.usage(T0, half_life=DAY) == {"alice": pytest.approx(100.0)}
        assert integrity_ok(second)
    finally:
        second.close()


def test_reopening_runs_only_the_migrations_not_yet_applied(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Store(db_path).close()
    # Re-running the first migration would fail ("table jobs already exists"), so a
    # clean open proves only the new entry ran.
    extended = (*MIGRATIONS, "CREATE TABLE probe (x INTEGER)")
    monkeypatch.setattr(schema, "MIGRATIONS", extended)

    reopened = Store(db_path)
    try:
        assert reopened.schema_version == len(extended)
        assert reopened._db.execute("SELECT count(*) FROM probe").fetchone()[0] == 0
    finally:
        reopened.close()


def test_database_from_newer_gbatch_is_refused(db_path: Path) -> None:
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    raw.commit()
    raw.close()

    with pytest.raises(StoreError, match="newer") as caught:
        Store(db_path)
    assert str(db_path) in str(caught.value)
    assert "Upgrade gbatch" in str(caught.value)


def test_integrity_check_passes_on_a_used_store(store: Store) -> None:
    run_job(store, submit_one(store))
    assert integrity_ok(store)


# -- submit -----------------------------------------------------------------------------


def test_submit_returns_contiguous_ids_and_stores_pending_jobs(store: Store) -> None:
    first = store.submit([spec("a"), spec("b"), spec("c")], uid=1000, user="alice", now=T0)
    second = store.submit([spec("d")], uid=1001, user="bob", now=T0 + 5)

    assert first == [first[0], first[0] + 1, first[0] + 2]
    assert second == [first[-1] + 1]
    job = store.require(first[1])
    assert (job.id, job.uid, job.user, job.spec.name) == (first[1], 1000, "alice", "b")
    assert job.state is JobState.PENDING
    assert job.submit_time == T0
    assert (job.held, job.reason, job.node, job.gpus, job.attempt) == (False, "", None, (), 0)
    assert (job.start_time, job.end_time, job.exit_code, job.stop_state) == (None,) * 4
    assert store.require(second[0]).user == "bob"


def test_submit_writes_one_pending_submitted_event_per_job(store: Store) -> None:
    ids = store.submit([spec("a"), spec("b")], uid=1000, user="alice", now=T0)

    for job_id in ids:
        events = store.events(job_id)
        assert len(events) == 1
        assert (events[0].job_id, events[0].time) == (job_id, T0)
        assert (events[0].state, events[0].reason) == (JobState.PENDING, "submitted")


def test_a_submit_event_is_told_from_the_job_row_not_stored(store: Store, db_path: Path) -> None:
    """A submit writes no `events` row (two pages less in each submit's commit): the
    event is the job's own submit_time, told first by Store.events."""
    ids = store.submit([spec("a"), spec("b")], uid=1000, user="alice", now=T0)
    store.set_state(ids[0], JobState.CANCELLED, "cancelled by alice", T0 + 5, end_time=T0 + 5)

    raw = sqlite3.connect(db_path)
    try:
        stored = raw.execute("SELECT job_id, state, reason FROM events ORDER BY id").fetchall()
    finally:
        raw.close()
    assert stored == [(ids[0], "CANCELLED", "cancelled by alice")]
    assert [(e.state, e.reason, e.time) for e in store.events(ids[0])] == [
        (JobState.PENDING, "submitted", T0),
        (JobState.CANCELLED, "cancelled by alice", T0 + 5),
    ]


def test_a_stored_submit_event_of_an_older_store_is_told_once(store: Store, db_path: Path) -> None:
    """Jobs submitted by a gbatch that stored their submit event keep it: told once."""
    (job_id,) = store.submit([spec()], uid=1000, user="alice", now=T0)
    raw = sqlite3.connect(db_path)
    try:
        with raw:
            raw.execute(
                "INSERT INTO events (job_id, time, state, reason)"
                " VALUES (?, ?, 'PENDING', 'submitted')",
                (job_id, T0),
            )
    finally:
        raw.close()
    store.set_state(job_id, JobState.CANCELLED, "cancelled", T0 + 1, end_time=T0 + 1)

    assert [(e.state, e.reason) for e in store.events(job_id)] == [
        (JobState.PENDING, "submitted"),
        (JobState.CANCELLED, "cancelled"),
    ]


def test_submit_round_trips_the_full_spec(store: Store) -> None:
    full = JobSpec(
        name="sweep",
        command=("/bin/sh", "-c", "echo 'a b' && exit 3"),
        image=None,
        gpus=4,
        time_limit=None,
        retries=2,
        env=(("A", "1"), ("B", "two words")),
        mounts=("/scratch:/scratch",),
        workdir="/work",
        priority=10,
        nice=3,
        shm_size="16g",
    )
    (job_id,) = store.submit([full], uid=0, user="root", now=T0)
    assert store.require(job_id).spec == full


def test_submit_held_marks_jobs_held(store: Store) -> None:
    job_id = submit_one(store, held=True)
    assert store.require(job_id).held is True


def test_array_of_1000_is_submitted_in_one_call(store: Store) -> None:
    ids = store.submit([spec(f"task{i}") for i in range(1000)], uid=1000, user="alice", now=T0)

    assert ids == list(range(ids[0], ids[0] + 1000))
    assert store.count() == 1000
    assert [j.spec.name for j in store.jobs(ids=[ids[0], ids[999]])] == ["task0", "task999"]
    assert all(len(store.events(i)) == 1 for i in (ids[0], ids[500], ids[999]))


def test_submit_of_nothing_returns_no_ids(store: Store) -> None:
    assert store.submit([], uid=1000, user="alice", now=T0) == []
    assert store.count() == 0


def test_concurrent_submits_through_one_store_get_distinct_ids(store: Store) -> None:
    threads_n, per_thread = 8, 200
    results: list[list[int]] = [[] for _ in range(threads_n)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def worker(slot: int) -> None:
        try:
            start.wait()
            for _ in range(per_thread):
                results[slot].extend(store.submit([spec()], uid=1000, user=f"u{slot}", now=T0))
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    all_ids = [job_id for ids in results for job_id in ids]
    assert len(all_ids) == threads_n * per_thread
    assert len(set(all_ids)) == threads_n * per_thread
    assert store.count() == threads_n * per_thread
    assert integrity_ok(store)


# -- set_state --------------------------------------------------------------------------


def test_set_state_writes_state_fields_and_event(store: Store) -> None:
    job_id = submit_one(store)

    job = store.set_state(
        job_id, JobState.CONFIGURING, "", T0 + 10, node="gpu01", gpus=(2, 3), attempt=1
    )

    assert job.state is JobState.CONFIGURING
    assert (job.node, job.gpus, job.attempt) == ("gpu01", (2, 3), 1)
    assert store.require(job_id) == job
    assert store.events(job_id)[-1].state is JobState.CONFIGURING
    assert store.events(job_id)[-1].time == T0 + 10


def test_set_state_round_trips_every_updatable_field(store: Store) -> None:
    job_id = submit_one(store)
    run_job(store, job_id, now=T0)
    store.set_state(
        job_id,
        JobState.COMPLETING,
        "cancelled by alice",
        T0 + 50,
        stop_state=JobState.CANCELLED,
    )

    job = store.set_state(
        job_id,
        JobState.CANCELLED,
        "cancelled by alice",
        T0 + 60,
        end_time=T0 + 60,
        exit_code=143,
        exit_signal=15,
    )

    fresh = store.require(job_id)
    assert fresh == job
    assert fresh.state is JobState.CANCELLED
    assert fresh.reason == "cancelled by alice"
    assert (fresh.node, fresh.gpus, fresh.attempt) == ("gpu01", (0,), 1)
    assert (fresh.start_time, fresh.end_time) == (T0, T0 + 60)
    assert (fresh.exit_code, fresh.exit_signal) == (143, 15)
    assert fresh.stop_state is JobState.CANCELLED


def test_set_state_accepts_gpus_as_list_and_empty(store: Store) -> None:
    job_id = submit_one(store)
    assert store.set_state(job_id, JobState.CONFIGURING, "", T0, gpus=[5, 1, 7]).gpus == (5, 1, 7)
    assert store.set_state(job_id, JobState.PENDING, "requeued", T0, gpus=()).gpus == ()


def test_set_state_records_each_change_as_an_event_in_order(store: Store) -> None:
    job_id = submit_one(store)
    run_job(store, job_id, now=T0 + 1)
    store.set_state(job_id, JobState.COMPLETED, "exit 0", T0 + 2, exit_code=0)

    events = store.events(job_id)
    assert [(e.state, e.reason) for e in events] == [
        (JobState.PENDING, "submitted"),
        (JobState.CONFIGURING, ""),
        (JobState.RUNNING, ""),
        (JobState.COMPLETED, "exit 0"),
    ]
    assert [e.time for e in events] == [T0, T0 + 1, T0 + 1, T0 + 2]
    assert {e.job_id for e in events} == {job_id}


def test_events_of_unknown_job_are_empty(store: Store) -> None:
    assert store.events(424242) == []


def test_illegal_transition_raises_and_writes_nothing(store: Store) -> None:
    job_id = submit_one(store)
    before = store.require(job_id)

    with pytest.raises(IllegalTransition) as caught:
        store.set_state(job_id, JobState.RUNNING, "skip", T0 + 1, node="gpu01", attempt=1)

    assert (caught.value.current, caught.value.new) == (JobState.PENDING, JobState.RUNNING)
    assert store.require(job_id) == before
    assert len(store.events(job_id)) == 1


def test_expect_mismatch_raises_and_writes_nothing_even_on_a_legal_edge(store: Store) -> None:
    job_id = submit_one(store)
    before = store.require(job_id)

    # PENDING -> CANCELLED is legal, but the caller believed the job was running.
    with pytest.raises(IllegalTransition) as caught:
        store.set_state(
            job_id, JobState.CANCELLED, "cancel", T0 + 1, expect={JobState.RUNNING}, end_time=T0
        )

    assert (caught.value.current, caught.value.new) == (JobState.PENDING, JobState.CANCELLED)
    assert store.require(job_id) == before
    assert len(store.events(job_id)) == 1


def test_expect_match_lets_the_change_through(store: Store) -> None:
    job_id = submit_one(store)
    job = store.set_state(
        job_id, JobState.CANCELLED, "cancel", T0, expect={JobState.PENDING, JobState.RUNNING}
    )
    assert job.state is JobState.CANCELLED


def test_set_state_on_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound) as caught:
        store.set_state(999, JobState.CANCELLED, "", T0)
    assert caught.value.job_id == 999
    assert isinstance(caught.value, StoreError)


@pytest.mark.parametrize("field", ["held", "user", "uid", "spec", "bogus", "id"])
def test_set_state_refuses_unknown_fields_and_writes_nothing(store: Store, field: str) -> None:
    job_id = submit_one(store)
    before = store.require(job_id)

    extra: dict[str, Any] = {field: 1}
    with pytest.raises(ValueError, match=field):
        store.set_state(job_id, JobState.CANCELLED, "", T0, **extra)

    assert store.require(job_id) == before
    assert len(store.events(job_id)) == 1


def test_requeue_from_final_state_returns_job_to_pending(store: Store) -> None:
    job_id = submit_one(store)
    run_job(store, job_id)
    store.set_state(job_id, JobState.NODE_FAIL, "node lost", T0 + 5, end_time=T0 + 5)

    job = store.set_state(job_id, JobState.PENDING, "requeued", T0 + 6, node=None, gpus=())

    assert (job.state, job.node, job.gpus, job.attempt) == (JobState.PENDING, None, (), 1)
    assert job in active_jobs(store)


# -- pending reasons and holds ----------------------------------------------------------


def test_set_pending_reasons_touches_only_pending_jobs_and_writes_no_events(store: Store) -> None:
    waiting, running = store.submit([spec(), spec()], uid=1000, user="alice", now=T0)
    run_job(store, running)
    events_before = {i: store.events(i) for i in (waiting, running)}

    store.set_pending_reasons({waiting: "Resources", running: "Priority", 999: "Resources"})

    assert store.require(waiting).reason == "Resources"
    assert store.require(running).reason == ""
    assert store.require(running).state is JobState.RUNNING
    assert {i: store.events(i) for i in (waiting, running)} == events_before


def test_set_pending_reasons_overwrites_an_earlier_reason(store: Store) -> None:
    job_id = submit_one(store)
    store.set_pending_reasons({job_id: "Resources"})
    store.set_pending_reasons({job_id: "Priority"})
    store.set_pending_reasons({})
    assert store.require(job_id).reason == "Priority"


def test_set_held_toggles_hold_and_reason_and_records_events(store: Store) -> None:
    job_id = submit_one(store)

    held = store.set_held(job_id, True, T0 + 1)
    assert (held.held, held.reason, held.state) == (True, "JobHeldUser", JobState.PENDING)
    assert store.require(job_id) == held

    released = store.set_held(job_id, False, T0 + 2)
    assert (released.held, released.reason, released.state) == (False, "", JobState.PENDING)

    events = store.events(job_id)
    assert [(e.time, e.state, e.reason) for e in events[1:]] == [
        (T0 + 1, JobState.PENDING, "held by user"),
        (T0 + 2, JobState.PENDING, "released"),
    ]


def test_set_held_on_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.set_held(31337, True, T0)


def test_require_unknown_job_raises_and_get_returns_none(store: Store) -> None:
    assert store.get(7) is None
    with pytest.raises(JobNotFound, match="job 7 does not exist"):
        store.require(7)


# -- usage ------------------------------------------------------------------------------


def test_first_usage_is_stored_undecayed(store: Store) -> None:
    add_usage(store, "alice", 3600.0, T0, half_life=DAY)
    assert store.usage(T0, half_life=DAY) == {"alice": pytest.approx(3600.0)}


def test_usage_decays_by_half_per_half_life_when_read(store: Store) -> None:
    add_usage(store, "alice", 800.0, T0, half_life=DAY)

    assert store.usage(T0 + DAY, half_life=DAY)["alice"] == pytest.approx(400.0)
    assert store.usage(T0 + 3 * DAY, half_life=DAY)["alice"] == pytest.approx(100.0)
    # Reading decays the value it returns, not the stored one.
    assert store.usage(T0, half_life=DAY)["alice"] == pytest.approx(800.0)


def test_usage_added_later_decays_the_stored_total_before_adding(store: Store) -> None:
    add_usage(store, "alice", 1000.0, T0, half_life=DAY)
    add_usage(store, "alice", 200.0, T0 + DAY, half_life=DAY)  # 1000/2 + 200

    assert store.usage(T0 + DAY, half_life=DAY)["alice"] == pytest.approx(700.0)
    assert store.usage(T0 + 2 * DAY, half_life=DAY)["alice"] == pytest.approx(350.0)


def test_usage_is_kept_per_user(store: Store) -> None:
    add_usage(store, "alice", 100.0, T0, half_life=HOUR)
    add_usage(store, "bob", 40.0, T0 + HOUR, half_life=HOUR)

    assert store.usage(T0 + HOUR, half_life=HOUR) == {
        "alice": pytest.approx(50.0),
        "bob": pytest.approx(40.0),
    }


def test_usage_read_before_it_was_stored_is_not_inflated(store: Store) -> None:
    add_usage(store, "alice", 100.0, T0, half_life=DAY)
    assert store.usage(T0 - HOUR, half_life=DAY)["alice"] == pytest.approx(100.0)


def test_no_usage_is_an_empty_mapping(store: Store) -> None:
    assert store.usage(T0, half_life=DAY) == {}


# -- queries ----------------------------------------------------------------------------


@pytest.fixture
def populated(store: Store) -> dict[str, int]:
    """alice: a pending, a running and a completed job; bob: a cancelled and a pending one."""
    ids = {
        "alice_pending": submit_one(store, "alice", T0),
        "alice_running": submit_one(store, "alice", T0 + 10),
        "alice_done": submit_one(store, "alice", T0 + 20),
        "bob_cancelled": submit_one(store, "bob", T0 + 30),
        "bob_pending": submit_one(store, "bob", T0 + 40),
    }
    run_job(store, ids["alice_running"])
    run_job(store, ids["alice_done"])
    store.set_state(ids["alice_done"], JobState.COMPLETED, "", T0 + 50, exit_code=0)
    store.set_state(ids["bob_cancelled"], JobState.CANCELLED, "", T0 + 50)
    return ids


def _names(ids: dict[str, int], jobs: list[int]) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    return [by_id[j] for j in jobs]


def test_jobs_without_filters_returns_all_by_id(store: Store, populated: dict[str, int]) -> None:
    assert [j.id for j in store.jobs()] == sorted(populated.values())


def test_jobs_filters_by_ids(store: Store, populated: dict[str, int]) -> None:
    wanted = [populated["bob_pending"], populated["alice_pending"], 999]
    assert [j.id for j in store.jobs(ids=wanted)] == sorted(wanted[:2])
    assert store.jobs(ids=[]) == []


def test_jobs_filters_by_states(store: Store, populated: dict[str, int]) -> None:
    found = store.jobs(states={JobState.PENDING, JobState.CANCELLED})
    assert _names(populated, [j.id for j in found]) == [
        "alice_pending",
        "bob_cancelled",
        "bob_pending",
    ]


def test_jobs_filters_by_users(store: Store, populated: dict[str, int]) -> None:
    assert {j.user for j in store.jobs(users=["bob"])} == {"bob"}
    assert len(store.jobs(users=["alice", "bob"])) == 5
    assert store.jobs(users=["carol"]) == []


def test_jobs_finished_true_returns_only_final_states(
    store: Store, populated: dict[str, int]
) -> None:
    found = store.jobs(finished=True)
    assert _names(populated, [j.id for j in found]) == ["alice_done", "bob_cancelled"]


def test_jobs_finished_false_returns_only_active_states(
    store: Store, populated: dict[str, int]
) -> None:
    found = store.jobs(finished=False)
    assert _names(populated, [j.id for j in found]) == [
        "alice_pending",
        "alice_running",
        "bob_pending",
    ]


def test_jobs_since_filters_on_submit_time_inclusively(
    store: Store, populated: dict[str, int]
) -> None:
    found = store.jobs(since=T0 + 20)
    assert _names(populated, [j.id for j in found]) == [
        "alice_done",
        "bob_cancelled",
        "bob_pending",
    ]


def test_jobs_limit_keeps_the_newest_in_id_order(store: Store, populated: dict[str, int]) -> None:
    found = store.jobs(limit=2)
    assert _names(populated, [j.id for j in found]) == ["bob_cancelled", "bob_pending"]
    assert store.jobs(limit=0) == []


def test_jobs_filters_combine(store: Store, populated: dict[str, int]) -> None:
    found = store.jobs(users=["alice"], finished=False, since=T0 + 5, limit=10)
    assert _names(populated, [j.id for j in found]) == ["alice_running"]


def test_active_jobs_excludes_final_states(store: Store, populated: dict[str, int]) -> None:
    job_id = submit_one(store)
    store.set_state(job_id, JobState.CONFIGURING, "", T0)
    completing = submit_one(store)
    run_job(store, completing)
    store.set_state(completing, JobState.COMPLETING, "", T0, stop_state=JobState.TIMEOUT)

    active = active_jobs(store)

    assert [j.id for j in active] == sorted(
        [
            populated["alice_pending"],
            populated["alice_running"],
            populated["bob_pending"],
            job_id,
            completing,
        ]
    )
    assert all(not j.state.is_final for j in active)
    assert {j.state for j in active} == {
        JobState.PENDING,
        JobState.CONFIGURING,
        JobState.RUNNING,
        JobState.COMPLETING,
    }


def test_explicit_states_filter_overrides_finished_false(
    store: Store, populated: dict[str, int]
) -> None:
    # squeue -t CD asks for completed jobs; handlers' on_jobs passes finished=False with it.
    found = store.jobs(states={JobState.COMPLETED}, finished=False)
    assert _names(populated, [j.id for j in found]) == ["alice_done"]


def test_a_runs_end_and_its_usage_are_written_together(store: Store) -> None:
    (job_id,) = store.submit([JobSpec(name="j", command=("true",), gpus=2)], 0, "alice", T0)
    store.set_state(
        job_id, JobState.CONFIGURING, "allocated", T0, node="local", gpus=(0, 1), attempt=1
    )
    store.set_state(job_id, JobState.RUNNING, "", T0, start_time=T0)
    with pytest.raises(IllegalTransition):  # a refused change folds in no usage either
        store.set_state(
            job_id,
            JobState.COMPLETED,
            "",
            T0 + 10,
            expect={JobState.PENDING},
            usage=Usage("alice", 20.0, DAY),
        )
    assert store.usage(T0 + 10, DAY) == {}
    store.set_state(
        job_id, JobState.COMPLETED, "", T0 + 10, end_time=T0 + 10, usage=Usage("alice", 20.0, DAY)
    )
    assert store.usage(T0 + 10, DAY) == pytest.approx({"alice": 20.0})


# -- a full disk ------------------------------------------------------------------------


def test_a_submit_on_a_full_disk_raises_store_full_naming_the_directory(
    store: Store, db_path: Path
) -> None:
    kept = submit_one(store)
    pack_store(store, kept)
    with pytest.raises(StoreFull) as caught:
        store.submit([spec()] * 50, uid=1000, user="alice", now=T0)
    assert str(caught.value) == f"the job store cannot write: disk full ({db_path.parent})"
    assert isinstance(caught.value, StoreError)
    assert store.count() == 1 and integrity_ok(store)


def test_a_state_change_on_a_full_disk_writes_nothing_and_succeeds_once_there_is_room(
    store: Store,
) -> None:
    job_id, pad = submit_one(store), submit_one(store)
    pack_store(store, pad)
    with pytest.raises(StoreFull):
        store.set_state(job_id, JobState.CANCELLED, "cancelled", T0, end_time=T0)
    assert not store._db.in_transaction  # rolled back: the connection is usable
    assert store.require(job_id).state is JobState.PENDING
    assert [e.state for e in store.events(job_id)] == [JobState.PENDING]
    unpack_store(store)
    store.set_state(job_id, JobState.CANCELLED, "cancelled", T0, end_time=T0)
    assert store.require(job_id).state is JobState.CANCELLED
    assert integrity_ok(store)


def test_every_acknowledged_submit_survives_full_disk_failures_and_a_reopen(
    db_path: Path,
) -> None:
    store = Store(db_path)
    acknowledged = [submit_one(store) for _ in range(5)]
    pack_store(store, acknowledged[0])
    for _ in range(3):
        with pytest.raises(StoreFull):
            store.submit([spec()] * 20, uid=1000, user="alice", now=T0)
    unpack_store(store)
    acknowledged.append(submit_one(store))
    store.close()
    reopened = Store(db_path)
    try:
        assert [j.id for j in reopened.jobs()] == acknowledged
        assert integrity_ok(reopened)
    finally:
        reopened.close()


def test_a_write_refused_for_another_reason_is_a_store_error_not_a_full_disk(
    store: Store, db_path: Path
) -> None:
    store._db.close()
    store._db = sqlite3.connect(
        f"file:{db_path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )
    with pytest.raises(StoreError, match="readonly") as caught:
        submit_one(store)
    assert not isinstance(caught.value, StoreFull)
    assert str(db_path) in str(caught.value)


def test_set_states_writes_many_changes_in_one_transaction_and_reports_refusals(
    store: Store,
) -> None:
    pending = [submit_one(store, "alice", T0) for _ in range(3)]
    store.set_state(pending[2], JobState.CANCELLED, "gone", T0 + 1)
    outcomes = store.set_states(
        [
            StateChange(pending[0], JobState.CANCELLED, "sweep", {JobState.PENDING}),
            StateChange(pending[2], JobState.CANCELLED, "sweep", {JobState.PENDING}),
            StateChange(999, JobState.CANCELLED, "sweep"),
            StateChange(pending[1], JobState.CANCELLED, "sweep", None, {"end_time": T0 + 2}),
        ],
        T0 + 2,
    )
    assert outcomes[0] is None and outcomes[3] is None
    assert isinstance(outcomes[1], IllegalTransition)
    assert isinstance(outcomes[2], JobNotFound)
    assert store.require(pending[1]).end_time == T0 + 2
    assert [e.reason for e in store.events(pending[0])][-1] == "sweep"
    assert store.require(pending[2]).reason == "gone"  # the refused change wrote nothing


def test_a_store_left_readable_by_an_older_gbatch_is_closed_at_open(tmp_path: Path) -> None:
    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    path = tmp_path / "gbatch.db"
    Store(path).close()
    for name in ("gbatch.db", "gbatch.db-wal", "gbatch.db-shm"):
        (tmp_path / name).touch()
        (tmp_path / name).chmod(0o644)
    store = Store(path)
    try:
        assert {
            n: oct(mode(tmp_path / n)) for n in ("gbatch.db", "gbatch.db-wal", "gbatch.db-shm")
        } == dict.fromkeys(("gbatch.db", "gbatch.db-wal", "gbatch.db-shm"), "0o600")
    finally:
        store.close()


# -- bulk: many jobs, a batch per call --------------------------------------------------


def test_cancel_pending_cancels_only_pending_jobs_as_set_state_would(store: Store) -> None:
    first, running, last = store.submit([spec()] * 3, uid=1000, user="alice", now=T0)
    run_job(store, running)
    add_usage(store, "alice", 100.0, T0, half_life=DAY)
    usage_before = store.usage(T0 + 5, half_life=DAY)

    done = store.cancel_pending([last, running, 999, first, first], "cancelled by alice", T0 + 5)

    assert done == [first, last]
    for job_id in (first, last):
        job = store.require(job_id)
        assert (job.state, job.reason, job.end_time) == (
            JobState.CANCELLED,
            "cancelled by alice",
            T0 + 5,
        )
        assert [(e.time, e.state, e.reason) for e in store.events(job_id)] == [
            (T0, JobState.PENDING, "submitted"),
            (T0 + 5, JobState.CANCELLED, "cancelled by alice"),
        ]
    assert store.require(running).state is JobState.RUNNING  # the loop's to stop
    assert len(store.events(running)) == 3
    assert store.usage(T0 + 5, half_life=DAY) == usage_before
    assert store.runnable_jobs() == []
    assert integrity_ok(store)


def test_set_held_many_holds_and_releases_pending_jobs_only(store: Store) -> None:
    waiting, running = store.submit([spec(), spec()], uid=1000, user="alice", now=T0)
    run_job(store, running)

    assert store.set_held_many([running, waiting, 999], True, T0 + 1) == [waiting]
    held = store.require(waiting)
    assert (held.held, held.reason, held.state) == (True, "JobHeldUser", JobState.PENDING)
    assert store.runnable_jobs() == []
    assert store.set_held_many([waiting], False, T0 + 2) == [waiting]
    released = store.require(waiting)
    assert (released.held, released.reason) == (False, "")
    assert [(e.time, e.state, e.reason) for e in store.events(waiting)[1:]] == [
        (T0 + 1, JobState.PENDING, "held by user"),
        (T0 + 2, JobState.PENDING, "released"),
    ]
    assert not store.require(running).held
    assert len(store.events(running)) == 3


def test_a_full_disk_fails_a_bulk_batch_whole_and_keeps_the_batches_before(
    store: Store,
) -> None:
    ids = store.submit([spec()] * 4, uid=1000, user="alice", now=T0)
    assert store.cancel_pending(ids[:2], "sweep", T0 + 1) == ids[:2]
    pack_store(store, pad_job=ids[3])
    with pytest.raises(StoreFull):
        store.cancel_pending(ids[2:], "sweep", T0 + 2)
    with pytest.raises(StoreFull):
        store.set_held_many(ids[2:], True, T0 + 2)
    unpack_store(store)
    assert [store.require(i).state for i in ids] == [JobState.CANCELLED] * 2 + [
        JobState.PENDING
    ] * 2
    assert [store.require(i).held for i in ids[2:]] == [False, False]
    assert integrity_ok(store)


def test_pending_ids_page_through_pending_jobs_by_id_with_user_and_uid_filters(
    store: Store,
) -> None:
    alice = store.submit([spec()] * 5, uid=1000, user="alice", now=T0)
    (bob,) = store.submit([spec()], uid=1001, user="bob", now=T0)
    (other_alice,) = store.submit([spec()], uid=1002, user="alice", now=T0)  # same name
    run_job(store, alice[1])

    pages, after = [], 0
    while page := store.pending_ids(after=after, limit=2, users=["alice"], uid=1000):
        pages.append(page)
        after = page[-1]
    assert pages == [[alice[0], alice[2]], [alice[3], alice[4]]]
    assert store.pending_ids(after=0, limit=10) == [*alice[:1], *alice[2:], bob, other_alice]
    assert store.pending_ids(after=0, limit=10, users=["alice", "bob"], uid=1001) == [bob]


def test_briefs_name_the_owner_and_state_of_existing_jobs_by_id(store: Store) -> None:
    ids = store.submit([spec()] * 3, uid=1000, user="alice", now=T0)
    run_job(store, ids[1])
    expected = [
        (ids[0], 1000, "alice", JobState.PENDING),
        (ids[1], 1000, "alice", JobState.RUNNING),
        (ids[2], 1000, "alice", JobState.PENDING),
    ]
    assert [tuple(b)[:4] for b in store.briefs([ids[2], 999, ids[0], ids[1]])] == expected
    assert [b.id for b in store.briefs_between(ids[0], ids[2] + 50, after=0, limit=2)] == ids[:2]
    page = store.briefs_between(ids[0], ids[2] + 50, after=ids[1], limit=2)
    assert [tuple(b)[:4] for b in page] == expected[2:]
    assert store.briefs_between(ids[2] + 1, ids[2] + 50, after=0, limit=2) == []


def test_scancels_name_partition_and_node_filters_are_read_in_sql(store: Store) -> None:
    """-n/-p/-w (JobFilter): kept in briefs, applied to pending ids, tails and jobs."""
    a, b, c = store.submit([spec("a"), spec("b"), spec("a")], uid=1000, user="alice", now=T0)
    run_job(store, c)  # on gpu01
    only_a = JobFilter(names=("a",))
    assert [(x.id, x.kept) for x in store.briefs([a, b, c], only_a)] == [
        (a, True),
        (b, False),
        (c, True),
    ]
    page = store.briefs_between(a, c, after=0, limit=10, narrow=JobFilter(nodes=("gpu01",)))
    assert [x.kept for x in page] == [False, False, True]
    assert store.pending_ids(after=0, limit=10, narrow=only_a) == [a]
    assert store.pending_ids(after=0, limit=10, narrow=JobFilter(partitions=("nosuch",))) == []
    assert [j.id for j in store.jobs(states={JobState.RUNNING}, narrow=only_a)] == [c]
    assert store.jobs(states={JobState.RUNNING}, narrow=JobFilter(nodes=("gpu02",))) == []
    assert store.tails(narrow=JobFilter(nodes=("gpu01",))) == []


def test_runnable_jobs_per_user_are_each_users_first_in_queue_order(store: Store) -> None:
    def queue(user: str, *jobs: tuple[int, int, float]) -> list[int]:
        return [
            store.submit(
                [JobSpec(name=user, command=("x",), priority=priority, nice=nice)],
                uid=1000,
                user=user,
                now=T0 + at,
            )[0]
            for priority, nice, at in jobs
        ]

    # (priority, nice, submit time). alice's order: c and e (priority - nice = 3, c
    # submitted first), then a and d (0, a first), then b (-1).
    a, b, c, d, e = queue("alice", (0, 0, 0), (0, 1, 1), (3, 0, 2), (0, 0, 3), (5, 2, 4))
    bob = queue("bob", (0, 0, 0), (0, 0, 1))
    (held,) = store.submit([spec()], uid=1000, user="carol", now=T0, held=True)

    assert [j.id for j in store.runnable_jobs(per_user=3)] == sorted([c, e, a, *bob])
    assert [j.id for j in store.runnable_jobs(per_user=1)] == sorted([c, bob[0]])
    assert [j.id for j in store.runnable_jobs(per_user=10)] == [j.id for j in store.runnable_jobs()]
    assert held not in {j.id for j in store.runnable_jobs()}
    store.cancel_pending([c], "gone", T0 + 9)
    assert [j.id for j in store.runnable_jobs(per_user=2)] == sorted([e, a, *bob])
    assert {b, d} <= {j.id for j in store.runnable_jobs()}


def test_read_window_reads_only_changed_rows_and_tops_up_full_windows(store: Store) -> None:
    a, b, c, d = store.submit([spec(n) for n in "abcd"], uid=1000, user="alice", now=T0)
    window = RunnableWindow(per_user=2)
    first = store.read_window(window)
    assert [j.id for j in first] == [a, b]
    # Not kept in (nor clearing) the shared row cache: the loop's window is its own.
    rows._JOB_CACHE.clear()
    store.set_pending_reasons({b: "Priority"})
    store.cancel_pending([a], "gone", T0 + 1)  # leaves a full window: c comes in
    second = store.read_window(window)
    assert [j.id for j in second] == [b, c]
    assert second[0] is not first[1] and second[0].reason == "Priority"
    assert rows._JOB_CACHE == {}
    third = store.read_window(window)
    assert third[0] is second[0] and third[1] is second[1]  # nothing changed: same Jobs
    # d raised above b and c: it comes in, c goes out past the window's end.
    store.update_spec(d, spec("d"), replace(spec("d"), priority=5), {JobState.PENDING}, "", T0)
    assert [j.id for j in store.read_window(window)] == [b, d]
    store.set_held(b, True, T0 + 2)
    assert [j.id for j in store.read_window(window)] == [c, d]
    assert store.read_window(window) == [planning_job(j) for j in store.runnable_jobs(per_user=2)]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_first_read_spread_over_reads_with_writes_between_is_a_whole_read(
    data: st.DataObject,
) -> None:
    """A restarted loop's first read over reads of a few rows each (RunnableWindow's
    rows_per_read: a user's window over several reads where it does not fit one), the
    queue written between them (submits, cancels, holds, priority changes, reasons),
    and the change feed then read as many rows a read: not complete until the last
    user's; then, whenever a read leaves it neither part way through the feed
    (`behind`) nor short of a change written since, what a whole read gives; the writes
    stopped, the reads get there; and what a read tells changed adds up to the window."""
    draw = data.draw
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "store.db")
        try:
            users = ("alice", "bob", "carol", "dave")
            for user in users:
                store.submit([spec(user)] * draw(st.integers(0, 6)), 1000, user, T0)
            per_user = draw(st.integers(1, 5))
            window = RunnableWindow(per_user, rows_per_read=draw(st.integers(1, 4)))
            held: dict[int, object] = {}
            rounds = draw(st.integers(0, 8))  # reads with writes after them
            whole_reads = 0
            for _ in range(500):
                store.update_window(window)
                changes = window.take_changes()
                if changes is None:
                    held = {job.id: job for job in window.jobs()}
                else:
                    for job_id, job in changes.items():
                        if job is None:
                            held.pop(job_id, None)
                        else:
                            held[job_id] = job
                assert held == {job.id: job for job in window.jobs()}
                if window.behind or window.seen != rows._top_change(store._db):
                    assert not window.behind or window.complete
                elif window.complete:
                    whole = [planning_job(job) for job in store.runnable_jobs(per_user)]
                    assert window.jobs() == whole
                    whole_reads += 1
                    if not rounds:
                        break
                if not rounds:
                    continue
                rounds -= 1
                for _ in range(draw(st.integers(0, 3))):
                    jobs = store.jobs()
                    what = draw(st.sampled_from(("submit", "cancel", "hold", "priority", "reason")))
                    user = draw(st.sampled_from(users))
                    job = jobs[draw(st.integers(0, len(jobs) - 1))] if jobs else None
                    if what == "submit" or job is None:
                        store.submit([spec(user)] * draw(st.integers(1, 3)), 1000, user, T0)
                    elif job.state is not JobState.PENDING:
                        continue
                    elif what == "cancel":
                        store.cancel_pending([job.id], "gone", T0)
                    elif what == "hold":
                        store.set_held(job.id, not job.held, T0)
                    elif what == "priority":
                        new = replace(job.spec, priority=draw(st.integers(-3, 3)))
                        store.update_spec(job.id, job.spec, new, {JobState.PENDING}, "", T0)
                    else:
                        store.set_pending_reasons({job.id: "Priority"})
            assert whole_reads, "the reads never caught up with the writes"
            whole = [planning_job(job) for job in store.runnable_jobs(per_user)]
            assert store.read_window(window) == whole
        finally:
            store.close()


def test_a_burst_of_one_write_is_read_over_reads_in_id_order_and_each_row_once(
    store: Store,
) -> None:
    """A newcomer's burst (one transaction's rows, one change number) read with
    rows_per_read 2: two rows a read, in id order, each once, the window `behind` until
    the read that takes the last; a change written meanwhile waits for the next read."""
    window = RunnableWindow(per_user=6, rows_per_read=2)
    store.read_window(window)
    window.take_changes()
    burst = store.submit([spec(n) for n in "abcde"], uid=1000, user="alice", now=T0)
    told = []
    for _ in range(2):
        store.update_window(window)
        assert window.behind
        told.append(sorted(window.take_changes() or ()))
        if len(told) == 1:
            (late,) = store.submit([spec("f")], uid=1000, user="bob", now=T0)
    store.update_window(window)
    assert not window.behind
    told.append(sorted(window.take_changes() or ()))
    assert told == [burst[:2], burst[2:4], burst[4:]]
    assert [j.id for j in window.jobs()] == burst  # bob's came after the burst's read began
    store.update_window(window)
    assert window.take_changes() == {late: window.jobs()[-1]}
    assert window.jobs() == [planning_job(j) for j in store.runnable_jobs(per_user=6)]


def test_a_spread_first_read_splits_a_user_and_takes_a_row_read_twice_once(store: Store) -> None:
    """A user's window over several reads of a spread first read (two rows a read: the
    one asked and the one that tells whether there are more), one of its jobs read at
    the first, then lowered past the others and read again at the last: it is in the
    window once, and the window stays what a whole read gives as the queue moves on."""
    a, b, c, d = store.submit([spec(n) for n in "abcd"], uid=1000, user="alice", now=T0)
    window = RunnableWindow(per_user=6, rows_per_read=1)
    assert [j.id for j in store.read_window(window)] == [a, b] and not window.complete
    store.update_spec(a, spec("a"), replace(spec("a"), priority=-1), {JobState.PENDING}, "", T0)
    assert [j.id for j in store.read_window(window)] == [a, b, c, d]  # past b: c and d
    assert not window.complete
    assert [j.id for j in store.read_window(window)] == [a, b, c, d]  # a read again, once
    assert window.complete
    store.submit([spec("e"), spec("f"), spec("g")], uid=1000, user="alice", now=T0 + 1)
    whole = [planning_job(job) for job in store.runnable_jobs(per_user=6)]
    assert len(whole) == 6 and a not in {j.id for j in whole}
    # The feed read a row a read too: the read left behind before the submit ends
    # first, at the change number it began with; the next reads take the submit's.
    for _ in range(5):
        store.update_window(window)
        if not window.behind and window.seen == rows._top_change(store._db):
            break
    assert window.jobs() == whole


def test_the_loops_reasons_are_written_only_to_rows_as_read_and_not_read_back(
    store: Store,
) -> None:
    """set_pending_reasons with the loop's window writes a reason only to a row the
    window holds as it is (not one changed since its read: a hold keeps its reason),
    and the window's next read skips the rows it wrote, though another write landed
    between (it reads that one alone)."""
    a, b, c = store.submit([spec(n) for n in "abc"], uid=1000, user="alice", now=T0)
    window = RunnableWindow(per_user=5, rows_per_read=10)
    store.update_window(window)
    window.take_changes()
    (bob,) = store.submit([spec("bob")], uid=1001, user="bob", now=T0)  # not yet read
    store.set_held(c, True, T0)  # after the read: the plan's reason for c is stale
    store.set_pending_reasons({a: "Priority", b: "Resources", c: "Priority"}, window)
    assert [store.require(i).reason for i in (a, b, c)] == ["Priority", "Resources", "JobHeldUser"]
    store.update_window(window)
    changes = window.take_changes()
    assert changes is not None and sorted(changes) == [c, bob]  # c held: gone; bob put
    assert [window.reason(j) for j in window.jobs()] == ["Priority", "Resources", ""]
    assert window._own == [] and not window.behind
    store.set_pending_reasons({a: "Resources"}, window)  # nothing between: seen moves on
    assert window.seen == rows._top_change(store._db) and window._own == []
    store.update_window(window)
    assert window.take_changes() == {}
    assert [window.reason(j) for j in window.jobs()] == [
        store.require(j.id).reason for j in window.jobs()
    ]


def test_a_reason_for_a_row_changed_since_a_fill_read_it_is_not_written_and_read_again(
    store: Store,
) -> None:
    """A row a fill read (the next past a full window's end, after a cancel) that is
    written again before the loop's reason write (its change number past what the
    window has read whole): the reason is not written over it, and the window's next
    read takes the row again, with the row's reason."""
    a, b, _c = store.submit([spec(n) for n in "abc"], uid=1000, user="alice", now=T0)
    window = RunnableWindow(per_user=1, rows_per_read=1)
    store.update_window(window)
    assert [j.id for j in window.jobs()] == [a]
    store.cancel_pending([a], "gone", T0)
    store.submit([spec("bob")] * 2, uid=1001, user="bob", now=T0)
    store.update_window(window)  # a gone, b filled in; bob's rows not yet: behind
    assert window.behind and [j.id for j in window.jobs()] == [b]
    store.update_spec(b, spec("b"), replace(spec("b"), nice=1), {JobState.PENDING}, "why", T0)
    store.update_window(window)  # bob's first row: behind still
    store.update_window(window)  # bob's second: the read ends where it began
    assert not window.behind
    store.set_pending_reasons({b: "Priority"}, window)
    assert store.require(b).reason != "Priority"  # b changed after the fill read it
    store.update_window(window)
    assert [(j.id, window.reason(j)) for j in window.jobs()] == [
        (j.id, store.require(j.id).reason) for j in store.runnable_jobs(per_user=1)
    ]


def test_every_write_of_a_jobs_row_is_in_the_change_feed(store: Store) -> None:
    def top() -> int:
        return int(store._db.execute("SELECT max(changed) FROM jobs").fetchone()[0])

    (a,) = store.submit([spec("a")], uid=1000, user="alice", now=T0)
    (r,) = store.submit([spec("r")], uid=1000, user="alice", now=T0)
    writes = [
        lambda: store.set_pending_reasons({a: "Priority"}),
        lambda: store.set_held(a, True, T0),
        lambda: store.set_held_many([a], False, T0),
        lambda: store.note(a, JobState.PENDING, "why", T0),
        lambda: store.set_array_throttle(a, a, 1),
        lambda: store.set_state(r, JobState.CONFIGURING, "", T0, node="n", gpus=(0,)),
        lambda: store.set_state(r, JobState.RUNNING, "", T0),
        lambda: store.set_running_reason(r, 0, "idle"),
        lambda: store.cancel_pending([a], "gone", T0),
    ]
    for write in writes:
        before = top()
        write()
        assert top() > before
    before = top()
    store.submit([spec("t")] * 2, uid=1000, user="alice", now=T0)
    assert top() > before


def test_migration_5_gives_queued_jobs_their_queue_priority(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS[:4])
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    for name, priority, nice in (("plain", 0, 0), ("urgent", 7, 2), ("old", None, None)):
        fields = {"name": name, "command": ["x"]}
        if priority is not None:
            fields |= {"priority": priority, "nice": nice}
        raw.execute(
            "INSERT INTO jobs (uid, user, name, spec, state, submit_time) VALUES"
            " (1000, 'alice', ?, ?, 'PENDING', ?)",
            (name, json.dumps(fields), T0),
        )
    raw.commit()
    raw.close()
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS)

    migrated = Store(db_path)
    try:
        rows = migrated._db.execute("SELECT name, queue_priority FROM jobs ORDER BY id")
        assert rows.fetchall() == [("plain", 0), ("urgent", 5), ("old", 0)]
        indexes = {r[0] for r in migrated._db.execute("SELECT name FROM sqlite_master")}
        assert "jobs_queue" in indexes and "jobs_runnable" not in indexes
        assert [j.spec.name for j in migrated.runnable_jobs(per_user=1)] == ["urgent"]
    finally:
        migrated.close()


def test_migration_11_gives_old_rows_a_change_number_the_first_read_takes(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS[:10])
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    for name in ("a", "b"):
        raw.execute(
            "INSERT INTO jobs (uid, user, name, spec, state, submit_time) VALUES"
            " (1000, 'alice', ?, ?, 'PENDING', ?)",
            (name, json.dumps(spec(name).to_dict()), T0),
        )
    raw.commit()
    raw.close()
    a, b = 1, 2
    monkeypatch.setattr(schema, "MIGRATIONS", MIGRATIONS)

    migrated = Store(db_path)
    try:
        assert migrated.schema_version == len(MIGRATIONS) >= 11
        rows = migrated._db.execute("SELECT id, changed FROM jobs ORDER BY id")
        assert rows.fetchall() == [(a, 0), (b, 0)]
        indexes = {r[0] for r in migrated._db.execute("SELECT name FROM sqlite_master")}
        assert "jobs_changed" in indexes
        window = RunnableWindow(per_user=10)
        assert [j.id for j in migrated.read_window(window)] == [a, b]
        migrated.cancel_pending([a], "gone", T0)
        assert [j.id for j in migrated.read_window(window)] == [b]
    finally:
        migrated.close()


def test_the_window_holds_planning_specs_shared_by_jobs_that_ask_the_same(store: Store) -> None:
    """The loop's window keeps of a spec what the planner and its filters read, one
    object for jobs asking the same; a dependency's job keeps its name and dependency."""
    one = JobSpec(name="a", command=("python", "a.py"), gpus=2, time_limit=60, env=(("K", "v"),))
    two = replace(one, name="b", command=("python", "b.py"), mounts=("/data:/data",))
    after = replace(one, name="c", dependency="afterok:1")
    first, second, third = store.submit([one, two, after], 1000, "alice", 0)
    window = RunnableWindow(per_user=10)
    jobs = {job.id: job for job in store.read_window(window)}
    assert jobs[first].spec is jobs[second].spec
    assert jobs[first].spec.command == () and jobs[first].spec.env == ()
    assert (jobs[first].spec.gpus, jobs[first].spec.time_limit) == (2, 60)
    assert (jobs[third].spec.name, jobs[third].spec.dependency) == ("c", "afterok:1")
    assert store.require(first).spec == one  # the store's own reads are whole


def test_the_window_keeps_what_places_a_job_across_nodes(store: Store) -> None:
    """-N, -w, -x and --exclusive reach the planner through the loop's window (issue 32)."""
    spec = JobSpec(
        name="a",
        command=("true",),
        gpus=2,
        nodes=2,
        nodelist=("n1", "n2"),
        exclude=("n3",),
        exclusive=True,
    )
    store.submit([spec], 1000, "alice", 0)
    window = RunnableWindow(per_user=10)
    (job,) = store.read_window(window)
    kept = job.spec
    assert (kept.nodes, kept.nodelist, kept.exclude, kept.exclusive) == (
        2,
        ("n1", "n2"),
        ("n3",),
        True,
    )
