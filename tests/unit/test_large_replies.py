"""A large listing's reply (issue 16): written in pieces that make exactly the line
json.dumps would (so any client reading one line is served as before), built without
filling the daemon's caches, and followed by giving the freed heap back."""

from __future__ import annotations

import json
import platform
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from test_server_limits import ROOT, connect, serving, socket_path

from gbatch.core.model import JobSpec, JobState
from gbatch.head import handlers, heap, server, store
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import listing
from gbatch.head.handlers.auth import is_admin
from gbatch.head.handlers.targets import parse_states
from gbatch.head.store import rows
from gbatch.protocol import codec, listings, replies, requests
from gbatch.protocol.client import Client, DaemonUnavailable

ROWS = 2500  # more than replies.REPLY_PIECE_ITEMS: a listing of several pieces


def queue(daemon: Daemon, count: int = ROWS) -> None:
    """`count` held jobs, each its own row and its own spec (as a sweep's are)."""
    specs = [JobSpec(name="j", command=("true",), env=(("I", str(i)),)) for i in range(count)]
    daemon.store.submit(specs, 0, "root", 0, held=True)


LISTINGS = {
    "squeue": requests.ListJobs(brief=True, columns=True),
    "squeue -t all": requests.ListJobs(history=True, brief=True, columns=True),
    "sacct -a -S all": requests.ListJobs(history=True, brief=True),
    "tui": requests.ListJobs(table=True),
    "full records": requests.ListJobs(),
}


@pytest.mark.parametrize("what", sorted(LISTINGS))
def test_a_large_listings_pieces_make_json_dumps_line_byte_for_byte(
    daemon: Daemon, what: str
) -> None:
    queue(daemon)
    reply = handlers.handle(daemon, ROOT, requests.encode_request(LISTINGS[what]))
    pieces = replies.encode_reply(reply)
    whole = json.dumps(reply, separators=replies.COMPACT).encode() + b"\n"
    assert b"".join(pieces) == whole
    assert len(pieces) > 1 and max(map(len, pieces)) < len(whole) / 2


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": True, "pid": 7},
        {"ok": True, "rows": [[1, "é\u2028", None, 1.5]] * 2001, "now": 0.25},
        {"ok": True, "by_id": {1: "a", None: "b"}, "more": list(range(1001))},
        {"ok": True, "columns": {"id": list(range(1000)), "x": list(range(1001))}},
        {"ok": True, "empty": [], "nested": {"deep": {"list": [[]] * 3000}}},
    ],
)
def test_any_reply_in_pieces_is_json_dumps_line(reply: dict[str, Any]) -> None:
    whole = json.dumps(reply, separators=replies.COMPACT).encode() + b"\n"
    assert b"".join(replies.encode_reply(reply)) == whole


def test_a_small_reply_is_written_in_one_piece() -> None:
    assert replies.encode_reply({"ok": True, "jobs": [{"id": 1}] * 10, "now": 1.0}) == [
        json.dumps(
            {"ok": True, "jobs": [{"id": 1}] * 10, "now": 1.0}, separators=replies.COMPACT
        ).encode()
        + b"\n"
    ]


def without_now(reply: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in reply.items() if key not in ("now", "ok")}


@pytest.mark.parametrize("what", sorted(LISTINGS))
def test_a_large_listing_read_over_the_socket_is_the_handlers_reply(
    daemon: Daemon, what: str
) -> None:
    queue(daemon)
    request = LISTINGS[what]
    expected = without_now(handlers.handle(daemon, ROOT, requests.encode_request(request)))
    limits = server.Limits(reply_seconds=60.0)
    with serving(daemon, limits) as made:
        with Client(socket_path(made), timeout=60) as client:
            assert without_now(client.call(request)) == expected
        with connect(made) as raw:  # a client of its own: one line, read as it comes
            raw.sendall(json.dumps(requests.encode_request(request)).encode() + b"\n")
            line = raw.makefile("rb").readline()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert without_now(json.loads(line)) == expected


