"""A view's page of the narrow listing (ListJobs sort/shown_states/search/offset/counts,
Store.listing_page): what the TUI's queue once computed from every job, cut in SQL."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import LISTING_SORTS, Store
from gbatch.protocol import wire
from gbatch.site.config import Config, Paths
from gbatch.tui import rows

ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=12)
NOW = 1_700_000_000.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2), store, clock=lambda: NOW)
    yield made
    made.committer.close()
    store.close()


def submit(daemon: Daemon, caller: Caller, name: str, gpus: int = 1, **fields: Any) -> list[int]:
    spec = JobSpec(name=name, command=("train.py",), gpus=gpus).to_dict()
    reply = handle(daemon, caller, {"op": "submit", "spec": spec, **fields})
    assert reply.get("ok", True), reply
    return list(reply["ids"])


def set_rows(daemon: Daemon, sql: str, *params: object) -> None:
    """Put rows into states the unit tier's daemon never runs them to (no loop here)."""
    with sqlite3.connect(daemon.store.path) as db:
        db.execute(sql, params)


@pytest.fixture
def lab(daemon: Daemon) -> Daemon:
    """Alice's and Bob's jobs in every active state, names and GPUs that tie and
    differ, a held job, an array with its tail (ARRAY_ROWS rows, one record)."""
    return fill_lab(daemon)


def fill_lab(daemon: Daemon) -> Daemon:
    """The lab fixture's jobs (a function, for a module's store too)."""
    ids = submit(daemon, ALICE, "zeta", gpus=2)
    ids += submit(daemon, BOB, "alpha", gpus=1)
    ids += submit(daemon, ALICE, "Mid", gpus=1, count=3)
    ids += submit(daemon, ALICE, "held", gpus=4, held=True)
    ids += submit(daemon, BOB, "sweep", gpus=1, array="0-39")
    ids += submit(daemon, ALICE, "alpha", gpus=3)
    for at, job_id in enumerate(ids[:4]):  # running on two nodes, started apart
        node = "gpu-b" if at % 2 else "gpu-a"
        set_rows(
            daemon,
            "UPDATE jobs SET state = 'RUNNING', start_time = ?, node = ? WHERE id = ?",
            NOW - 100 * (at + 1),
            node,
            job_id,
        )
    set_rows(
        daemon, "UPDATE jobs SET state = 'COMPLETING', start_time = ? WHERE id = ?", NOW, ids[4]
    )
    set_rows(daemon, "UPDATE jobs SET reason = 'Resources' WHERE id = ?", ids[-1])
    return daemon


def whole_listing(daemon: Daemon, caller: Caller, **fields: Any) -> list[Job]:
    reply = handle(daemon, caller, {"op": "jobs", "columns": True, **fields})
    return wire.jobs_from_columns(reply["columns"])


def expected(
    jobs: list[Job], sort: str, reverse: bool, state: JobState | None, search: str
) -> list[int]:
    """What the queue view showed, sorted and filtered in Python (rows.sort_jobs), the
    search over the JOBID, USER, whole NAME and NODE(REASON) cells."""
    cells = rows.job_cells(jobs, NOW)
    needle = search.lower()

    def found(job: Job) -> bool:
        shown = cells[job.id]
        return any(needle in text.lower() for text in (shown[0], shown[1], job.spec.name, shown[6]))

    kept = [job for job in jobs if (state is None or job.state is state) and found(job)]
    return [job.id for job in rows.sort_jobs(kept, sort, NOW, cells, reverse=reverse)]


def page(daemon: Daemon, caller: Caller, **fields: Any) -> dict[str, Any]:
    return handle(daemon, caller, {"op": "jobs", "columns": True, **fields})


@pytest.mark.parametrize("sort", list(LISTING_SORTS))
@pytest.mark.parametrize("reverse", [False, True])
def test_every_sort_orders_as_the_queue_view_did_ties_by_id(
    lab: Daemon, sort: str, reverse: bool
) -> None:
    jobs = whole_listing(lab, ALICE)
    assert any(job.array_more for job in jobs)  # the tail's record is among them
    reply = page(lab, ALICE, sort=sort, reverse=reverse)
    assert reply["columns"]["id"] == expected(jobs, sort, reverse, None, "")
    assert reply["total"] == len(jobs)


