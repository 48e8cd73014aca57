"""A dependency on tasks of a large array costs the tasks it names (issue 16): the
submit check and the daemon's pass read those tasks, never the whole array, and
answer as the whole-array read did: the same refusals, the same jobs let through,
the same reasons, the same DependencyNeverSatisfied cancels."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.dependency import Dependency as Dep
from gbatch.core.dependency import JobRef, RefJob, Term, evaluate, parse, tasks_named
from gbatch.core.limits import Limits, UserLimits
from gbatch.core.model import JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import MAX_ARRAY, Caller, handle
from gbatch.head.store import Store
from gbatch.site.config import Config, Paths

ALICE = Caller(uid=5001, user="alice", pid=11)
SPEC = JobSpec(name="j", command=("train.py",), gpus=1).to_dict()
TASKS = 100_000

# -- the pure part: evaluate over the tasks named is evaluate over whole arrays ------

_KINDS = ("after", "afterany", "afterok", "afternotok", "aftercorr")
_STATES = [JobState.PENDING, JobState.RUNNING, JobState.COMPLETED, JobState.FAILED]
_ARRAYS = {10: {0: 10, 1: 11, 2: 12, 5: 13}, 20: {3: 20, 4: 21}}  # 30: a plain job
_REF = st.one_of(
    st.builds(JobRef, st.sampled_from([10, 20, 30])),
    st.builds(JobRef, st.sampled_from([10, 20]), st.integers(0, 6)),
    st.builds(lambda i: JobRef(i, whole_array=True), st.sampled_from([10, 20])),
)
_TERM = st.builds(
    lambda kind, refs: Term(kind, tuple(refs), (0,) * len(refs)),
    st.sampled_from(_KINDS),
    st.lists(_REF, min_size=1, max_size=3),
)
_DEP = st.builds(
    lambda terms, any_of: Dep(tuple(terms), any_of),
    st.lists(_TERM, min_size=1, max_size=3),
    st.booleans(),
)


@settings(max_examples=300)
@given(
    deps=st.lists(st.tuples(_DEP, st.one_of(st.none(), st.integers(0, 6))), min_size=1, max_size=4),
    states=st.lists(st.sampled_from(_STATES), min_size=8, max_size=8),
)
def test_the_tasks_named_answer_as_the_whole_arrays_do(
    deps: list[tuple[Dep, int | None]], states: list[JobState]
) -> None:
    ids = [10, 11, 12, 13, 20, 21, 30, 31]
    jobs = {job_id: RefJob(state, 0.0, None) for job_id, state in zip(ids, states, strict=True)}
    named = tasks_named(deps)
    cut = {
        array_id: {t: j for t, j in _ARRAYS[array_id].items() if whole or t in wanted}
        for array_id, (wanted, whole) in named.items()
        if array_id in _ARRAYS
    }
    for dep, task in deps:
        whole = evaluate(dep, jobs, _ARRAYS, 0.0, task=task)
        assert evaluate(dep, jobs, cut, 0.0, task=task) is whole
        for term in dep.terms:  # each ref alone, where a term's others would mask it
            for ref in term.refs:
                alone = Dep((Term(term.kind, (ref,), (0,)),))
                whole = evaluate(alone, jobs, _ARRAYS, 0.0, task=task)
                assert evaluate(alone, jobs, cut, 0.0, task=task) is whole


def test_one_task_named_is_that_task_and_aftercorr_of_a_task_is_its_counterpart() -> None:
    one = Dep((Term("afterok", (JobRef(10, 5),), (0,)),))
    corr = Dep((Term("aftercorr", (JobRef(20, whole_array=True),), (0,)),))
    plain = Dep((Term("afterok", (JobRef(30),), (0,)),))
    assert tasks_named([(one, None), (corr, 4), (plain, None)]) == {
        10: ({5}, False),
        20: ({4}, False),
    }
    assert tasks_named([(one, None), (corr, None)]) == {10: ({5}, False), 20: (set(), True)}
    assert tasks_named([(corr, 4), (corr, 7)]) == {20: ({4, 7}, False)}
    # A task named beside the whole array is still looked up alone: the whole array's
    # tail is read as one of its tasks.
    both = Dep((Term("afterok", (JobRef(20, whole_array=True), JobRef(20, 40)), (0, 0)),))
    assert tasks_named([(both, None), (corr, 4)]) == {20: ({4, 40}, True)}


# -- the store, the submit check and the daemon's pass --------------------------------


def _daemon(tmp_path: Path, *, kill: bool = False) -> tuple[Daemon, Store]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    limits = Limits(UserLimits(max_pending_jobs=10 * TASKS, max_array_size=TASKS))
    config = Config(simulate_gpus=2, limits=limits, kill_invalid_depend=kill)
    return Daemon(paths, config, store), store


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    made, store = _daemon(tmp_path)
    yield made
    made.committer.close()
    store.close()


def submit(daemon: Daemon, dependency: str | None = None, **fields: Any) -> dict[str, Any]:
    spec = SPEC if dependency is None else {**SPEC, "dependency": dependency}
    return handle(daemon, ALICE, {"op": "submit", "spec": spec, **fields})


def _no_whole_reads(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    whole: list[int] = []
    read = daemon.store.array_tasks
    monkeypatch.setattr(
        daemon.store,
        "array_tasks",
        lambda array_id, most: whole.append(array_id) or read(array_id, most),
    )
    return whole


def test_submit_checks_a_task_of_a_large_array_without_reading_the_array(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    array = submit(daemon, array=f"0-{2 * TASKS - 1}:2")["ids"][0]
    plain = submit(daemon)["ids"][0]
    whole = _no_whole_reads(daemon, monkeypatch)
    tail_task = 2 * (TASKS - 7)
    ok = submit(daemon, dependency=f"afterok:{array}_{tail_task},afterany:{array}_4:{plain}")
    assert ok.get("ok", True), ok
    stored = daemon.store.require(ok["ids"][0]).spec.dependency
    assert stored == f"afterok:{array}_{tail_task},afterany:{array}_4:{plain}"
    whole_ok = submit(daemon, dependency=f"afterok:{array}")
    assert daemon.store.require(whole_ok["ids"][0]).spec.dependency == f"afterok:{array}_*"
    # Refusals word for word as before: an index the array lacks, a task of a plain
    # job, a task of an array's other task, N_* of a plain job.
    refusals = {
        f"{array}_3": f"dependency: {array}_3 is not a task of an array (Job dependency "
        f"problem). Name the array's id ({array}) or one of its tasks",
        f"{array}_{2 * TASKS}": f"dependency: {array}_{2 * TASKS} is not a task of an array "
        f"(Job dependency problem). Name the array's id ({array}) or one of its tasks",
        f"{plain}_0": f"dependency: {plain}_0 is not a task of an array (Job dependency "
        f"problem). Name the array's id ({plain}) or one of its tasks",
        f"{array + 1}_0": f"dependency: {array + 1}_0 is not a task of an array (Job "
        f"dependency problem). Name the array's id ({array + 1}) or one of its tasks",
        f"{plain}_*": f"dependency: job {plain} is not an array. Write {plain} instead of "
        f"{plain}_*",
    }
    for named, error in refusals.items():
        refused = submit(daemon, dependency=f"afterok:{named}")
        assert (refused["ok"], refused["error"]) == (False, error)
    assert whole == []


def _scenario(daemon: Daemon) -> list[int]:
    """Arrays (a large one with a stepped expression, tasks of it ended in its rows and
    in its tail; a small one; a list of indices), a plain job, and dependents on tasks,
    whole arrays and counterparts: the dependents' ids."""
    big = submit(daemon, array=f"0-{2 * 20_000 - 1}:2")["ids"][0]
    small = submit(daemon, array="0-99")["ids"][0]
    listed = submit(daemon, array="4,9,16,25,36")["ids"][0]
    plain = submit(daemon)["ids"][0]
    gone = submit(daemon, array="0-199")["ids"][0]  # cancelled whole: its tail too
    rows = submit(daemon, array=f"0-{ARRAY_ROWS - 3}")["ids"][0]  # no tail
    # Its rows ended, its tail waiting: the tail alone keeps afterok from holding.
    ended_rows = submit(daemon, array=f"0-{ARRAY_ROWS + 9}")["ids"][0]
    for task in (f"{big}_2", f"{big}_30000", f"{small}_7", f"{listed}_9", str(gone)):
        handle(daemon, ALICE, {"op": "cancel", "jobs": [task]})
    handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{ended_rows}_[0-{ARRAY_ROWS - 1}]"]})
    dependencies = [
        f"afterok:{big}_0",
        f"afterok:{big}_2",  # cancelled: never
        f"afterany:{big}_2",
        f"afternotok:{big}_30000",
        f"afterok:{big}_30002",  # in the tail
        f"afterok:{big}_39998?afterok:{small}_7",
        f"afterok:{small}_8,afterany:{plain}",
        f"after:{listed}_16:{listed}_9",
        f"afterok:{small}",  # the whole array
        f"afterany:{listed}",
        f"aftercorr:{small}",
        f"aftercorr:{listed}",
        f"aftercorr:{big},afterok:{plain}",
        "singleton",
        f"afterany:{gone}",
        f"afterok:{gone}?afterany:{big}_4",
        f"afternotok:{gone}_150",
        f"afterok:{rows}",
        f"afternotok:{rows}",
        f"aftercorr:{rows},afterany:{gone}",
        f"afterany:{ended_rows}",
        f"afterany:{ended_rows}_3",
    ]
    ids = [submit(daemon, dependency=text)["ids"][0] for text in dependencies]
    for corr in (f"aftercorr:{small}", f"aftercorr:{listed}", f"aftercorr:{big}_2"):
        reply = submit(daemon, dependency=corr, array=f"0-{ARRAY_ROWS + 8}")
        ids.extend(range(reply["ids"][0], reply["ids"][0] + ARRAY_ROWS + 1))
    return ids


