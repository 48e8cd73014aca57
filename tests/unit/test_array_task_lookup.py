"""One task of a large array (N_K, N_[K-M]) is found at the cost of those tasks:
Store.array_tasks_in answers what array_tasks cut to those indices answered, for a
task that is a row, one still in the tail, one that does not exist, a throttled
array's, a finished one's, and ids that are no array's; and the commands that name
tasks (squeue -j, sacct -j, scancel, scontrol show job) print the same as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.core import arrays
from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.limits import Limits, UserLimits
from gbatch.core.model import JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import MAX_ARRAY, Caller, handle
from gbatch.head.store import Store
from gbatch.protocol import wire
from gbatch.render.formatting import format_job_details, format_sacct, format_squeue
from gbatch.site.config import Config, Paths

ALICE = Caller(uid=5001, user="alice", pid=11)
SPEC = JobSpec(name="j", command=("train.py",), gpus=1).to_dict()
TASKS = 100_000


def _daemon(tmp_path: Path) -> tuple[Daemon, Store]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    limits = Limits(UserLimits(max_pending_jobs=10 * TASKS, max_array_size=TASKS))
    return Daemon(paths, Config(simulate_gpus=2, limits=limits), store), store


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    made, store = _daemon(tmp_path)
    yield made
    made.committer.close()
    store.close()


def submit(daemon: Daemon, **fields: Any) -> list[int]:
    reply = handle(daemon, ALICE, {"op": "submit", "spec": SPEC, **fields})
    assert reply.get("ok", True), reply
    return list(reply["ids"])


def listed(daemon: Daemon, **fields: Any) -> list[wire.Job]:
    reply = handle(daemon, ALICE, {"op": "jobs", **fields})
    return [wire.job_from_wire(job) for job in reply["jobs"]]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[int]]]:
    """One store holding arrays of every shape: a 100,000-task array with a stepped
    expression, tasks of it made rows and cancelled (finished) inside its tail, a
    throttled array, an array of a list of indices, and a plain job after them."""
    made, store = _daemon(tmp_path_factory.mktemp("shapes"))
    big = submit(made, array=f"1-{2 * TASKS - 1}:2")[0]
    for task in (3, 5001, 77777, 2 * TASKS - 1):
        handle(made, ALICE, {"op": "cancel", "jobs": [f"{big}_{task}"]})
    throttled = submit(made, array="0-99%3")[0]
    made.schedule(made.clock())
    listed_ = submit(made, array="4,9,16,25,36")[0]
    plain = submit(made)[0]
    yield made, [big, big + 40, big + 50_000, throttled, listed_, listed_ + 2, plain, plain + 9]
    made.committer.close()
    store.close()


def _cut(tasks: dict[int, int] | None, spans: arrays.Spans) -> dict[int, int]:
    return {t: j for t, j in (tasks or {}).items() if any(a <= t <= b for a, b in spans)}


_SPAN = st.tuples(st.integers(0, 2 * TASKS + 5), st.integers(0, 40)).map(
    lambda start: (start[0], start[0] + start[1])
)
_KNOWN = [(1, 1), (3, 3), (65, 65), (67, 67), (5001, 5001), (199_999, 199_999), (0, 99)]


@given(
    which=st.integers(0, 7),
    spans=st.lists(st.one_of(_SPAN, st.sampled_from(_KNOWN)), min_size=1, max_size=4),
)
def test_tasks_in_is_array_tasks_cut_to_the_named_indices(
    shapes: tuple[Daemon, list[int]], which: int, spans: list[tuple[int, int]]
) -> None:
    daemon, ids = shapes
    array_id = ids[which]
    whole = daemon.store.array_tasks(array_id, MAX_ARRAY)
    assert daemon.store.array_tasks_in(array_id, spans, MAX_ARRAY) == _cut(whole, tuple(spans))


def test_a_row_a_tail_task_and_a_finished_one_are_found_by_index(
    shapes: tuple[Daemon, list[int]],
) -> None:
    daemon, ids = shapes
    big, throttled, listed_ = ids[0], ids[3], ids[4]
    store = daemon.store
    assert store.array_tasks_in(big, [(1, 1)], MAX_ARRAY) == {1: big}  # a row
    assert store.array_tasks_in(big, [(100_001, 100_001)], MAX_ARRAY) == {100_001: big + 50_000}
    assert store.array_tasks_in(big, [(5001, 5001)], MAX_ARRAY) == {5001: big + 2500}  # ended
    assert store.require(big + 2500).state is JobState.CANCELLED
    assert store.array_tasks_in(big, [(2, 2), (200_001, 300_000)], MAX_ARRAY) == {}
    assert store.array_tasks_in(big, [(199_997, 10**17)], MAX_ARRAY) == {
        199_997: big + TASKS - 2,
        199_999: big + TASKS - 1,
    }
    assert store.array_tasks_in(throttled, [(98, 200)], MAX_ARRAY) == {
        98: throttled + 98,
        99: throttled + 99,
    }
    assert store.array_tasks_in(listed_, [(5, 20)], MAX_ARRAY) == {9: listed_ + 1, 16: listed_ + 2}
    # Ids that are no array's: a task's that is not the first, a plain job's, none.
    for other in (big + 40, listed_ + 2, ids[6], ids[7]):
        assert store.array_tasks_in(other, [(0, 10)], MAX_ARRAY) == {}


def test_squeue_sacct_and_show_job_name_one_task_of_a_large_array(daemon: Daemon) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}")[0]
    handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{array}_90000"]})
    fmt = "%i %A %T"
    assert format_squeue(listed(daemon, jobs=[f"{array}_5"]), 0, fmt=fmt).splitlines()[1:] == [
        f"{array}_5 {array + 5} PENDING"
    ]
    assert format_squeue(listed(daemon, jobs=[f"{array}_500"]), 0, fmt=fmt).splitlines()[1:] == [
        f"{array}_500 {array + 500} PENDING"
    ]
    several = listed(daemon, jobs=[f"{array}_[30-33,89999-90001]"])
    assert format_squeue(several, 0, fmt="%i %T", expand_arrays=True).splitlines()[1:] == [
        *(f"{array}_{k} PENDING" for k in (30, 31, 32, 33, 89999)),
        f"{array}_90000 CANCELLED",  # squeue -j shows a job that ended, as Slurm does
        f"{array}_90001 PENDING",
    ]
    history = listed(daemon, history=True, jobs=[f"{array}_90000", f"{array}_40000"])
    sacct = format_sacct(history, 0, fields=["JobID", "State"], parsable=True).splitlines()[1:]
    assert sorted(sacct) == [f"{array}_40000|PENDING", f"{array}_90000|CANCELLED"]
    shown = handle(daemon, ALICE, {"op": "job", "id": array, "task": 77_000})
    job = wire.job_from_wire(shown["job"])
    assert job.id == array + 77_000
    assert f"JobId={array + 77_000} ArrayJobId={array} ArrayTaskId=77000" in format_job_details(
        job, [], 0
    )
    assert ARRAY_ROWS < 500  # the cases above name tasks still in the tail


def test_a_task_that_does_not_exist_is_refused_as_before(daemon: Daemon) -> None:
    array = submit(daemon, array="0-99")[0]
    missing = handle(daemon, ALICE, {"op": "job", "id": array, "task": 100})
    assert missing["ok"] is False and missing["error"] == f"Invalid job id specified: {array}_100"
    cancel = handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{array}_100", f"{array}_7"]})
    assert (cancel["done"], cancel["failed"]) == (1, 1)
    assert cancel["results"][0]["error"] == f"Invalid job id specified: {array}_100"
    not_an_array = handle(daemon, ALICE, {"op": "job", "id": array + 1, "task": 0})
    assert not_an_array["error"] == f"Invalid job id specified: {array + 1}_0"
    assert listed(daemon, jobs=[f"{array}_[100-200]"]) == []


def test_scancel_of_a_task_range_in_the_tail_cancels_just_those(daemon: Daemon) -> None:
    array = submit(daemon, array=f"0-{TASKS - 1}")[0]
    reply = handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{array}_[60000-60002]"]})
    assert (reply["done"], reply["failed"]) == (3, 0)
    states = [daemon.store.require(array + k).state for k in (59_999, 60_000, 60_002, 60_003)]
    assert states == [JobState.PENDING, JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING]


def test_show_job_of_an_arrays_id_shows_its_tasks_to_its_last(daemon: Daemon) -> None:
    """Its rows, the tail as one record, and its last task made a row and ended."""
    array = submit(daemon, array="0-49")[0]
    handle(daemon, ALICE, {"op": "cancel", "jobs": [f"{array}_49"]})
    reply = handle(daemon, ALICE, {"op": "job", "id": array, "with_tasks": True})
    tasks = [wire.job_from_wire(t) for t in reply["tasks"]]
    assert [t.id for t in tasks] == [*range(array + 1, array + ARRAY_ROWS + 1), array + 49]
    assert tasks[-2].array_more == ((ARRAY_ROWS + 1, 48),)


def _spans(points: set[int]) -> arrays.Spans:
    return tuple(arrays.position_spans(None, [(p, p) for p in points]))


@given(st.sets(st.integers(0, 60)), st.sets(st.integers(0, 60)))
def test_overlap_is_the_positions_in_both(left: set[int], right: set[int]) -> None:
    both = arrays.overlap(_spans(left), _spans(right))
    assert [p for a, b in both for p in range(a, b + 1)] == sorted(left & right)


@given(
    st.sets(st.integers(0, 300), min_size=1),
    st.lists(_SPAN.map(lambda s: (s[0] % 320, s[0] % 320 + s[1] % 9))),
)
def test_position_spans_are_the_positions_of_the_named_indices(
    indices: set[int], named: list[tuple[int, int]]
) -> None:
    expression = ",".join(f"{i}-{i}" for i in sorted(indices))  # "N" alone is 0..N-1
    ordered = sorted(indices)
    expected = [p for p, i in enumerate(ordered) if any(a <= i <= b for a, b in named)]
    spans = arrays.position_spans(expression, named)
    assert [p for a, b in spans for p in range(a, b + 1)] == expected