def test_the_heap_is_given_back_after_a_large_reply_only(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue(daemon)
    trims: list[int] = []
    monkeypatch.setattr(heap, "TRIM_AFTER_BYTES", 100_000)
    monkeypatch.setattr(heap, "release_free_memory", lambda: trims.append(1) or True)
    limits = server.Limits(reply_seconds=60.0)
    with serving(daemon, limits) as made, Client(socket_path(made), timeout=60) as client:
        client.call(requests.Ping())
        client.call(requests.ListJobs(ids=(1,)))
        assert trims == []
        client.call(requests.ListJobs(history=True, brief=True))  # ~500 KB
        client.call(requests.Ping())  # served after the first reply's trim, if any
    assert trims == [1]


def test_freed_heap_is_given_back_where_the_c_library_is_glibc() -> None:
    assert heap.release_free_memory() is (platform.libc_ver()[0] == "glibc")


def test_a_listing_larger_than_the_caches_leaves_them_alone_and_lists_the_same(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue(daemon, 30)
    cached = daemon.store.jobs()  # through the caches: 30 fit
    listed = daemon.store.listing_rows()
    monkeypatch.setattr(rows, "_JOB_CACHE_MAX", 10)
    monkeypatch.setattr(rows, "_SPEC_CACHE_MAX", 10)
    monkeypatch.setattr(rows, "_JOB_CACHE", {})
    monkeypatch.setattr(rows, "_SPEC_CACHE", {})
    assert daemon.store.jobs() == cached
    decode = store.listing_specs(listed)
    assert [decode(row[3]) for row in listed] == [job.spec for job in cached]
    assert rows._JOB_CACHE == {} and rows._SPEC_CACHE == {}
    assert store.listing_specs(listed[:10]) is store.listing_spec  # small: cached as before


@pytest.mark.parametrize(
    "request_",
    [
        requests.ListJobs(history=True, brief=True, columns=True),
        requests.ListJobs(history=True, brief=True, columns=True, states=("CA",)),
        requests.ListJobs(history=True, brief=True, columns=True, states=("PD", "CA")),
        requests.ListJobs(history=True, brief=True, columns=True, users=("nobody",)),
        requests.ListJobs(history=True, brief=True, columns=True, since=50.0),
        requests.ListJobs(brief=True, columns=True),
    ],
)
def test_the_history_as_narrow_rows_lists_what_the_jobs_would(
    daemon: Daemon, request_: requests.ListJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """squeue -t all reads the store's narrow rows (no Job per row), finished jobs and
    array tails in every state included, as the Jobs it used to build would list."""
    spec = {"name": "a", "command": ["true"]}
    queue(daemon, 5)  # submitted at 0
    daemon.clock = lambda: 100.0
    firsts = []
    for array in ("0-99", "0-49"):  # 100 and 50 tasks: rows and a tail each
        submit = requests.encode_request(requests.Submit(spec=spec, array=array))
        firsts.append(handlers.handle(daemon, ROOT, submit)["ids"][0])
    first = firsts[0]
    cancel = requests.Cancel(ids=(2, 3), jobs=(str(first),))
    assert handlers.handle(daemon, ROOT, requests.encode_request(cancel))["ok"]
    assert daemon.store.tails(states=[JobState.CANCELLED])  # a tail cancelled, not only rows
    with monkeypatch.context() as patch:
        patch.setattr(daemon.store, "jobs", lambda **_: pytest.fail("a Job per row built"))
        narrow = handlers.handle(daemon, ROOT, requests.encode_request(request_))
    found = daemon.store.jobs(
        states=parse_states(request_.states),
        users=request_.users or None,
        since=request_.since,
        **({} if request_.history else {"finished": False}),
    )
    assert json.dumps(narrow["columns"]) == json.dumps(listings.jobs_to_columns(found))


ALICE = handlers.Caller(uid=1000, user="alice", pid=2)
STREAMED = {
    "sacct -a -S all": requests.ListJobs(history=True, brief=True),
    "sacct, some states": requests.ListJobs(history=True, brief=True, states=("PD", "CA")),
    "sacct -S": requests.ListJobs(history=True, brief=True, since=50.0, users=("root",)),
    "GET /jobs": requests.ListJobs(brief=True),
    "GET /jobs, pending": requests.ListJobs(brief=True, states=("PD",)),
    "a page": requests.ListJobs(brief=True, after=1200, limit=1500),
    "the last page": requests.ListJobs(brief=True, after=1200, limit=100_000),
    "names": requests.ListJobs(brief=True, names=("j",), nodes=()),
    "full records": requests.ListJobs(),
    "full records, history": requests.ListJobs(history=True),
}


def listed_before(daemon: Daemon, caller: handlers.Caller, request: requests.ListJobs) -> bytes:
    """The reply's line as jobs() made it before it streamed (the Jobs built whole,
    then their records)."""
    states = parse_states(request.states)
    users = request.users or None
    admin = is_admin(daemon, caller)
    if daemon.config.private_data and not admin:
        users = [caller.user]
    if request.history:
        found = daemon.store.jobs(states=states, users=users, since=request.since)
    else:
        found = daemon.store.jobs(states=states, users=users, finished=False)
    if daemon.config.private_data and not admin:
        found = [job for job in found if job.uid == caller.uid]
    found, following = listing._page(listing._narrowed(found, request), request, listing._job_id)
    if request.brief:
        records = [codec.job_to_wire(job, brief=True) for job in found]
    else:
        records = [
            listing._job_to_wire(job, owner_view=admin or job.uid == caller.uid) for job in found
        ]
    reply = {"ok": True, "jobs": records, "now": daemon.clock(), **following}
    return json.dumps(reply, separators=replies.COMPACT).encode() + b"\n"


def streamed(daemon: Daemon, caller: handlers.Caller, request: requests.ListJobs) -> list[bytes]:
    reply = handlers.handle(daemon, caller, requests.encode_request(request), stream=True)
    assert isinstance(reply["jobs"], replies.Streamed)
    return list(replies.reply_pieces(reply))


def varied_queue(daemon: Daemon) -> None:
    """More jobs than a reply's piece (and a store page): pending, held, cancelled, of
    two users, and arrays whose tasks past the first are a tail (one record)."""
    queue(daemon)  # root's, submitted at 0
    daemon.clock = lambda: 100.0
    spec = {"name": "a", "command": ["true"]}
    for array in ("0-99", "0-49"):
        submit = requests.encode_request(requests.Submit(spec=spec, array=array))
        assert handlers.handle(daemon, ROOT, submit)["ok"]
    more = [JobSpec(name="b", command=("true",), env=(("I", str(i)),)) for i in range(700)]
    daemon.store.submit(more, ALICE.uid, ALICE.user, 100.0, held=True)
    cancel = requests.Cancel(ids=tuple(range(2, 400, 3)))
    assert handlers.handle(daemon, ROOT, requests.encode_request(cancel))["ok"]


def change_some(daemon: Daemon) -> None:
    """Jobs listed before, changed since: their records must be made again."""
    release = requests.Release(ids=tuple(range(1000, 1100)))
    assert handlers.handle(daemon, ROOT, requests.encode_request(release))["ok"]
    daemon.store.set_pending_reasons({job_id: "Priority" for job_id in range(1050, 1300)})
    cancel = requests.Cancel(ids=tuple(range(2000, 2600, 7)))
    assert handlers.handle(daemon, ROOT, requests.encode_request(cancel))["ok"]


@pytest.mark.parametrize("what", sorted(STREAMED))
def test_a_streamed_listing_is_the_line_the_whole_records_made_before(
    daemon: Daemon, what: str
) -> None:
    request = STREAMED[what]
    varied_queue(daemon)
    for caller in (ROOT, ALICE):
        before = listed_before(daemon, caller, request)
        for _ in range(2):  # made, then the remembered records
            pieces = streamed(daemon, caller, request)
            assert b"".join(pieces) == before
        assert len(pieces) > 1 or len(before) < 64 * 1024  # written as it is made
    change_some(daemon)
    assert b"".join(streamed(daemon, ROOT, request)) == listed_before(daemon, ROOT, request)


@pytest.mark.parametrize("what", ["sacct -a -S all", "GET /jobs", "a page", "full records"])
def test_a_streamed_listing_under_private_data_shows_the_callers_own(
    daemon: Daemon, what: str
) -> None:
    request = STREAMED[what]
    varied_queue(daemon)
    daemon.config = replace(daemon.config, private_data=True)
    before = listed_before(daemon, ALICE, request)
    assert b'"user":"alice"' in before and b'"user":"root"' not in before
    assert b"".join(streamed(daemon, ALICE, request)) == before
    assert b"".join(streamed(daemon, ROOT, request)) == listed_before(daemon, ROOT, request)


def test_a_listing_streaming_holds_up_no_writer_and_lists_one_snapshot(daemon: Daemon) -> None:
    queue(daemon)
    request = requests.encode_request(requests.ListJobs(history=True, brief=True))
    pieces = replies.reply_pieces(handlers.handle(daemon, ROOT, request, stream=True))
    first = next(pieces)  # the read is under way, a page of it taken
    written: list[list[int]] = []
    writer = threading.Thread(
        target=lambda: written.append(
            daemon.store.submit([JobSpec(name="new", command=("true",))], 0, "root", 1)
        )
    )
    writer.start()
    writer.join(timeout=60)  # a bound on a broken test: a blocked writer never ends
    assert not writer.is_alive() and written
    (new,) = written[0]
    line = json.loads(first + b"".join(pieces))
    assert len(line["jobs"]) == ROWS and new not in {job["id"] for job in line["jobs"]}
    again = handlers.handle(daemon, ROOT, request)
    assert again["jobs"][-1]["id"] == new


def test_a_listing_that_fails_half_written_closes_the_connection(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue(daemon)
    pages = daemon.store.job_pages

    def failing(**filters: Any) -> Iterator[list[Any]]:
        source = pages(**filters)
        try:
            yield next(source)
            raise store.StoreError("disk I/O error")
        finally:
            source.close()

    monkeypatch.setattr(daemon.store, "job_pages", failing)
    limits = server.Limits(reply_seconds=60.0)
    with serving(daemon, limits) as made, Client(socket_path(made), timeout=60) as client:
        with pytest.raises(DaemonUnavailable, match="before its reply's end"):
            client.call(requests.ListJobs(brief=True))
        client.call(requests.Ping())  # served, on a new connection


COLUMNS = {
    "squeue": requests.ListJobs(brief=True, columns=True),
    "squeue -t all": requests.ListJobs(history=True, brief=True, columns=True),
    "squeue -t PD,CA": requests.ListJobs(brief=True, columns=True, states=("PD", "CA")),
    "squeue -u alice": requests.ListJobs(brief=True, columns=True, users=("alice",)),
    "a page": requests.ListJobs(brief=True, columns=True, after=1200, limit=1500),
    "the last page": requests.ListJobs(brief=True, columns=True, after=1200, limit=100_000),
}


def columns_before(daemon: Daemon, caller: handlers.Caller, request: requests.ListJobs) -> bytes:
    """The reply's line as jobs() made squeue's columns before it read them in pages
    (every row at once, then the columns)."""
    private = daemon.config.private_data and not is_admin(daemon, caller)
    users = [caller.user] if private else (request.users or None)
    rows = daemon.store.listing_rows(
        states=parse_states(request.states),
        users=users,
        history=request.history,
        since=request.since,
    )
    if private:
        rows = [row for row in rows if row[1] == caller.uid]
    rows, following = listing._page(rows, request, listing._row_job_id)
    columns = listings.listing_columns(rows, store.listing_specs(rows))
    reply = {"ok": True, "columns": columns, "now": daemon.clock(), **following}
    return json.dumps(reply, separators=replies.COMPACT).encode() + b"\n"


@pytest.mark.parametrize("what", sorted(COLUMNS))
def test_squeues_columns_read_in_pages_are_the_line_the_whole_rows_made_before(
    daemon: Daemon, what: str
) -> None:
    request = COLUMNS[what]
    varied_queue(daemon)
    before = columns_before(daemon, ROOT, request)
    reply = handlers.handle(daemon, ROOT, requests.encode_request(request), stream=True)
    assert isinstance(reply["columns"]["id"], replies.Streamed)  # held as text, not rows
    assert b"".join(replies.reply_pieces(reply)) == before
    change_some(daemon)
    daemon.config = replace(daemon.config, private_data=True)
    for caller in (ROOT, ALICE):
        again = handlers.handle(daemon, caller, requests.encode_request(request), stream=True)
        assert b"".join(replies.reply_pieces(again)) == columns_before(daemon, caller, request)


@pytest.mark.parametrize("what", ["squeue -t all", "sacct -a -S all"])
def test_a_listing_larger_than_the_spec_cache_leaves_it_alone_and_lists_the_same(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    varied_queue(daemon)
    if what in COLUMNS:
        request, before = COLUMNS[what], columns_before(daemon, ROOT, COLUMNS[what])
    else:
        request, before = STREAMED[what], listed_before(daemon, ROOT, STREAMED[what])
    tails = {tail.spec for tail in daemon.store.tails()}  # read as every tail is
    monkeypatch.setattr(listing, "_LISTING_KEYS", 7)
    monkeypatch.setattr(rows, "_LISTING_SPECS", 5)
    monkeypatch.setattr(rows, "_SPEC_CACHE_MAX", 100)
    monkeypatch.setattr(rows, "_SPEC_CACHE", {})
    reply = handlers.handle(daemon, ROOT, requests.encode_request(request), stream=True)
    assert b"".join(replies.reply_pieces(reply)) == before
    assert set(rows._SPEC_CACHE.values()) <= tails  # none of the listing's rows'
    monkeypatch.setattr(rows, "_SPEC_CACHE_MAX", 50_000)  # no larger than the cache:
    daemon.brief_records = listings.BriefRecords()  # (sacct's records made again)
    daemon.kept_columns = listings.KeptColumns()  # (and squeue's listing read again)
    reply = handlers.handle(daemon, ROOT, requests.encode_request(request), stream=True)
    assert b"".join(replies.reply_pieces(reply)) == before
    assert len(rows._SPEC_CACHE) > 700  # its specs decoded through it, as before


def test_the_time_a_listing_takes_to_make_is_not_the_clients_to_take_it(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reply_seconds bounds the time a client keeps gbatchd waiting to take a reply,
    not the time gbatchd takes to make it while it writes (a listing of 1,000,000)."""
    queue(daemon)
    now = [0.0]
    pages = daemon.store.job_pages

    def slow(**filters: Any) -> Iterator[list[Any]]:
        source = pages(**filters)
        try:
            for page in source:
                now[0] += 20.0  # each page takes 20 s of the server's clock to make
                yield page
        finally:
            source.close()

    monkeypatch.setattr(daemon.store, "job_pages", slow)
    limits = server.Limits(reply_seconds=30.0)
    with serving(daemon, limits) as made, Client(socket_path(made), timeout=60) as client:
        made.clock = lambda: now[0]
        assert len(client.call(requests.ListJobs(brief=True))["jobs"]) == ROWS
    assert now[0] >= 60.0  # three pages: twice the reply's bound, all of it making


def test_a_listing_larger_than_the_brief_records_bound_keeps_none_of_them(
    daemon: Daemon,
) -> None:
    varied_queue(daemon)
    daemon.brief_records = listings.BriefRecords(most=100)
    before = listed_before(daemon, ROOT, STREAMED["sacct -a -S all"])
    assert b"".join(streamed(daemon, ROOT, STREAMED["sacct -a -S all"])) == before
    assert daemon.brief_records._made == {}  # 3,000 jobs: none kept
    page = requests.ListJobs(brief=True, limit=50)
    line = b"".join(streamed(daemon, ROOT, page))
    assert len(daemon.brief_records._made) == 50  # the page's
    assert b"".join(streamed(daemon, ROOT, page)) == line == listed_before(daemon, ROOT, page)


# squeue's listing as columns, kept while the store is unchanged (issue 35).
KEPT_LISTINGS = {
    "squeue": requests.ListJobs(brief=True, columns=True),
    "squeue -u alice -t PD": requests.ListJobs(
        users=("alice",), states=("PD",), brief=True, columns=True
    ),
    "squeue -t all": requests.ListJobs(history=True, brief=True, columns=True),
}


def columns_line(daemon: Daemon, caller: handlers.Caller, request: requests.ListJobs) -> bytes:
    reply = handlers.handle(daemon, caller, requests.encode_request(request), stream=True)
    return b"".join(replies.reply_pieces(reply))


def fresh_columns_line(
    daemon: Daemon, caller: handlers.Caller, request: requests.ListJobs
) -> bytes:
    """The listing read from the store, whatever was kept."""
    kept, daemon.kept_columns = daemon.kept_columns, listings.KeptColumns()
    try:
        return columns_line(daemon, caller, request)
    finally:
        daemon.kept_columns = kept


@pytest.mark.parametrize("what", sorted(KEPT_LISTINGS))
def test_squeues_listing_asked_again_unchanged_is_sent_without_a_read(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    request = KEPT_LISTINGS[what]
    varied_queue(daemon)
    first = columns_line(daemon, ROOT, request)
    assert b'"columns":{"id":[' in first

    def unread(**filters: Any) -> Iterator[list[Any]]:
        raise AssertionError("the store was read again")

    monkeypatch.setattr(daemon.store, "listing_pages", unread)
    for _ in range(2):
        assert columns_line(daemon, ROOT, request) == first
    monkeypatch.undo()
    assert fresh_columns_line(daemon, ROOT, request) == first


@pytest.mark.parametrize("what", sorted(KEPT_LISTINGS))
def test_squeues_kept_listing_is_read_again_after_any_write(daemon: Daemon, what: str) -> None:
    request = KEPT_LISTINGS[what]
    varied_queue(daemon)
    steps = [
        lambda: change_some(daemon),
        # An array's tail (its tasks past the first are one record in another table).
        lambda: handlers.handle(
            daemon, ROOT, requests.encode_request(requests.Cancel(jobs=(f"{ROWS + 1}_[5-9]",)))
        ),
        lambda: daemon.store.submit([JobSpec(name="new", command=("true",))], 1000, "alice", 5),
        lambda: daemon.store.set_pending_reasons({ROWS + 1: "Resources"}),
    ]
    before = columns_line(daemon, ROOT, request)
    for step in steps:
        step()
        now = columns_line(daemon, ROOT, request)
        assert now == fresh_columns_line(daemon, ROOT, request)
        assert now == columns_line(daemon, ROOT, request)  # kept again
        before = now
    assert before


def test_squeues_kept_listing_is_each_callers_own_under_private_data(daemon: Daemon) -> None:
    varied_queue(daemon)
    daemon.config = replace(daemon.config, private_data=True)
    request = KEPT_LISTINGS["squeue"]
    for _ in range(2):
        alice = columns_line(daemon, ALICE, request)
        root = columns_line(daemon, ROOT, request)
        assert b'"root"' not in alice and b'"root"' in root
        assert alice == fresh_columns_line(daemon, ALICE, request)
        assert root == fresh_columns_line(daemon, ROOT, request)


def test_a_listing_read_while_a_write_is_open_is_not_kept(daemon: Daemon) -> None:
    queue(daemon, 10)
    daemon.clock = lambda: 100.0
    request = KEPT_LISTINGS["squeue"]
    assert daemon.store.settled() == daemon.store.settled() is not None
    begun = threading.Event()
    release = threading.Event()

    def writer() -> None:
        with daemon.store._write() as db:
            db.execute("UPDATE jobs SET reason = 'Writing' WHERE id = 1")
            begun.set()
            release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert begun.wait(30)
        assert daemon.store.settled() is None
        during = columns_line(daemon, ROOT, request)
    finally:
        release.set()
        thread.join(30)
    assert b"Writing" not in during and daemon.kept_columns._kept == {}
    after = columns_line(daemon, ROOT, request)
    assert b"Writing" in after and after == fresh_columns_line(daemon, ROOT, request)
    assert len(daemon.kept_columns._kept) == 1


def test_a_listing_longer_than_the_kept_bound_is_not_kept(daemon: Daemon) -> None:
    queue(daemon, 50)
    daemon.clock = lambda: 100.0
    daemon.kept_columns = listings.KeptColumns(most_rows=49)
    line = columns_line(daemon, ROOT, KEPT_LISTINGS["squeue"])
    assert daemon.kept_columns._kept == {}
    assert line == fresh_columns_line(daemon, ROOT, KEPT_LISTINGS["squeue"])


def test_telemetrys_writes_leave_the_kept_listing_and_a_durable_write_does_not(
    daemon: Daemon,
) -> None:
    """GPU samples are written many a second while jobs run (not durable): they write no
    job, so squeue's kept listing stays kept through them."""
    queue(daemon, 10)
    settled = daemon.store.settled()
    assert settled is not None
    with daemon.store._write(durable=False):
        assert daemon.store.settled() == settled
    assert daemon.store.settled() == settled
    with daemon.store._write():
        assert daemon.store.settled() is None
    assert daemon.store.settled() == settled + 1