@pytest.mark.parametrize(
    ("state", "search"),
    [
        (JobState.PENDING, ""),
        (JobState.RUNNING, ""),
        (None, "ALP"),  # a name, any case
        (None, "gpu-b"),  # a node
        (None, "resou"),  # a pending reason, (Resources)
        (None, "jobheld"),  # the held job's (JobHeldUser), never stored as such
        (None, "bob"),
        (None, "_[3"),  # the tail's label, N_[32-39]
        (JobState.PENDING, "sweep"),
    ],
)
def test_shown_states_and_search_narrow_the_listing_counts_stay_whole(
    lab: Daemon, state: JobState | None, search: str
) -> None:
    jobs = whole_listing(lab, ALICE)
    fields: dict[str, Any] = {"search": search, "counts": True}
    if state is not None:
        fields["shown_states"] = [state.code]
    reply = page(lab, ALICE, **fields)
    want = expected(jobs, "id", False, state, search)
    assert want, "the case narrows to something"
    assert reply["columns"]["id"] == want
    assert reply["total"] == len(want)
    assert reply["counts"] == dict(Counter(job.state.value for job in jobs))
    for offset, limit in [(0, 1), (0, 100), (1, 100), (len(want), 3), (len(want) + 5, 3)]:
        cut = page(lab, ALICE, **fields, offset=offset, limit=limit)
        assert cut["columns"]["id"] == want[offset : offset + limit]
        assert cut["total"] == len(want), (offset, limit)


@pytest.mark.parametrize("limit", [1, 3, 7, 100])
def test_pages_by_offset_put_together_are_the_whole_sorted_listing(lab: Daemon, limit: int) -> None:
    whole = page(lab, ALICE, sort="name", reverse=True)["columns"]["id"]
    assert len(whole) == 1 + 1 + 3 + 1 + ARRAY_ROWS + 1 + 1
    seen: list[int] = []
    while len(seen) < len(whole):
        reply = page(lab, ALICE, sort="name", reverse=True, offset=len(seen), limit=limit)
        assert reply["total"] == len(whole)
        assert 0 < len(reply["columns"]["id"]) <= limit
        seen += reply["columns"]["id"]
    assert seen == whole
    assert page(lab, ALICE, sort="name", offset=len(whole), limit=5)["columns"]["id"] == []


def test_a_page_decodes_as_the_listing_does_the_tails_label_included(lab: Daemon) -> None:
    jobs = {job.id: job for job in whole_listing(lab, ALICE)}
    reply = page(lab, ALICE, sort="gpus", reverse=True)
    for job in wire.jobs_from_columns(reply["columns"]):
        assert job == jobs[job.id]


def test_mine_counts_and_private_data_keep_to_the_callers_jobs(lab: Daemon) -> None:
    jobs = whole_listing(lab, ALICE, users=["bob"])
    reply = page(lab, ALICE, users=["bob"], counts=True)
    assert reply["columns"]["id"] == [job.id for job in jobs]
    assert reply["counts"] == dict(Counter(job.state.value for job in jobs))
    object.__setattr__(lab.config, "private_data", True)
    mine = page(lab, BOB, counts=True)
    assert set(mine["columns"]["user"]) == {"bob"}
    assert mine["total"] == len(jobs)


def test_the_finished_view_pages_the_history_by_its_final_states(lab: Daemon) -> None:
    set_rows(lab, "UPDATE jobs SET state = 'COMPLETED', end_time = ? WHERE name = 'Mid'", NOW)
    set_rows(
        lab, "UPDATE jobs SET state = 'FAILED', reason = 'NonZeroExitCode' WHERE name = 'zeta'"
    )
    finals = [state.code for state in JobState if state.is_final]
    reply = page(lab, ALICE, history=True, states=finals, since=NOW - 86400, counts=True)
    assert reply["counts"] == {"COMPLETED": 3, "FAILED": 1}
    failed = page(lab, ALICE, history=True, states=finals, shown_states=["F"], search="nonzero")
    assert failed["total"] == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"sort": "colour"},
        {"offset": -1},
        {"limit": 0, "offset": 0},
        {"sort": "id", "names": ["x"]},
        {"search": "x", "columns": False},
    ],
)
def test_a_page_it_cannot_serve_is_refused_with_what_to_do(lab: Daemon, fields: Any) -> None:
    reply = handle(lab, ALICE, {"op": "jobs", "columns": True, **fields})
    assert not reply["ok"]
    assert reply["kind"] == "invalid", reply


