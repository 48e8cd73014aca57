"""The everyday command lines read without argparse (gbatch/cli/everyday.py) against
argparse's path: the same options read from any words it takes (and the others left to
argparse), the same request sent, the same output and the same errors; its socket is
resolve_paths'; its JSON is json's (gbatch/protocol/jsonline.py)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import pwd
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gbatch.cli import everyday, everyday_sbatch, sbatch, scancel, squeue
from gbatch.cli._main import main
from gbatch.cli._parser import build_parser
from gbatch.cli.context import parse_ids
from gbatch.cli.exits import CliError
from gbatch.core import paths, submitenv
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol import client, decoder, jsonline, listings, requests

NOW = 1_800_000_000.0
ME = pwd.getpwuid(os.getuid()).pw_name

# Words as a user might type them: every option of both forms, others, and values of
# every shape argparse treats apart (empty, '-x', '--', '=' inside, a space).
_OPTIONS = sorted(
    {*everyday.SQUEUE_FLAGS, *everyday.SQUEUE_VALUES, *everyday_sbatch.SBATCH_FLAGS}
    | {*everyday.SCANCEL_FLAGS, *everyday.SCANCEL_VALUES, "-s", "-b", "--full", "--us"}
    | {*everyday_sbatch.SBATCH_VALUES, "-o", "-S", "--json", "-J", "--debug", "--help", "-uX"}
    | {"-j5", "-j5_3", "-j=4", "-u=root", "-uroot", "-j5=3", "-j-1", "-hj5", "-ja b", "-S5"}
)
_VALUES = st.one_of(
    st.sampled_from(["root", ME, "PD,R", "all", "gpu", "a=b", "-x", "--", "", " -c x", "1"]),
    st.sampled_from(["5", "5_3", "12,13_4,14_[1-3]", "4-9", "05", "0", "1_[3-1]"]),
    st.text(max_size=6),
)
_WORD = st.one_of(
    st.sampled_from(_OPTIONS),
    _VALUES,
    st.builds(lambda o, v: f"{o}={v}", st.sampled_from(_OPTIONS), _VALUES),
)
_WORDS = st.lists(_WORD, max_size=6)


def _argparse(command: str, words: list[str]) -> argparse.Namespace | None:
    """argparse's reading of `gbatch COMMAND WORDS`; None where it refuses them."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args, unknown = build_parser(command).parse_known_args([command, *words])
    except SystemExit:
        return None
    return None if unknown else args


def _agrees(
    command: str,
    words: list[str],
    flags: dict[str, str],
    with_value: dict[str, str],
    positional: str | None = None,
) -> None:
    lean = everyday.read_options(words, flags, with_value, positional)
    if lean is None:
        return  # argparse's to read
    args = _argparse(command, words)
    assert args is not None, f"argparse refuses {words}, read as {lean}"
    if positional is not None:
        assert getattr(args, positional) == lean.get(positional, []), positional
    for dest in {*flags.values()}:
        assert bool(getattr(args, dest)) == lean.get(dest, False), dest
    for dest in {*with_value.values()}:
        given_values = getattr(args, dest)
        if dest in ("wrap", "signal"):  # a single value: the last one given
            assert given_values == (lean[dest][-1] if dest in lean else None)
        else:
            assert given_values == lean.get(dest), dest


@settings(max_examples=400, deadline=None)
@given(_WORDS)
@example(["-u", "root", "--me", "-h", "-t=all", "--user=a=b"])
@example(["-u", "-x"])
@example(["-u"])
def test_squeue_options_are_read_as_argparse_reads_them(words: list[str]) -> None:
    _agrees("squeue", words, everyday.SQUEUE_FLAGS, everyday.SQUEUE_VALUES)
    args = _argparse("squeue", words)
    if everyday.read_options(words, everyday.SQUEUE_FLAGS, everyday.SQUEUE_VALUES) is not None:
        assert args is not None and args.iterate is None
        # Slurm's default format and sort: -j aside, the listing squeue_brief draws.
        assert squeue._everyday(argparse.Namespace(**{**vars(args), "jobs": None}))


_SBATCH_WORDS = st.lists(
    st.one_of(
        _WORD,
        st.sampled_from(sorted(everyday_sbatch.SBATCH_VALUES)),
        st.sampled_from(["job.sh", "-G1", "-t5", "--gres=gpu:1", "x.yaml", "-c", "--mem=1G"]),
        st.sampled_from(["--test-only", "-W", "-N", "2", "--exclusive", "-A", "lab"]),
    ),
    max_size=7,
)


