"""sbatch's everyday path (`sbatch --wrap CMD`, _everyday_request) against the full one,
build_submit: the same request bytes for any command, environment and directory it
takes; and it declines whatever build_submit would refuse or that carries another
option, so that refusals stay the full path's one-line messages."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import stat
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from gbatch.cli import sbatch
from gbatch.cli._parser import build_parser
from gbatch.cli.exits import CliError
from gbatch.jobspec import submit
from gbatch.jobspec.errors import BadSubmit
from gbatch.protocol import requests

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
# Surrogates too: bytes in argv that are not UTF-8 arrive as lone surrogates.
_ANY_TEXT = st.text(max_size=40)
_NAMES = st.one_of(
    st.sampled_from(
        ["PATH", "HOME", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GBATCH_HOME"]
    ),
    st.sampled_from(["SLURM_JOB_ID", "BASH_FUNC_x%%", "LANG", "_", "A1"]),
    st.text(min_size=1, max_size=8),
)
_ENVIRON = st.dictionaries(_NAMES, _TEXT, max_size=8)
# Every option of sbatch's that may take no value (-H, --no-requeue, --exclusive, ...):
# those of the everyday path and those that must send it to the full one.
_NO_VALUE = sorted(
    flag
    for action in build_parser("sbatch")._subparsers._group_actions[0].choices["sbatch"]._actions  # type: ignore[union-attr]
    if action.nargs in (0, "?") and action.dest != "help"
    for flag in action.option_strings
)
_EVERYDAY_FLAGS = {"-H", "--hold", "--parsable", "-Q", "--quiet"}
_FLAGS = st.lists(
    st.one_of(st.sampled_from(sorted(_EVERYDAY_FLAGS)), st.sampled_from(_NO_VALUE)),
    max_size=3,
)


def _args(words: list[str]) -> argparse.Namespace:
    args, unknown = build_parser("sbatch").parse_known_args(["sbatch", *words])
    assert not unknown
    return args


def _full(words: list[str], submit_dir: str, environ: dict[str, str]) -> dict[str, Any]:
    args = _args(words)
    built = submit.build_submit(
        args, lambda: sbatch._job_source(args), submit_dir=submit_dir, environ=environ
    )[0]
    return requests.encode_request(requests.Submit(**built.fields()))


@settings(max_examples=300, deadline=None)
@given(_ANY_TEXT, _FLAGS, _ENVIRON, st.sampled_from(["/tmp", "/", "/work/a b"]))
@example(" ", [], {}, "/tmp")
@example("a\0b", [], {}, "/tmp")
@example("echo \udcff", [], {}, "/tmp")
def test_the_everyday_request_is_build_submits(
    command: str, flags: list[str], environ: dict[str, str], submit_dir: str
) -> None:
    words = [*flags, f"--wrap={command}"]
    lean = sbatch._everyday_request(_args(words), submit_dir, environ)
    try:
        full = _full(words, submit_dir, environ)
    except BadSubmit:
        assert lean is None  # refused by the full path, in its words
        return
    if lean is not None:
        assert json.dumps(lean) == json.dumps(full)
    elif set(flags) <= _EVERYDAY_FLAGS:  # declined: only another option, or a refusal
        raise AssertionError(f"declined a request the full path makes: {full}")


def test_a_command_or_an_environment_over_the_limits_is_left_to_the_full_path() -> None:
    long = "x" * (64 * 1024)
    assert sbatch._everyday_request(_args(["--wrap", long]), "/tmp", {}) is None
    with pytest.raises(BadSubmit, match="longer than 64 KiB"):
        _full(["--wrap", long], "/tmp", {})
    heavy = {f"V{i}": "y" * 1000 for i in range(140)}
    assert sbatch._everyday_request(_args(["--wrap", "true"]), "/tmp", heavy) is None
    with pytest.raises(BadSubmit, match="exported environment"):
        _full(["--wrap", "true"], "/tmp", heavy)


@pytest.mark.parametrize(
    "words",
    [
        ["--wrap", "true", "-J", "x"],
        ["--wrap", "true", "--gpus", "1"],
        ["--wrap", "true", "--export", "NONE"],
        ["--wrap", "true", "-o", "out.txt"],
        ["--wrap", "true", "--test-only"],
        ["--wrap", "true", "-W"],
        ["--wrap", "true", "-A", "lab"],  # an ignored Slurm option still says so
        ["--wrap", "true", "-D", "/tmp"],
        ["--wrap", "true", "--no-requeue"],  # False, and given
        ["--wrap", "true", "--requeue"],
        ["job.yaml"],
    ],
)
def test_any_other_option_takes_the_full_path(words: list[str]) -> None:
    assert sbatch._everyday_request(_args(words), "/tmp", {}) is None


def test_the_options_the_everyday_path_reads_default_to_nothing() -> None:
    """_everyday_request takes an option as not given when it is None or False: true of
    every sbatch option's default."""
    defaults = vars(_args(["--wrap", "true"]))
    false = {k for k, v in defaults.items() if v is False}
    assert false == sbatch._FALSE_BY_DEFAULT | {"parsable", "debug"}
    given_ = {k for k, v in defaults.items() if v is not None and v is not False}
    assert given_ == {"wrap", "command", "run", "script_args"}
    assert defaults["script_args"] == []


