"""The everyday command lines read without argparse (gbatch/cli/everyday.py) against
argparse's path: the same options read from any words it takes (and the others left to
argparse), the same request sent, the same output and the same errors; its socket is
resolve_paths'; its JSON is json's (gbatch/jsonline.py)."""

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gbatch import client, jsonline, paths, spec, submitenv, wire
from gbatch.cli import everyday, sbatch, squeue
from gbatch.cli._main import main
from gbatch.cli._parser import build_parser
from gbatch.cli.exits import CliError
from gbatch.model import Job, JobSpec, JobState

NOW = 1_800_000_000.0
ME = pwd.getpwuid(os.getuid()).pw_name

# Words as a user might type them: every option of both forms, others, and values of
# every shape argparse treats apart (empty, '-x', '--', '=' inside, a space).
_OPTIONS = sorted(
    {*everyday.SQUEUE_FLAGS, *everyday.SQUEUE_VALUES, *everyday.SBATCH_FLAGS}
    | {*everyday.SBATCH_VALUES, "-j", "-o", "-S", "--json", "-J", "--debug", "--help", "-uX"}
)
_VALUES = st.one_of(
    st.sampled_from(["root", ME, "PD,R", "all", "gpu", "a=b", "-x", "--", "", " -c x", "1"]),
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
    command: str, words: list[str], flags: dict[str, str], with_value: dict[str, str]
) -> None:
    lean = everyday.read_options(words, flags, with_value)
    if lean is None:
        return  # argparse's to read
    args = _argparse(command, words)
    assert args is not None, f"argparse refuses {words}, read as {lean}"
    for dest in {*flags.values()}:
        assert bool(getattr(args, dest)) == lean.get(dest, False), dest
    for dest in {*with_value.values()}:
        given_values = getattr(args, dest)
        if dest == "wrap":  # a single value: the last one given
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
        assert args is not None and squeue._everyday(args) and args.iterate is None


@settings(max_examples=400, deadline=None)
@given(_WORDS)
@example(["-H", "--wrap", "true", "--wrap=-x", "--parsable", "-Q"])
@example(["--wrap", " -c x"])
@example(["--wrap", "true", "script.sh"])
def test_sbatch_options_are_read_as_argparse_reads_them(words: list[str]) -> None:
    _agrees("sbatch", words, everyday.SBATCH_FLAGS, everyday.SBATCH_VALUES)
    lean = everyday.read_options(words, everyday.SBATCH_FLAGS, everyday.SBATCH_VALUES)
    if lean is not None and "wrap" in lean:
        args = _argparse("sbatch", words)
        assert args is not None and args.file is None and args.script_args == []


def test_other_command_lines_are_left_to_argparse() -> None:
    for words in (
        [],
        ["--debug"],
        ["--help"],
        ["squeue", "-j", "1"],
        ["squeue", "-hu", "root"],
        ["squeue", "--help"],
        ["sbatch", "-H"],  # no --wrap: a file or stdin
        ["sbatch", "--wrap", "true", "-J", "x"],
        ["scancel", "1"],
    ):
        assert everyday.everyday(words) is None, words
    assert everyday.everyday(["--debug", "squeue"]) is not None


class _FakeClient:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self.sent: list[dict[str, Any]] = []

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(json.loads(json.dumps(request)))
        return dict(self.reply)


class _Ctx:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.client = _FakeClient(reply)
        self.me = ME


def _columns(jobs: list[Job]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(json.dumps(wire.jobs_to_columns(jobs)))
    return decoded


def _queue(count: int) -> list[Job]:
    return [
        Job(
            id=i,
            uid=0,
            user="root",
            spec=JobSpec(name=f"job{i}", command=("true",), priority=i % 3),
            state=JobState.PENDING if i % 2 else JobState.RUNNING,
            submit_time=NOW - 100,
            start_time=None if i % 2 else NOW - 50,
            held=i % 3 == 0,
            node=None if i % 2 else "gpu1",
        )
        for i in range(1, count + 1)
    ]


_SQUEUE_WORDS = st.lists(
    st.one_of(
        st.sampled_from(["--me", "-a", "--all", "-h", "--noheader"]).map(lambda w: [w]),
        st.tuples(
            st.sampled_from(sorted(everyday.SQUEUE_VALUES)),
            st.sampled_from(["root", ME, "PD,R", "all", "All,R", "gpu,a100", "x,,y", "n1", "0"]),
        ).map(list),
    ),
    max_size=5,
).map(lambda groups: [word for group in groups for word in group])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=_SQUEUE_WORDS, count=st.integers(0, 6))
def test_squeue_sends_and_prints_what_the_full_path_does(
    words: list[str], count: int, capsys: pytest.CaptureFixture[str]
) -> None:
    reply = {"columns": _columns(_queue(count)), "now": NOW}
    values = everyday.read_options(words, everyday.SQUEUE_FLAGS, everyday.SQUEUE_VALUES)
    assert values is not None
    lean_sent: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> dict[str, Any]:
        lean_sent.append(json.loads(jsonline.dumps(request)))
        return dict(reply)

    status = everyday.run_squeue(values, send)
    lean_out = capsys.readouterr().out
    args = _argparse("squeue", words)
    ctx = _Ctx(reply)
    try:
        squeue.run(args, ctx)  # type: ignore[arg-type]
    except CliError:
        assert status is None and lean_sent == []  # declined: the full path says why
        return
    assert status == 0
    assert lean_sent == ctx.client.sent
    assert lean_out == capsys.readouterr().out