@settings(max_examples=600, deadline=None)
@given(_SBATCH_WORDS)
@example(["-H", "--wrap", "true", "--wrap=-x", "--parsable", "-Q"])
@example(["--wrap", " -c x"])
@example(["--wrap", "true", "script.sh"])
@example(["-t", "5", "job.sh", "-J", "x", "--", "-t"])
@example(["job.sh", "--parsable"])
@example(["-G1", "job.sh"])
def test_sbatch_options_are_read_as_argparse_reads_them(words: list[str]) -> None:
    lean = everyday_sbatch.read_line(words)
    if lean is None:
        return  # argparse's to read
    args = _argparse("sbatch", words)
    assert args is not None, f"argparse refuses {words}, read as {lean}"
    assert args.file == lean.get("file")
    assert args.script_args == lean.get("script_args", [])
    for dest in {*everyday_sbatch.SBATCH_FLAGS.values()}:
        assert bool(getattr(args, dest)) == lean.get(dest, False), dest
    for dest in {*everyday_sbatch.SBATCH_VALUES.values()}:  # each a single value: the last
        assert getattr(args, dest) == (lean[dest][-1] if dest in lean else None), dest


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.one_of(_WORD, st.sampled_from(["5", "4_1", "2_[1-3]", "7.1", "x y"])), max_size=7)
)
@example(["5", "-u", "root", "6"])  # a second run of ids: argparse refuses it
@example(["-u", "root", "5", "6", "--me"])
@example(["5", "--", "6"])
def test_scancel_words_are_read_as_argparse_reads_them(words: list[str]) -> None:
    _agrees("scancel", words, everyday.SCANCEL_FLAGS, everyday.SCANCEL_VALUES, "ids")