class _Client:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(request)
        return {"ids": [5]}


class _Context:
    def __init__(self) -> None:
        self.client = _Client()


def test_the_everyday_path_prints_and_warns_as_the_full_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    ctx = _Context()
    assert sbatch.run(_args(["--wrap", "true"]), ctx) == 0  # type: ignore[arg-type]
    assert capsys.readouterr() == ("Submitted batch job 5\n", "")
    assert ctx.client.sent[0]["spec"]["workdir"] == str(tmp_path)
    # Root may write anywhere, so the submitter who may not is played by os.access.
    monkeypatch.setattr(sbatch.os, "access", lambda path, mode: path != str(tmp_path))
    assert sbatch.run(_args(["--parsable", "--wrap", "true"]), ctx) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out == "5\n"
    assert err.startswith(f"gbatch sbatch: warning: you cannot write in {tmp_path}, ")


# ------------------------------------------------- the options and scripts people type

# Each option the everyday path reads, with values of every kind its reader takes or
# refuses (a value that begins with '-' is argparse's alone).
_OPTION_VALUES = {
    "gpus": ["1", "0", "2", "a100:1", "A100:2", "a100:0", "65", "x", "1g.10gb:1", " 3", ":1"],
    "gres": ["gpu:1", "gpu", "gpu:a100:2", "shard:2", "gpu:0", "gpu:99", "mps:1", "gpu:A100:1"],
    "time": ["5", "1:00:00", "UNLIMITED", "0", "1-00", "x", "10:75", "2-12:30:00"],
    "job-name": ["train", "my run", "a" * 129, "é", "a.b+c", "_x"],
    "partition": ["gpu", "gpu,uni", "a,a", "bad name", "p" * 64],
    "qos": ["normal", "bad q", "high"],
    "output": ["out.txt", "%j.out", "logs/%x.out", "/nonexistent/x", "dir/", "/dev/null"],
    "error": ["err.txt", "%x-%j.err", "/nonexistent/%j/x", "tab\there", "sub"],
    "cpus-per-task": ["1", "4", "0", "+2", "x", "5000", " 8"],
    "mem": ["1G", "512", "0", "16GiB", "2T", "x", "2000000T"],
    "array": ["0-3", "4", "1,3,5%2", "0-0", "3-1", "x", "0-9:2", "0"],
    "dependency": ["afterok:12", "singleton", "x", "afterok:1?afterany:2", "after:5+10"],
    "chdir": ["/tmp", "rel", "/tmp/./x", "/"],
    "nice": ["0", "5", "x", "10001", "+7"],
    "open-mode": ["append", "truncate", "A", "x"],
    "mail-type": ["END,FAIL", "ALL", "x", "end", "BEGIN,x"],
    "mail-user": ["a@b.org", "x y", "é@x", "@", "ada"],
    "comment": ["hello", "c" * 1025, "tab\there", "a b"],
    "nodes": ["1", "2", "1-4", "0", "x", " 1 "],
    "ntasks": ["1", "2", "+1", "0", "x"],
    "ntasks-per-node": ["1", "4", "0"],
    "signal": ["B:USR1@60", "USR1", "TERM@30", "R:USR2@5", "KILL", "x", "9", "USR1@70000"],
    "export": ["ALL", "NONE", "nil", "ALL,A=1", "PATH,HOME", "SLURM_X", "ALL,B", "B=x\ty", ""],
}
_SHORT = {"gpus": "-G", "time": "-t", "job-name": "-J", "partition": "-p", "qos": "-q"}
_SHORT |= {"output": "-o", "error": "-e", "cpus-per-task": "-c", "array": "-a"}
_SHORT |= {"dependency": "-d", "chdir": "-D", "nodes": "-N", "ntasks": "-n"}
_OPTION = st.sampled_from(sorted(_OPTION_VALUES)).flatmap(
    lambda name: st.tuples(st.just(name), st.sampled_from(_OPTION_VALUES[name]))
)