@pytest.fixture(scope="module")
def odd_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The lab, and cells a LIKE pattern could misread: %, _, a backslash, brackets,
    capitals and letters outside ASCII, names of digits that are also job ids."""
    paths = Paths(tmp_path_factory.mktemp("odd"))
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2), store, clock=lambda: NOW)
    fill_lab(made)
    for name in ("x_3.y", "RUN_12", "12", "Ete-ETE+1"):
        submit(made, BOB, name)
    submit(made, ALICE, "sweep2", array="5-60:5%2")
    # Job names keep to letters, digits and . _ + -: reasons and nodes carry the rest.
    # Letters outside ASCII in lower case alone: SQLite folds ASCII letters alone (a
    # cell's É is not é to a search, as before), where Python's lower() folds them all.
    set_rows(made, "UPDATE jobs SET reason = ? WHERE name = '12'", "100%_done a\\b (é)")
    set_rows(made, "UPDATE jobs SET reason = ? WHERE name = 'RUN_12'", "été-Ete")
    set_rows(
        made,
        "UPDATE jobs SET state = 'RUNNING', start_time = ?, node = ? WHERE name = ?",
        NOW - 5,
        "n_[1]%",
        "x_3.y",
    )
    yield made
    made.committer.close()
    store.close()


_SEARCH_TEXT = st.text(alphabet="aAlLpPrReEsS%_\\[]()-,0123456789 éÉgub", max_size=5)
_SEARCH_CASES = ["%", "_", "\\", "1", "_[", "gpu-", "é", "ÉT", "%_d", "n_[1]"]


@given(
    sort=st.sampled_from(list(LISTING_SORTS)),
    reverse=st.booleans(),
    state=st.sampled_from([None, JobState.PENDING, JobState.RUNNING]),
    search=st.one_of(_SEARCH_TEXT, st.sampled_from(_SEARCH_CASES)),
    offset=st.integers(0, 60),
    limit=st.sampled_from([None, 1, 5, 100]),
)
def test_a_page_is_the_python_views_sort_and_search_cut(
    odd_lab: Daemon,
    sort: str,
    reverse: bool,
    state: JobState | None,
    search: str,
    offset: int,
    limit: int | None,
) -> None:
    """Any search text (LIKE's own characters too), any sort, any page: the rows and
    the total the queue view computed in Python from the whole listing."""
    jobs = whole_listing(odd_lab, ALICE)
    want = expected(jobs, sort, reverse, state, search.strip())  # as the handler takes it
    fields: dict[str, Any] = {"sort": sort, "reverse": reverse, "search": search}
    if state is not None:
        fields["shown_states"] = [state.code]
    fields["offset"] = offset
    if limit is not None:
        fields["limit"] = limit
    reply = page(odd_lab, ALICE, **fields)
    end = None if limit is None else offset + limit
    assert reply["columns"]["id"] == want[offset:end]
    assert reply["total"] == len(want)


def test_a_page_asked_again_with_no_row_changed_is_the_page_kept(lab: Daemon) -> None:
    """The TUI asks for the same page every second: while no job row changes (each
    write of a row gives it a new change number) the page read last answers. A row
    changed behind the store's back (raw SQL, no change number) shows that it did."""
    fields: dict[str, Any] = {"search": "alp", "sort": "where", "counts": True, "limit": 5}
    first = page(lab, ALICE, **fields)
    set_rows(lab, "UPDATE jobs SET node = 'alpine-1' WHERE name = 'zeta'")  # RUNNING
    assert page(lab, ALICE, **fields) == first  # kept: no change number moved
    assert page(lab, ALICE, **{**fields, "limit": 6}) != first  # another page: read
    (held,) = [
        j.id for j in whole_listing(lab, ALICE) if (j.user, j.spec.name) == ("alice", "alpha")
    ]
    handle(lab, ALICE, {"op": "hold", "ids": [held]})  # a write: a new change number
    again = page(lab, ALICE, **fields)
    assert again != first
    jobs = whole_listing(lab, ALICE)
    assert again["columns"]["id"] == expected(jobs, "where", False, None, "alp")[:5]
    assert again["total"] == len(expected(jobs, "where", False, None, "alp"))


def test_a_whole_listing_of_many_rows_is_not_kept(daemon: Daemon) -> None:
    """Only a view's page is kept: a listing of more than _KEPT_ROWS rows is read again
    (its rows would be memory held for nothing)."""
    spec = JobSpec(name="many", command=("train.py",), gpus=1)
    daemon.store.submit([spec] * 1001, ALICE.uid, ALICE.user, NOW)  # 1,001 rows
    first = page(daemon, ALICE, sort="name", search="many")
    assert first["total"] == 1001
    set_rows(daemon, "UPDATE jobs SET reason = 'Many' WHERE id = 1")
    assert page(daemon, ALICE, sort="name", search="many")["columns"]["reason"][0] == "Many"
    small = page(daemon, ALICE, sort="name", search="many", limit=1000)
    set_rows(daemon, "UPDATE jobs SET reason = 'Again' WHERE id = 1")
    assert page(daemon, ALICE, sort="name", search="many", limit=1000) == small
