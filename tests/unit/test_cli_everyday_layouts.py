"""The everyday path's squeue layouts and orders (-o, -O, -l, -S) and scancel's -s, -b and
--full (issue 35) against argparse's path: the same options read from any words it takes
(the others left to argparse), the same request sent, the same output and errors.
test_cli_everyday.py holds the everyday filters the same way; its helpers are used here."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_cli_everyday import ME, NOW, _argparse, _columns, _Ctx

from gbatch.cli import everyday, scancel, squeue
from gbatch.cli.exits import CliError
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol import codec, decoder, jsonline, requests
from gbatch.render import squeue_layouts

_SQUEUE_FLAGS = everyday.SQUEUE_FLAGS | everyday.SQUEUE_LAYOUT_FLAGS
_SQUEUE_VALUES = everyday.SQUEUE_VALUES | everyday.SQUEUE_LAYOUT_VALUES
_SINGLE = ("format", "fields", "sort")  # store options: the last value given

# Words as a user might type them: squeue's options in every form, others, and values of
# every shape argparse treats apart (empty, '-x', '--', '=' inside).
_OPTIONS = sorted(
    {*_SQUEUE_FLAGS, *_SQUEUE_VALUES, "--start", "-i", "--json", "-S-t", "-S=-p", "--sort=--"}
    | {"--sort=-i", "-lh", "-o%i", "-O=JobID", "--us", "-x", "-j5"}
)
_VALUES = st.one_of(
    st.sampled_from(["%i %T", "-t,i", "%.5l", "JobID,State:.9", "-", "P,-p", "%%", "--", ""]),
    st.sampled_from(["root", ME, "PD,R", "5", "a=b", "-x", "cluster"]),
    st.text(max_size=6),
)
_WORD = st.one_of(
    st.sampled_from(_OPTIONS),
    _VALUES,
    st.builds(lambda o, v: f"{o}={v}", st.sampled_from(_OPTIONS), _VALUES),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_WORD, max_size=6))
@example(["-S", "-t,i", "-o", "%i"])
@example(["-S-t", "--sort=-p", "-S=-i"])
@example(["-S", "--", "-l"])
@example(["--sort=--"])
@example(["-u", "--sort=-p"])
def test_squeue_layout_options_are_read_as_argparse_reads_them(words: list[str]) -> None:
    lean = everyday.read_squeue(words)
    if lean is None:
        return  # argparse's to read
    # As _main gives them to argparse: `-S VALUE` joined first (Slurm's getopt reading).
    args = _argparse("squeue", squeue.join_option_values(words))
    assert args is not None, f"argparse refuses {words}, read as {lean}"
    assert args.iterate is None and not args.start and not args.json
    for dest in {*_SQUEUE_FLAGS.values()}:
        assert bool(getattr(args, dest)) == lean.get(dest, False), dest
    for dest in {*_SQUEUE_VALUES.values()}:
        given_values = getattr(args, dest)
        if dest in _SINGLE:
            assert given_values == (lean[dest][-1] if dest in lean else None), dest
        else:
            assert given_values == lean.get(dest), dest


def _queue(count: int) -> list[Job]:
    """`count` jobs of two users, limits set and not, two partitions; from the fourth on,
    tasks 0, 1, ... of an array (whose id is 4), the last a record standing for more
    pending tasks when it is pending."""
    return [
        Job(
            id=i,
            uid=0 if i % 3 else 1001,
            user="root" if i % 3 else "bob",
            spec=JobSpec(
                name=f"job{i}",
                command=("true",),
                priority=i % 3,
                array_task=None if i < 4 else i - 4,
                array_pos=0 if i < 4 else i - 4,
                time_limit=None if i % 4 == 0 else 60 * i,
                partition="gpu" if i % 5 else "cpu",
            ),
            state=JobState.PENDING if i % 2 else JobState.RUNNING,
            reason="Priority" if i % 5 == 0 else "",
            submit_time=NOW - 100 - i % 4,
            start_time=None if i % 2 else NOW - 50,
            held=i % 3 == 0,
            node=None if i % 2 else "gpu1",
            array_more=((i - 3, i + 1200),) if i == count and i >= 4 and i % 2 else (),
        )
        for i in range(1, count + 1)
    ]


# Formats of every letter (those squeue_layouts draws, and others), widths, '.', '%%'.
_FORMATS = st.lists(
    st.one_of(
        st.builds(
            lambda dot, width, letter: f"%{dot}{width}{letter}",
            st.sampled_from(["", "."]),
            st.sampled_from(["", "0", "3", "12", "007", "1001"]),
            st.sampled_from([*"iAFKPjuUtTMlLDRNrVYpQqbCmSeokZEfv%x", ""]),
        ),
        st.sampled_from([" ", "|", "%%", "a b", "\t"]),
    ),
    max_size=6,
).map("".join)
_FIELD_LISTS = st.lists(
    st.builds(
        lambda name, size: name + size,
        st.sampled_from(["JobID", "state", "TIMELIMIT", "Reason", "NumCPUs", "Nope", " name"]),
        st.sampled_from(["", ":", ":30", ":.8", ":x", ":\u0663", ":2000"]),
    ),
    min_size=1,
    max_size=4,
).map(",".join)
_SORTS = st.lists(
    st.builds(
        lambda sign, pct, key: sign + pct + key,
        st.sampled_from(["", "+", "-"]),
        st.sampled_from(["", "%"]),
        st.sampled_from([*"ijuUtTPpQSVelLMDNBCmx", "cluster", "CLUSTER", ""]),
    ),
    max_size=4,
).map(",".join)
_SQUEUE_WORDS = st.lists(
    st.one_of(
        st.sampled_from(["--me", "-a", "-h", "-r", "-l", "--long"]).map(lambda w: [w]),
        st.tuples(
            st.sampled_from(sorted(everyday.SQUEUE_VALUES)),
            st.sampled_from(["root", ME, "PD,R", "all", "gpu,cpu", "x,,y", "n1"]),
        ).map(list),
        st.tuples(st.sampled_from(["-j", "--jobs"]), st.sampled_from(["3", "2,5", "4_1", "9"])).map(
            list
        ),
        st.tuples(st.sampled_from(["-o", "--format"]), _FORMATS).map(list),
        st.tuples(st.sampled_from(["-O", "--Format"]), _FIELD_LISTS).map(list),
        st.tuples(st.sampled_from(["-S", "--sort"]), _SORTS).map(list),
    ),
    max_size=5,
).map(lambda groups: [word for group in groups for word in group])


def _drawn_by_layouts(values: dict[str, Any]) -> bool:
    """Whether squeue_layouts draws every letter and key these options ask for."""
    from gbatch.render import squeue as full

    if values.get("array") and {"format", "fields", "sort", "long"} & set(values):
        return False
    fmt = values["format"][-1] if "format" in values else None
    try:
        if fmt is None and "fields" in values:
            fmt = full.squeue_format_from_fields(values["fields"][-1])
        letters = full.squeue_letters(fmt)
        keys = full.parse_squeue_sort(values["sort"][-1]) if "sort" in values else []
    except Exception:  # FormatError, or a width int() refuses: the full path's to say
        return False
    return (
        letters <= squeue_layouts.LETTERS and {key for key, _ in keys} <= squeue_layouts.SORT_KEYS
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=_SQUEUE_WORDS, count=st.integers(0, 7), known=st.booleans())
@example(words=["-l"], count=5, known=True)
@example(words=["-o", "%.7i|%T|%l|%L|%V|%U", "-S", "-l,u"], count=7, known=True)
@example(words=["-O", "JobID:.9,State,TimeLeft", "--sort=-p"], count=6, known=True)
@example(words=["-l", "-j", "3"], count=0, known=False)  # Slurm's "Invalid job id specified"
@example(words=["-r", "-l"], count=6, known=True)  # -r in another layout: render.squeue's
def test_squeue_layouts_send_and_print_what_the_full_path_does(
    words: list[str], count: int, known: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same requests, the same output (the date line of -l too), the same errors;
    a line declined before asking is one whose letters or keys render.squeue draws."""
    jobs = _queue(count)
    listing = {"columns": _columns(jobs), "now": NOW}
    records = json.loads(json.dumps([codec.job_to_wire(job) for job in jobs]))

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("columns"):
            return listing
        if request.get("history") and request.get("brief"):  # _check_jobs_exist's
            return {"jobs": [{"id": 3}] if known else [], "now": NOW}
        return {"jobs": records, "now": NOW, "starts": []}  # render.squeue's records

    values = everyday.read_squeue(words)
    if values is None:  # an empty value (`-o ''`, `-S ''`): argparse's to read
        return
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
    args = _argparse("squeue", squeue.join_option_values(words))
    ctx = _Ctx({}, answer)
    try:
        full_status: object = squeue.run(args, ctx)  # type: ignore[arg-type]
    except CliError as err:
        capsys.readouterr()
        if not lean_sent:
            assert status is None  # declined before asking: the full path says why
            return
        full_status = (err.message, err.status)
    if status is None and not lean_sent:  # declined before asking: render.squeue's layout
        capsys.readouterr()
        assert not _drawn_by_layouts(values)
        return
    assert status == full_status
    assert list(map(decoder.decode_request, lean_sent)) == list(
        map(decoder.decode_request, ctx.client.sent)
    )
    assert all(set(sent) - {"op"} <= set(requests.ListJobs._fields) for sent in lean_sent)
    assert lean_out == capsys.readouterr().out