_SCANCEL_WORDS = st.lists(
    st.one_of(
        st.sampled_from(["--me"]).map(lambda w: [w]),
        st.tuples(
            st.sampled_from(sorted(everyday.SCANCEL_VALUES)),
            st.sampled_from(["root", ME, "PD,R", "gpu,a100", "x,,y", "n1", "gpu[01-02]", "a["]),
        ).map(list),
    ),
    max_size=3,
).map(lambda groups: [word for group in groups for word in group])
_SCANCEL_IDS = st.lists(
    st.sampled_from(["3", "2,5", "4_1", "2_[1-3,7],9-12", "3_01", "1-", "12.1", "4_[2]", "0"]),
    max_size=3,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    options=_SCANCEL_WORDS,
    ids=_SCANCEL_IDS,
    ids_first=st.booleans(),
    failed=st.integers(0, 3),
    counted=st.integers(0, 2),
)
@example(options=[], ids=["5"], ids_first=True, failed=0, counted=0)
@example(options=[], ids=[], ids_first=True, failed=0, counted=0)  # the usage error
@example(options=["-u", "root"], ids=["5_3"], ids_first=False, failed=2, counted=1)
def test_scancel_sends_and_prints_what_the_full_path_does(
    options: list[str],
    ids: list[str],
    ids_first: bool,
    failed: int,
    counted: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same Cancel request, the same failure lines (each, then how many more) and
    status; a line the lean path declines is one the full path refuses or reads a step in."""
    words = [*ids, *options] if ids_first else [*options, *ids]
    results = [{"id": f"{n + 7}", "ok": False, "error": f"no {n}"} for n in range(failed)]
    reply = {"results": results, "failed": failed + counted, "done": 1}
    values = everyday.read_options(words, everyday.SCANCEL_FLAGS, everyday.SCANCEL_VALUES, "ids")
    assert values is not None
    lean_sent: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> dict[str, Any]:
        lean_sent.append(json.loads(jsonline.dumps(request)))
        return dict(reply)

    status: object
    try:
        status = everyday.run_scancel(values, send)
    except CliError as err:
        status = (err.message, err.status)
    lean = capsys.readouterr()
    args = _argparse("scancel", words)
    assert args is not None
    ctx = _Ctx(reply)
    try:
        full_status: object = scancel.run(args, ctx)  # type: ignore[arg-type]
    except CliError as err:
        full_status = (err.message, err.status)
    full = capsys.readouterr()
    if status is None:  # declined before asking: the full path refuses it or has a step
        assert not lean_sent and not lean.out and not lean.err
        assert isinstance(full_status, tuple) or any("." in word for word in ids)
        return
    assert status == full_status
    assert list(map(decoder.decode_request, lean_sent)) == list(
        map(decoder.decode_request, ctx.client.sent)
    )
    assert all(set(sent) - {"op"} <= set(requests.Cancel._fields) for sent in lean_sent)
    assert lean == full


def test_other_command_lines_are_left_to_argparse() -> None:
    for words in (
        [],
        ["--debug"],
        ["--help"],
        ["squeue", "-j", "1", "--start"],
        ["squeue", "-j"],
        ["squeue", "-hu", "root"],
        ["squeue", "--help"],
        ["sbatch", "-H"],  # no --wrap: a file or stdin
        ["sbatch", "--wrap", "true", "-w", "n1"],
        ["sbatch", "--wrap", "true", "job.sh"],  # both: the full path's refusal
        ["sbatch", "-t", "5", "--", "job.sh"],
        ["scancel", "1", "-s"],
        ["scancel", "1", "-u", "root", "2"],
    ):
        assert everyday.everyday(words) is None, words
    assert everyday.everyday(["--debug", "squeue"]) is not None


class _FakeClient:
    """Answers every request with `reply`, or with `answer(request)`'s."""

    def __init__(
        self, reply: dict[str, Any], answer: Callable[[dict[str, Any]], dict[str, Any]] | None
    ) -> None:
        self.answer = answer or (lambda request: reply)
        self.sent: list[dict[str, Any]] = []

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(json.loads(json.dumps(request)))
        return dict(self.answer(self.sent[-1]))

    def call(self, request: requests.Request) -> dict[str, Any]:
        return self.send(requests.encode_request(request))


class _Ctx:
    def __init__(
        self,
        reply: dict[str, Any],
        answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.client = _FakeClient(reply, answer)
        self.me = ME


def _columns(jobs: list[Job]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(json.dumps(listings.jobs_to_columns(jobs)))
    return decoded


def _queue(count: int) -> list[Job]:
    """`count` jobs; from the fourth on, tasks 0, 1, ... of an array (whose id is 4), the
    last of them a record standing for more pending tasks when it is pending."""
    return [
        Job(
            id=i,
            uid=0,
            user="root",
            spec=JobSpec(
                name=f"job{i}",
                command=("true",),
                priority=i % 3,
                array_task=None if i < 4 else i - 4,
                array_pos=0 if i < 4 else i - 4,
            ),
            state=JobState.PENDING if i % 2 else JobState.RUNNING,
            submit_time=NOW - 100,
            start_time=None if i % 2 else NOW - 50,
            held=i % 3 == 0,
            node=None if i % 2 else "gpu1",
            array_more=((i - 3, i + 1200),) if i == count and i >= 4 and i % 2 else (),
        )
        for i in range(1, count + 1)
    ]


_SQUEUE_WORDS = st.lists(
    st.one_of(
        st.sampled_from(["--me", "-a", "--all", "-h", "--noheader", "-r", "--array"]).map(
            lambda w: [w]
        ),
        st.tuples(
            st.sampled_from(sorted(everyday.SQUEUE_VALUES)),
            st.sampled_from(["root", ME, "PD,R", "all", "All,R", "gpu,a100", "x,,y", "n1", "0"]),
        ).map(list),
        st.tuples(
            st.sampled_from(["-j", "--jobs"]),
            st.sampled_from(["3", "2,5", "4_1", "2_[1-3,7],9-12", "3_01", "1-", "2,3"]),
        ).map(list),
        st.sampled_from(["-j3", "-j=2,7", "--jobs=3_0", "-j3-4"]).map(lambda w: [w]),
    ),
    max_size=5,
).map(lambda groups: [word for group in groups for word in group])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=_SQUEUE_WORDS, count=st.integers(0, 6), known=st.booleans())
@example(words=["-j", "3"], count=0, known=False)  # Slurm's "Invalid job id specified"
@example(words=["-j", "3", "-t", "R"], count=0, known=True)  # filtered out: the header
def test_squeue_sends_and_prints_what_the_full_path_does(
    words: list[str], count: int, known: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same requests (with -j and no rows listed, squeue._check_jobs_exist's too),
    the same output, and the same error when no job named by -j exists."""
    listing = {"columns": _columns(_queue(count)), "now": NOW}

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("columns"):
            return listing
        return {"jobs": [{"id": 3}] if known else [], "now": NOW}

    values = everyday.read_options(words, everyday.SQUEUE_FLAGS, everyday.SQUEUE_VALUES)
    assert values is not None
    lean_sent: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> dict[str, Any]:
        lean_sent.append(json.loads(jsonline.dumps(request)))
        return dict(answer(lean_sent[-1]))

    status: object
    try:
        status = everyday.run_squeue(values, send)
    except CliError as err:
        status = (err.message, err.status)
    lean_out = capsys.readouterr().out
    args = _argparse("squeue", words)
    ctx = _Ctx({}, answer)
    try:
        full_status: object = squeue.run(args, ctx)  # type: ignore[arg-type]
    except CliError as err:
        if not lean_sent:
            assert status is None  # declined before asking: the full path says why
            return
        full_status = (err.message, err.status)
    assert status == full_status
    # The same requests as the daemon reads them: a field left out takes its default.
    assert list(map(decoder.decode_request, lean_sent)) == list(
        map(decoder.decode_request, ctx.client.sent)
    )
    # No field the decoder would drop: each one sent is a field of the request's type.
    assert all(set(sent) - {"op"} <= set(requests.ListJobs._fields) for sent in lean_sent)
    assert lean_out == capsys.readouterr().out


# Text near job ids: the grammar's characters, and others it refuses.
_ID_TEXT = st.one_of(
    st.text(alphabet="0123456789_[],-", max_size=14),
    st.text(alphabet="0123456789_[],- x+\u0663", max_size=8),
    st.lists(
        st.sampled_from(["1", "12", "4_5", "3_[1-3]", "9-12", "7_[0,2-4]", "2_0", "5_[6-6]"]),
        min_size=1,
        max_size=4,
    ).map(",".join),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_ID_TEXT, min_size=1, max_size=3))
@example(["12,13_4,14_[1-3]"])
@example(["4_5", "45"])
@example(["0", "1"])
@example(["1_[2,3],4]"])
@example(["123456789012345678", "1234567890123456789"])
def test_job_ids_are_read_as_the_grammar_reads_them(values: list[str]) -> None:
    """Every -j the grammar takes is read, to the same canonical ids (`4_5` is task 5
    of array 4, never job 45); every one it refuses is left to it (its error)."""
    try:
        full = parse_ids(values, "-j/--jobs")
    except CliError:
        full = None
    assert everyday.job_ids(values) == full


def test_squeue_declines_unknown_users_before_asking() -> None:
    asked: list[object] = []
    assert everyday.run_squeue({"user": ["no-such-user-xyz"]}, asked.append) is None
    assert asked == []


_JOB_SH = """#!/bin/bash
#SBATCH --job-name=train --gres=gpu:1
#SBATCH -t 1:00:00
#SBATCH -p gpu
#SBATCH --parsable

python train.py "$@"
"""


@pytest.mark.parametrize(
    "words",
    [
        ["--wrap", "true"],
        ["-H", "--wrap=python train.py", "--parsable"],
        ["-Q", "--hold", "--wrap", "echo x"],
        ["--gpus", "1", "--wrap", "sleep 0.5"],
        ["--gres=gpu:a100:2", "-t", "10", "-J", "x", "--wrap", "true"],
        ["-o", "out/%j.txt", "--wrap", "true"],  # no default output: no warning
        ["-D", "/", "--wrap", "true"],  # the default output where the job starts
        ["job.sh", "in.csv", "-t", "5"],
        ["-J", "mine", "-p", "cpu", "job.sh"],
    ],
)
def test_sbatch_sends_and_prints_what_the_full_path_does(
    words: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = everyday_sbatch.read_line(words)
    assert values is not None
    lean_sent: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> dict[str, Any]:
        lean_sent.append(json.loads(jsonline.dumps(request)))
        return {"ids": [42]}

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text(_JOB_SH)
    (tmp_path / "out").mkdir()
    # Root may write anywhere, so the submitter who may not is played by os.access.
    monkeypatch.setattr(os, "access", lambda path, mode: path not in ("/", str(tmp_path)))
    assert everyday_sbatch.run_sbatch(values, os.environ, send) == 0
    lean = capsys.readouterr()
    args = _argparse("sbatch", words)
    ctx = _Ctx({"ids": [42]})
    assert sbatch.run(args, ctx) == 0  # type: ignore[arg-type]
    assert lean_sent == ctx.client.sent
    assert lean == capsys.readouterr()
    assert ("warning" in lean.err) == ("-o" not in words)


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (["job.sh"], "partition: no partition gpu"),
        (["-p", "cpu", "job.sh"], "partition: no partition cpu"),
        (["job.sh"], "gpus: no node has 1 a100"),
        (["--wrap", "true", "--qos=high"], "qos: you may not use high"),
    ],
)
def test_sbatch_names_the_line_of_a_refused_value_as_the_full_path(
    words: list[str], error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon refuses a value an #SBATCH line gave: both paths name that line."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text(_JOB_SH)
    values = everyday_sbatch.read_line(words)
    assert values is not None

    def send(request: dict[str, Any]) -> dict[str, Any]:
        raise client.RequestFailed("invalid", error)

    with pytest.raises(client.RequestFailed) as lean:
        everyday_sbatch.run_sbatch(values, {}, send)
    ctx = _Ctx({})
    ctx.client.send = send  # type: ignore[method-assign]
    ctx.client.call = lambda request: send(requests.encode_request(request))  # type: ignore[method-assign]
    with pytest.raises(client.RequestFailed) as full:
        sbatch.run(_argparse("sbatch", words), ctx)  # type: ignore[arg-type]
    assert (lean.value.kind, str(lean.value)) == (full.value.kind, str(full.value))
    if words == ["job.sh"] and error.startswith("partition"):
        assert str(lean.value) == f"job.sh:4: #SBATCH {error}"


def test_without_gbatch_home_the_everyday_path_reaches_the_users_own_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's daemon (no GBATCH_HOME: the user's data dir) is asked on the
    everyday path too; it declined there, every squeue paying argparse's start."""
    from gbatch.core import constants

    monkeypatch.delenv("GBATCH_HOME", raising=False)
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(constants, "SYSTEM_SOCKET", str(tmp_path / "run" / "gbatchd.sock"))
    home = tmp_path / "data" / "gbatch"
    home.mkdir(parents=True)
    assert paths.resolve_paths(os.environ).socket == home / "gbatchd.sock"
    with _daemon(home, b'{"ok":true,"ids":[3]}\n') as asked:
        assert everyday.exchange({"op": "jobs"}) == {"ids": [3]}
    assert [json.loads(line) for line in asked] == [{"op": "jobs"}]


@contextlib.contextmanager
def _daemon(home: Path, answer: bytes | None, *then: bytes) -> Iterator[list[bytes]]:
    """A stand-in gbatchd that reads one request and answers `answer` (None: closes),
    then one connection for each of `then`; yields the requests it read."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(home / "gbatchd.sock"))
    server.listen()
    requests: list[bytes] = []

    def serve() -> None:
        for reply in (answer, *then):
            conn, _ = server.accept()
            with conn, conn.makefile("rb") as lines:
                requests.append(lines.readline())
                if reply is not None:
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield requests
    finally:
        thread.join(timeout=10)
        server.close()
        (home / "gbatchd.sock").unlink()


def _both(
    home: Path, answer: bytes | None, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, object]:
    """What the everyday exchange and the client do with the same answer: the reply or
    the error each raises (type and message)."""
    monkeypatch.setenv("GBATCH_HOME", str(home))
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    results: list[object] = []
    for exchange in (
        everyday.exchange,
        lambda request: client.Client(paths.resolve_paths(os.environ).socket).send(request),
    ):
        with _daemon(home, answer):
            try:
                results.append(exchange({"op": "jobs"}))
            except Exception as err:
                results.append((type(err), str(err), getattr(err, "kind", None)))
    return results[0], results[1]


@pytest.mark.parametrize(
    "answer",
    [
        b'{"ok":true,"ids":[3]}\n',
        b'{"ok":false,"kind":"permission","error":"not yours"}\n',
        b'{"ok":false,"kind":"strange","error":"?"}\n',
        None,
        b'{"ok":true,"ids":[3]}',  # no newline: the daemon closed before its end
    ],
)
def test_the_exchange_answers_and_fails_as_the_client(
    answer: bytes | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lean, full = _both(tmp_path, answer, monkeypatch)
    assert lean == full


def test_no_daemon_is_left_to_the_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    assert everyday.exchange({"op": "jobs"}) is None


def test_main_reports_no_daemon_in_the_full_paths_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    assert main(["squeue"]) == 3
    assert main(["sbatch", "--wrap", "true"]) == 3
    assert main(["scancel", "5"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gbatch squeue: error: no gbatch daemon answers at ")
    assert err[1].startswith("gbatch sbatch: error: no gbatch daemon answers at ")
    assert err[2].startswith("gbatch scancel: error: no gbatch daemon answers at ")


def test_main_cancels_on_the_lean_path_and_prints_slurms_failure_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    failed = {"results": [{"id": "9", "ok": False, "error": "Invalid job id specified"}]}
    with _daemon(tmp_path, _line({**failed, "failed": 3, "done": 1})) as asked:
        assert main(["scancel", "4_[1-2]", "9", "-t", "PD"]) == 1
    (request,) = map(json.loads, asked)
    assert (request["op"], request["jobs"], request["states"]) == (
        "cancel",
        ["4_[1-2]", "9"],
        ["PD"],
    )
    assert capsys.readouterr().err == (
        "gbatch scancel: error: Kill job error on job id 9: Invalid job id specified\n"
        "gbatch scancel: error: and 2 more jobs failed\n"
    )


def test_main_maps_a_refusal_after_the_request_as_the_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with _daemon(tmp_path, b'{"ok":false,"kind":"permission","error":"no, thanks"}\n'):
        assert main(["sbatch", "--wrap", "true"]) == 4
    assert capsys.readouterr().err == "gbatch sbatch: error: no, thanks\n"


def _line(reply: dict[str, Any]) -> bytes:
    """A reply as gbatchd writes it."""
    return json.dumps({"ok": True, **reply}).encode() + b"\n"


def test_main_says_as_slurm_that_no_job_named_by_j_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    listing = _line({"columns": _columns([]), "now": NOW})
    with _daemon(tmp_path, listing, _line({"jobs": [], "now": NOW})) as asked:
        assert main(["squeue", "-j99,4_5"]) == 1
    assert capsys.readouterr().err == ("gbatch squeue: error: Invalid job id specified: 99,4_5\n")
    # The listing, then whether any exists at all, in any state (squeue._check_jobs_exist).
    sent = [json.loads(line) for line in asked]
    assert [(r["jobs"], r["history"], r.get("columns", False)) for r in sent] == [
        (["99", "4_5"], False, True),
        (["99", "4_5"], True, False),
    ]


def test_main_lists_the_jobs_named_by_j(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    jobs = _queue(2)[1:]
    listing = _line({"columns": _columns(jobs), "now": NOW})
    with _daemon(tmp_path, listing) as asked:
        assert main(["squeue", "--jobs", "2"]) == 0
    assert [json.loads(line)["jobs"] for line in asked] == [["2"]]
    assert capsys.readouterr().out.splitlines()[1].split() == [
        "2",
        "gpu",
        "job2",
        "root",
        "R",
        "0:50",
        "1",
        "gpu1",
    ]


def test_main_gives_the_grammars_error_for_a_bad_job_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["squeue", "-j", "4_x"]) == 2
    assert capsys.readouterr().err.startswith(
        "gbatch squeue: error: -j/--jobs: '4_x' is not a job id. Give N, N_K"
    )


# JSON values as requests and replies carry them, and those json treats apart.
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e300]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)
_KEYS = st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none(), st.floats())


def _same(a: object, b: object) -> bool:
    return json.dumps(a) == json.dumps(b)  # NaN equal to NaN


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _JSON, max_size=5))
def test_dumps_is_json_dumps(obj: dict[Any, Any]) -> None:
    assert jsonline.dumps(obj) == json.dumps(obj)


def test_dumps_raises_as_json_dumps() -> None:
    for bad in ({"a": object()}, {"a": {1, 2}}, {(1, 2): 3}):
        with pytest.raises(TypeError) as lean:
            jsonline.dumps(bad)
        with pytest.raises(TypeError) as full:
            json.dumps(bad)
        assert str(lean.value) == str(full.value)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        _JSON.map(lambda value: json.dumps(value).encode() + b"\n"),
        _JSON.map(lambda value: json.dumps(value, separators=(",", ":")).encode()),
        st.binary(max_size=12),
        st.sampled_from([b" {}", b"{} x", b"\xef\xbb\xbf{}", b"[1,NaN]\n", b"{\x00", b"\n"]),
    )
)
def test_loads_is_json_loads(line: bytes) -> None:
    try:
        expected = json.loads(line)
    except (ValueError, RecursionError) as err:
        with pytest.raises(type(err)) as raised:
            jsonline.loads(line)
        assert str(raised.value) == str(err)
        return
    assert _same(jsonline.loads(line), expected)


@given(st.text(max_size=6))
@example("")
@example("9A")
def test_an_env_name_is_the_pattern_it_replaces(name: str) -> None:
    pattern = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
    assert submitenv.is_env_name(name) == bool(pattern.fullmatch(name))