def _spelled(name: str, value: str, how: int) -> list[str]:
    """One option as a user writes it: `--name value`, `--name=value`, `-X value`, `-Xvalue`."""
    short = _SHORT.get(name)
    if how == 0 or short is None:
        return [f"--{name}", value]
    if how == 1:
        return [f"--{name}={value}"]
    return [short, value] if how == 2 else [short + value]


_OPTIONS = st.lists(st.tuples(_OPTION, st.integers(0, 3)), max_size=4).map(
    lambda given: [word for (name, value), how in given for word in _spelled(name, value, how)]
)
# Other words a line or an #SBATCH line may hold: flags of this path and others, options
# it leaves to argparse, and stray words.
_OTHER = st.lists(
    st.sampled_from(
        [
            *("-H", "--parsable", "-Q", "--hold", "-N", "2", "--exclusive", "-A", "lab"),
            *("--wrap=x", "--test-only", "stray", "--gpus-per-node=1", "-W", "--no-requeue"),
            "# a comment",
            "--requeue",
        ]
    ),
    max_size=2,
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The submit dir the tests chdir into (hypothesis allows no function-scoped
    monkeypatch.chdir); the worker's own cwd is back when the module ends."""
    home = tmp_path_factory.mktemp("submit")
    (home / "logs").mkdir()
    (home / "sub").mkdir()
    before = os.getcwd()
    yield home
    os.chdir(before)


def _both(
    words: list[str], environ: dict[str, str], submit_dir: str
) -> tuple[Any, Any, argparse.Namespace | None]:
    """(the everyday path's submit_request, build_submit's result or its BadSubmit, args)."""
    from gbatch.cli import everyday_sbatch

    values = everyday_sbatch.read_line(words)
    lean = None if values is None else everyday_sbatch.submit_request(values, environ, submit_dir)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args, unknown = build_parser("sbatch").parse_known_args(["sbatch", *words])
    except SystemExit:
        assert lean is None, f"argparse refuses {words}"
        return lean, None, None
    assert not unknown or lean is None
    try:
        full: Any = submit.build_submit(
            args, lambda: sbatch._job_source(args), submit_dir=submit_dir, environ=environ
        )
    except (BadSubmit, CliError) as err:
        full = err
    return lean, full, args


def _agree(words: list[str], environ: dict[str, str], submit_dir: str) -> bool:
    """The two paths agree on `words`; True when the everyday path took the line."""
    lean, full, args = _both(words, environ, submit_dir)
    if isinstance(full, Exception) or full is None:
        assert lean is None, f"{words}: the full path refuses ({full}), the everyday one sends"
        return False
    if lean is None:
        return False
    request, script, lines, flags = lean
    built, _, full_script, full_lines = full
    assert json.dumps(request) == json.dumps(
        requests.encode_request(requests.Submit(**built.fields()))
    ), words
    assert script == full_script
    assert lines == full_lines
    assert args is not None
    for dest in ("hold", "parsable", "quiet"):
        assert bool(flags.get(dest)) == bool(getattr(args, dest)), dest
    return True


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_OPTIONS, _OTHER, st.sampled_from(["true", "python train.py", " ", "a\0b"]), _ENVIRON)
@example(["--gpus", "1"], [], "sleep 0.5", {})
@example(["--gres=gpu:1"], ["-H"], "true", {})
@example(["-t", "10", "-J", "x", "-o", "logs/%j.out", "--mem=4G", "-c", "2"], [], "true", {})
def test_a_wrap_line_sends_what_build_submit_makes(
    workdir: Any, options: list[str], other: list[str], command: str, environ: dict[str, str]
) -> None:
    os.chdir(workdir)  # the output files' checks are made from here
    words = [*other, *options, "--wrap", command]
    taken = _agree(words, environ, str(workdir))
    event(f"taken: {taken}")
    # A share of a GPU, or a job across nodes or of several tasks: the full path's.
    across = ("-N", "-n", "--nodes", "--ntasks")
    shards = any("shard" in word or word.startswith(across) for word in options)
    if not other and not shards and taken is False and command.strip() and "\0" not in command:
        full = _both(words, environ, str(workdir))[1]
        assert isinstance(full, Exception), f"{words}: declined a line the full path takes"