# scancel -s, -b, --full.
_SCANCEL_FLAGS = everyday.SCANCEL_FLAGS
_SCANCEL_VALUES = everyday.SCANCEL_VALUES


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["-s", "--signal", "-b", "--batch", "-f", "--full", "-bf", "-sUSR1"]),
            st.sampled_from(["--signal=TERM", "-s=KILL", "5", "4_1", "7.1", "USR1", "-9", "--"]),
            st.sampled_from(["-u", "root", "--me", "-n", "x"]),
        ),
        max_size=6,
    )
)
def test_scancel_signal_options_are_read_as_argparse_reads_them(words: list[str]) -> None:
    lean = everyday.read_options(words, _SCANCEL_FLAGS, _SCANCEL_VALUES, "ids")
    if lean is None:
        return
    args = _argparse("scancel", words)
    assert args is not None, f"argparse refuses {words}, read as {lean}"
    assert args.ids == lean.get("ids", [])
    for dest in {*_SCANCEL_FLAGS.values()}:
        assert bool(getattr(args, dest)) == lean.get(dest, False), dest
    assert args.signal == (lean["signal"][-1] if "signal" in lean else None)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=8),
        st.builds(
            lambda pre, name, pad: pad + pre + name + pad,
            st.sampled_from(["", "SIG", "sig", "Sig"]),
            st.sampled_from([*everyday.SIGNAL_NAMES, "RTMIN", "WINCH", "usr1", "x"]),
            st.sampled_from(["", " ", "\t"]),
        ),
    )
)
def test_scancels_common_signal_names_are_ones_parse_signal_name_reads(text: str) -> None:
    from gbatch.core.signals import SignalNameError, parse_signal_name

    if everyday._common_signal(text):
        parse_signal_name(text)  # raises for a name it does not read
    else:
        with contextlib.suppress(SignalNameError):
            parse_signal_name(text)


