"""Slurm options gbatch takes without effect (sbatchopts.IGNORED_OPTIONS): those whose value
is optional take it only after '=', as Slurm's getopt does, so the word after the bare
option stays the job file, the script's argument or srun's command."""

from __future__ import annotations

import pytest

from gbatch.cli._parser import build_parser
from gbatch.jobspec.sbatchopts import IGNORED_OPTIONS, OptionProblem, options_parser
from gbatch.jobspec.submit import request_for_text

# Each option whose value is optional, with a value Slurm takes after '='.
VALUED = {"--no-kill": "off", "--get-user-env": "10L", "--propagate": "STACK,CORE"}
OPTIONS = sorted(VALUED)


def test_the_options_with_an_optional_value_are_these() -> None:
    optional = {names[0] for names, _, _, nargs, _ in IGNORED_OPTIONS if nargs == "?"}
    assert optional == set(VALUED)


@pytest.mark.parametrize("option", OPTIONS)
def test_sbatch_keeps_the_word_after_the_bare_option_its_job_file(option: str) -> None:
    """`gbatch sbatch --no-kill job.sh` took job.sh as --no-kill's value, and read the
    script from stdin."""
    parser = build_parser("sbatch")
    args = parser.parse_args(["sbatch", option, "job.sh", "in.csv"])
    assert (args.file, args.script_args) == ("job.sh", ["in.csv"])
    valued = parser.parse_args(["sbatch", f"{option}={VALUED[option]}", "job.sh", "in.csv"])
    assert (valued.file, valued.script_args) == ("job.sh", ["in.csv"])
    # After the job file, every word is the script's, this option's too.
    after = parser.parse_args(["sbatch", "job.sh", f"{option}={VALUED[option]}"])
    assert (after.file, after.script_args) == ("job.sh", [f"{option}={VALUED[option]}"])


@pytest.mark.parametrize("option", OPTIONS)
def test_srun_keeps_the_word_after_the_bare_option_its_command(option: str) -> None:
    args = build_parser("srun").parse_args(["srun", option, "hostname", "-s"])
    assert args.cmd == ["hostname", "-s"]


@pytest.mark.parametrize("option", OPTIONS)
def test_a_submits_text_takes_the_option_bare_or_with_its_value(option: str) -> None:
    """The HTTP API's and the words after a job file: the bare option before --wrap, and
    its value after '=' (no word is taken as its value)."""
    for given in (option, f"{option}={VALUED[option]}"):
        spec = request_for_text(None, "job.sh", [given, "--wrap", "hostname"]).spec
        assert spec["command"][-1] == "hostname"
    with pytest.raises(OptionProblem, match="unrecognized arguments: off"):
        options_parser("#SBATCH").parse_args([option, "off"])