_SCRIPT_LINE = st.one_of(
    _OPTIONS.map(lambda words: "#SBATCH " + " ".join(words)),
    _OPTIONS.map(lambda words: "#SBATCH " + " ".join(shlex.quote(w) for w in words)),
    _OTHER.map(lambda words: "#SBATCH " + " ".join(words)),
    st.sampled_from(["# a comment", "", "#SBATCH", "#SBATCHx -J y", "  #SBATCH -J ind"]),
    st.sampled_from(["#SBATCH -J 'un", "#SBATCH --wrap=x", "#SBATCH -J a # b", "echo hi"]),
)
_SHEBANG = st.sampled_from(["#!/bin/bash", "#!/usr/bin/env python3", "#!/bin/fish", "", "#!"])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _SHEBANG,
    st.lists(_SCRIPT_LINE, max_size=5),
    _OPTIONS,
    st.sampled_from(["job.sh", "run.slurm", "job.yaml", "my job.sh"]),
    st.lists(st.sampled_from(["a", "-t", "5", "--gpus=2", "x y", "\udcff"]), max_size=3),
)
@example("#!/bin/bash", ["#SBATCH --gpus=1 -t 10", "#SBATCH -J train"], [], "job.sh", [])
@example("#!/bin/bash", ["#SBATCH -p nope"], ["-p", "gpu"], "job.sh", ["in.csv"])
@example("#!/bin/bash", ["#SBATCH -o logs/%j.out", "#SBATCH -o /nonexistent/x"], [], "j.sh", [])
def test_a_script_line_sends_what_build_submit_makes(
    workdir: Any,
    shebang: str,
    lines: list[str],
    options: list[str],
    name: str,
    script_args: list[str],
) -> None:
    os.chdir(workdir)
    text = "\n".join([shebang, *lines, 'python train.py "$@"', ""])
    (workdir / name).write_text(text)
    taken = _agree([*options, name, *script_args], {"PATH": "/usr/bin"}, str(workdir))
    event(f"taken: {taken}")


def test_the_lines_people_type_take_the_everyday_path(workdir: Any) -> None:
    os.chdir(workdir)
    (workdir / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --gres=gpu:1\n#SBATCH -t 1:00:00\n"
        "#SBATCH -o logs/%x-%j.out\n#SBATCH --mem=16G -c 4\n\npython train.py $1\n"
    )
    for words in (
        ["--gpus", "1", "--wrap", "sleep 0.5"],
        ["--gres=gpu:1", "--wrap", "true"],
        ["-G", "a100:2", "-t", "30", "-J", "x", "--wrap", "true"],
        ["-p", "gpu", "-q", "normal", "-a", "0-9%2", "-d", "afterok:5", "--wrap", "true"],
        ["-D", "sub", "-e", "err.txt", "--wrap", "true"],
        ["job.sh", "input.csv"],
        ["-t", "5", "--parsable", "job.sh"],
    ):
        assert _agree(words, {"HOME": "/root"}, str(workdir)), words