def _pass(daemon: Daemon, ids: list[int]) -> tuple[list[int], list[tuple[JobState, str]]]:
    pending = [daemon.store.require(job_id) for job_id in ids]
    free = daemon.hold_back_dependents(pending, daemon.clock())
    jobs = [daemon.store.require(job_id) for job_id in ids]
    return [job.id for job in free], [(job.state, job.reason) for job in jobs]


@pytest.mark.parametrize("kill", [False, True])
def test_a_pass_over_the_tasks_named_decides_as_the_whole_arrays_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill: bool
) -> None:
    named, named_store = _daemon(tmp_path / "named", kill=kill)
    whole, whole_store = _daemon(tmp_path / "whole", kill=kill)
    try:
        ids = _scenario(named)
        assert _scenario(whole) == ids
        # The whole-array read, as hold_back_dependents did it before: every array
        # named read whole, whatever tasks were named.
        monkeypatch.setattr(
            whole,
            "_array_tasks",
            lambda array_id, indices, all_of: whole.store.array_tasks(array_id, MAX_ARRAY),
        )
        # First the dependents that name tasks alone (a whole array read in the same
        # pass would answer for them), twice: the second answers from what was read.
        alone = [
            job.id
            for job in map(named.store.require, ids)
            if None
            not in tasks_named([(parse(job.spec.dependency or ""), job.spec.array_task)]).values()
        ]
        assert len(alone) > len(ids) // 2
        for group in (alone, alone, ids):
            assert _pass(named, group) == _pass(whole, group)
        assert (
            any(reason == "DependencyNeverSatisfied" for _, reason in _pass(named, ids)[1]) != kill
        )
    finally:
        for made, store in ((named, named_store), (whole, whole_store)):
            made.committer.close()
            store.close()


def test_a_pass_reads_the_tasks_named_and_once(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}")["ids"][0]
    ids = [submit(daemon, dependency=f"afterok:{array}_{k}")["ids"][0] for k in (5, 50_000, 99_999)]
    whole = _no_whole_reads(daemon, monkeypatch)
    looked_up: list[tuple[int, tuple[tuple[int, int], ...]]] = []
    read = daemon.store.array_tasks_at
    monkeypatch.setattr(
        daemon.store,
        "array_tasks_at",
        lambda array_id, spans, most: (
            looked_up.append((array_id, tuple(spans))) or read(array_id, spans, most)
        ),
    )
    asked = [daemon.store.require(job_id) for job_id in ids]
    assert daemon.hold_back_dependents(asked, daemon.clock()) == []
    assert daemon.hold_back_dependents(asked, daemon.clock()) == []
    assert looked_up == [(array, ((5, 5), (50_000, 50_000), (99_999, 99_999)))]
    assert whole == []
    assert daemon.store.array_tasks_at(array, [], MAX_ARRAY) == {}
    assert daemon.store.array_tasks_at(array + 1, [(0, 9)], MAX_ARRAY) is None
