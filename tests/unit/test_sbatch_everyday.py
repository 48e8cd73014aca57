"""sbatch's everyday path (`sbatch --wrap CMD`, _everyday_request) against the full one,
build_submit: the same request bytes for any command, environment and directory it
takes; and it declines whatever build_submit would refuse or that carries another
option, so that refusals stay the full path's one-line messages."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gbatch.cli import everyday, sbatch
from gbatch.cli._parser import build_parser
from gbatch.cli.exits import CliError
from gbatch.jobspec import spec as spec_module
from gbatch.protocol import wire

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
    request = sbatch.build_submit(
        args, lambda: sbatch._job_source(args), submit_dir=submit_dir, environ=environ
    )[0]
    return wire.encode_request(request)


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
    except CliError:
        assert lean is None  # refused by the full path, in its words
        return
    if lean is not None:
        assert json.dumps(lean) == json.dumps(full)
    elif set(flags) <= _EVERYDAY_FLAGS:  # declined: only another option, or a refusal
        raise AssertionError(f"declined a request the full path makes: {full}")


def test_a_command_or_an_environment_over_the_limits_is_left_to_the_full_path() -> None:
    long = "x" * (64 * 1024)
    assert sbatch._everyday_request(_args(["--wrap", long]), "/tmp", {}) is None
    with pytest.raises(CliError, match="longer than 64 KiB"):
        _full(["--wrap", long], "/tmp", {})
    heavy = {f"V{i}": "y" * 1000 for i in range(140)}
    assert sbatch._everyday_request(_args(["--wrap", "true"]), "/tmp", heavy) is None
    with pytest.raises(CliError, match="exported environment"):
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


def test_the_constants_spelled_here_are_their_owners() -> None:
    assert spec_module.MAX_COMMAND_BYTES == everyday.MAX_COMMAND_BYTES


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