def _fifo(path: Any) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_fifo, id="fifo"),
        pytest.param(lambda p: p.mkdir(), id="directory"),
        pytest.param(lambda p: p.write_bytes(b"#!/bin/bash\necho \xff\n"), id="not-utf8"),
        pytest.param(
            lambda p: p.write_text("#!/bin/bash\n#" + "x" * (1 << 20) + "\n"), id="over-1MiB"
        ),
        pytest.param(
            lambda p: p.write_text("#!/bin/bash\n#" + "x" * (70 << 10) + "\ntrue\n"),
            id="over-64KiB-command",
        ),
        pytest.param(lambda p: p.write_text("#!/bin/bash\necho \0\n"), id="nul"),
        pytest.param(lambda p: p.write_text("command: true\n"), id="yaml"),
        pytest.param(lambda p: p.write_text("echo hi\n"), id="no-shebang"),
        pytest.param(lambda p: p.write_text(""), id="empty"),
        pytest.param(lambda p: p.symlink_to("/nonexistent/x"), id="dangling-link"),
        pytest.param(lambda p: p.symlink_to("/dev/null"), id="link-to-device"),
        pytest.param(lambda p: None, id="missing"),
    ],
)
def test_a_hostile_script_is_left_to_the_full_path(workdir: Any, make: Any) -> None:
    """Declined before anything is sent, so that argparse's path (its open, its refusal,
    its wait on a FIFO) is the one that runs: the everyday path never opens a FIFO to
    wait on it, nor reads anything it would read otherwise."""
    from gbatch.cli import everyday_sbatch

    path = workdir / "hostile.sh"
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    make(path)
    values = everyday_sbatch.read_line(["hostile.sh"])
    assert values is not None
    os.chdir(workdir)
    assert everyday_sbatch.submit_request(values, {}, str(workdir)) is None
    if not stat.S_ISFIFO(os.stat(path).st_mode if path.exists() else 0):
        full = _both(["hostile.sh"], {}, str(workdir))[1]
        assert isinstance(full, Exception), full


def test_a_symlink_to_a_script_is_read_as_the_full_path_reads_it(workdir: Any) -> None:
    os.chdir(workdir)
    (workdir / "real.sh").write_text("#!/bin/sh\n#SBATCH -J linked\ntrue\n")
    link = workdir / "link.sh"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(workdir / "real.sh")
    assert _agree(["link.sh"], {}, str(workdir))


def test_an_unreadable_script_is_left_to_the_full_path(workdir: Any) -> None:
    from gbatch.cli import everyday_sbatch

    os.chdir(workdir)
    path = workdir / "secret.sh"
    path.write_text("#!/bin/sh\ntrue\n")
    path.chmod(0)
    try:
        readable = os.access(path, os.R_OK)  # root reads it all the same
        lean = everyday_sbatch.submit_request({"file": "secret.sh", "script_args": []}, {}, ".")
        assert (lean is None) != readable
    finally:
        path.chmod(0o644)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \t\r\x0b\x0c\x1c\x85\xa0ab-=\"'\\#$%"), max_size=12))
def test_a_directive_is_split_as_shlex_splits_it(rest: str) -> None:
    from gbatch.jobspec.batchscript import ScriptError, _words

    try:
        expected: Any = shlex.split(rest, comments=True)
    except ValueError:
        expected = ScriptError
    try:
        got: Any = _words(rest, "job.sh", 2)
    except ScriptError:
        got = ScriptError
    assert got == expected


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(1, 5)), min_size=1))
def test_an_arrays_request_text_is_task_arrays(runs: list[tuple[int, int, int]]) -> None:
    from gbatch.core.model import TaskArray
    from gbatch.jobspec.optvalues import array_request

    runs = [(a, max(a, b), s) for a, b, s in runs]
    text = ",".join(f"{a}-{b}:{s}" for a, b, s in runs)
    assert array_request(text) == TaskArray(tuple(runs)).text


def test_an_sbatch_flag_line_holds_when_a_later_line_follows(workdir: Any) -> None:
    """`#SBATCH -H` then another #SBATCH line: the job is held (and -Q is quiet). The
    later line's parse used to give -H, -Q and -W their None default, which undid them."""
    os.chdir(workdir)
    (workdir / "held.sh").write_text("#!/bin/sh\n#SBATCH -H\n#SBATCH -Q\n#SBATCH -J x\ntrue\n")
    _, full, args = _both(["held.sh"], {}, str(workdir))
    assert full[0].held is True
    assert args is not None and args.quiet is True
    assert full[3] == {"hold": 2, "quiet": 3, "name": 4}
    assert _agree(["held.sh"], {}, str(workdir))