def test_squeue_declines_array_tasks_and_unknown_users() -> None:
    task = Job(
        id=7,
        uid=0,
        user="root",
        spec=JobSpec(name="sweep", command=("true",), array_task=2, array_pos=0),
        state=JobState.PENDING,
        submit_time=1.0,
    )
    reply = {"columns": _columns([task]), "now": NOW}
    assert everyday.run_squeue({}, lambda request: dict(reply)) is None
    asked: list[object] = []
    assert everyday.run_squeue({"user": ["no-such-user-xyz"]}, asked.append) is None
    assert asked == []


@pytest.mark.parametrize(
    "words",
    [
        ["--wrap", "true"],
        ["-H", "--wrap=python train.py", "--parsable"],
        ["-Q", "--hold", "--wrap", "echo x"],
    ],
)
def test_sbatch_sends_and_prints_what_the_full_path_does(
    words: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = everyday.read_options(words, everyday.SBATCH_FLAGS, everyday.SBATCH_VALUES)
    assert values is not None
    lean_sent: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> dict[str, Any]:
        lean_sent.append(json.loads(jsonline.dumps(request)))
        return {"ids": [42]}

    monkeypatch.chdir(tmp_path)
    assert everyday.run_sbatch(values, os.environ, send) == 0
    lean = capsys.readouterr()
    args = _argparse("sbatch", words)
    ctx = _Ctx({"ids": [42]})
    assert sbatch.run(args, ctx) == 0  # type: ignore[arg-type]
    assert lean_sent == ctx.client.sent
    assert lean == capsys.readouterr()


def test_the_constants_spelled_here_are_their_owners() -> None:
    assert str(paths.SYSTEM_SOCKET) == everyday.SYSTEM_SOCKET
    assert everyday.MAX_REQUEST_BYTES == wire.MAX_REQUEST_BYTES == client.MAX_REQUEST_BYTES
    assert client.Client(Path("/x")).timeout == everyday.TIMEOUT_S
    assert everyday.MAX_COMMAND_BYTES == spec.MAX_COMMAND_BYTES


@pytest.mark.parametrize(
    "environ",
    [
        {"GBATCH_HOME": "/tmp/h"},
        {"GBATCH_HOME": "/tmp//h/./"},
        {"GBATCH_HOME": "rel/h"},
        {"GBATCH_HOME": "/tmp/h", "GBATCH_SOCKET": "/run/s.sock"},
        {"GBATCH_SOCKET": "s.sock"},
        {"GBATCH_HOME": "~/h"},
        {},
    ],
)
def test_the_socket_is_resolve_paths(environ: dict[str, str]) -> None:
    found = everyday.socket_path(environ)
    if found is None:  # a lookup left to the full path
        assert "~" in environ.get("GBATCH_HOME", "~") or not environ
        return
    assert Path(found) == paths.resolve_paths(environ).socket


@contextlib.contextmanager
def _daemon(home: Path, answer: bytes | None) -> Iterator[None]:
    """A stand-in gbatchd that reads one request and answers `answer` (None: closes)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(home / "gbatchd.sock"))
    server.listen()

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as lines:
            lines.readline()
            if answer is not None:
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
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
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gbatch squeue: error: no gbatch daemon answers at ")
    assert err[1].startswith("gbatch sbatch: error: no gbatch daemon answers at ")


def test_main_maps_a_refusal_after_the_request_as_the_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with _daemon(tmp_path, b'{"ok":false,"kind":"permission","error":"no, thanks"}\n'):
        assert main(["sbatch", "--wrap", "true"]) == 4
    assert capsys.readouterr().err == "gbatch sbatch: error: no, thanks\n"


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