_SCANCEL_GROUPS = [
    *(["-s", name] for name in ("USR1", "sigterm", " KILL ", "10", "SIGRTMIN", "NOPE")),
    *(["--signal", name] for name in ("usr2", "Hup")),
    *([flag] for flag in ("-b", "--batch", "-f", "--full", "--me")),
    ["-u", "root"],
    ["-n", "x"],
]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    options=st.lists(
        st.sampled_from(_SCANCEL_GROUPS),
        max_size=3,
    ).map(lambda groups: [word for group in groups for word in group]),
    ids=st.lists(st.sampled_from(["3", "2,5", "4_1", "12.1", "0"]), max_size=2),
    failed=st.integers(0, 2),
)
@example(options=["-s", "USR1"], ids=["5"], failed=0)
@example(options=["-b", "-s", "TERM"], ids=["5"], failed=1)
@example(options=["-b", "--full"], ids=["5"], failed=0)  # the usage error: the full path's
def test_scancel_signals_send_and_print_what_the_full_path_does(
    options: list[str], ids: list[str], failed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    words = [*ids, *options]
    results = [{"id": f"{n + 7}", "ok": False, "error": f"no {n}"} for n in range(failed)]
    reply = {"results": results, "failed": failed, "done": 1}
    values = everyday.read_options(words, _SCANCEL_FLAGS, _SCANCEL_VALUES, "ids")
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
    ctx = _Ctx(reply)
    try:
        full_status: object = scancel.run(args, ctx)  # type: ignore[arg-type]
    except CliError as err:
        full_status = (err.message, err.status)
    full = capsys.readouterr()
    if status is None:  # declined before asking: a step, another signal, a usage error
        assert not lean_sent and not lean.out and not lean.err
        signal = values["signal"][-1] if "signal" in values else "TERM"
        assert (
            isinstance(full_status, tuple)
            or any("." in word for word in ids)
            or not everyday._common_signal(signal)
        )
        return
    assert status == full_status
    assert list(map(decoder.decode_request, lean_sent)) == list(
        map(decoder.decode_request, ctx.client.sent)
    )
    assert (lean.out, lean.err) == (full.out, full.err)