_CHARS = st.text(
    alphabet=st.one_of(
        st.sampled_from("aZ09._+-_ \t\n%,:\x00\x1f\x7f\x85\x9f\xa0é٣"), st.characters()
    ),
    max_size=8,
)


@settings(max_examples=1000, deadline=None)
@given(_CHARS)
@example("a" * 128)
@example("a" * 129)
@example("p" * 63)
@example("p" * 64)
def test_the_readers_without_re_read_as_their_patterns(text: str) -> None:
    """optvalues reads names, partitions, control characters and whole numbers without
    re (a start-up cost of the everyday path): each as its pattern does."""
    import re

    from gbatch.jobspec import optvalues
    from gbatch.jobspec.errors import SpecError

    def refused(check: Any, *args: Any) -> bool:
        try:
            check(*args)
        except SpecError:
            return True
        return False

    name = re.fullmatch(optvalues.NAME_PATTERN, text, re.ASCII) is not None
    assert refused(optvalues.check_name, text, "-J") is not name
    partition = re.fullmatch(optvalues.PARTITION_PATTERN, text, re.ASCII) is not None
    assert refused(optvalues.check_qos, text, "-q") is not partition
    assert optvalues.has_control(text) == (re.search(optvalues.CONTROL_PATTERN, text) is not None)
    whole = re.fullmatch(r"[+-]?[0-9]{1,18}", text.strip(), re.ASCII) is not None
    assert refused(optvalues.int_option, text, "-c") is not whole
    # safe_default_name as it was written with re alone
    made = re.sub(r"[^A-Za-z0-9._+-]+", "_", text, flags=re.ASCII)
    made = re.sub(r"^[^A-Za-z0-9]+", "", made, flags=re.ASCII)[:128]
    assert optvalues.safe_default_name(text) == (made or "job")


_SIZES = st.text(
    alphabet=st.sampled_from("0123456789 \t\x0b\xa0kKmMgGtTiIbB-:\u212a٣x"), max_size=16
)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(_SIZES, _CHARS))
@example("1" * 13 + "G")
@example("1" * 14)
@example("16 GiB")
@example("4\u212a")  # the Kelvin sign: IGNORECASE with ASCII does not fold it to k
def test_the_time_and_memory_readers_read_as_their_patterns(text: str) -> None:
    """-t's and --mem's grammars read without re, each as its pattern does."""
    import re

    from gbatch.core import timefmt
    from gbatch.jobspec import optvalues

    time_match = re.fullmatch(timefmt._TIME_PATTERN, text)
    assert timefmt._time_groups(text) == (None if time_match is None else time_match.groups())
    mem_match = re.fullmatch(optvalues._MEM_PATTERN, text, re.ASCII | re.IGNORECASE)
    expected = None if mem_match is None else (mem_match.group(1), mem_match.group(2) or "")
    assert optvalues._mem_groups(text) == expected


@pytest.mark.parametrize("option", ["-c", "--nice", "--retries", "--priority"])
def test_a_whole_number_with_a_separator_character_is_read_not_a_crash(option: str) -> None:
    """`-c $'2\\x1f'`: str.strip() takes the separator away (Python counts \\x1c-\\x1f as
    space) but int() does not, so the reader raised ValueError (a traceback) instead of
    taking 2."""
    built = _full([option, "2\x1f", "--wrap", "true"], "/tmp", {})
    assert built["spec"][{"-c": "cpus"}.get(option, option.lstrip("-"))] == 2


@pytest.mark.parametrize("value", ["²", "a100:²", "2\x1f"])
def test_a_gpu_count_of_other_digits_is_refused_or_read_not_a_crash(value: str) -> None:
    """`--gpus ²`: str.isdigit() takes a superscript two, which int() refuses
    (ValueError, a traceback); a count is what int() reads, or a refusal naming --gpus."""
    try:
        built = _full(["--gpus", value, "--wrap", "true"], "/tmp", {})
    except BadSubmit as err:
        assert err.message.startswith("--gpus: ")
    else:
        assert built["spec"]["gpus"] == 2
