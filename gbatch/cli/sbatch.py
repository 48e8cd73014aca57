"""gbatch sbatch: queue a job from a YAML job file and/or Slurm-style options.

The request is gbatch.jobspec.submit's (the HTTP API's and MCP's too); here are the
command's parser, where the job comes from (a file, stdin), and what it prints.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.everyday_sbatch import warn_unwritable, wrap_request
from gbatch.cli.exits import CliError, Exit
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.sbatchopts import OptionProblem, add_job_options, options_parser

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from gbatch.core.model import Job
    from gbatch.jobspec.batchscript import BatchScript

# Imported where used, not here: the submit's builder (jobspec.submit, with dataclasses
# and inspect), batch scripts (batchscript), job files (reader), the model and the wire.
# `sbatch --help` and `sbatch --wrap CMD` with no other job option need none of them
# (_everyday_request), and they are most of a submit's start-up.

HELP = COMMANDS["sbatch"]
MAX_SCRIPT_CHARS = 1 << 20


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sbatch",
        help=HELP,
        description=HELP + ". Options override the file's keys and a script's #SBATCH "
        "lines (read up to the script's first command). A script needs a #! line (sh, bash, "
        "dash, zsh, ksh, python, perl or Rscript) and is kept with the job: it runs as it "
        "was at submit. Words after a script are its arguments.",
        epilog="example: gbatch sbatch train.yaml -t 2:00:00 --gpus 2\n"
        "         gbatch sbatch job.sh input.csv     # #SBATCH --gpus=1 etc. in job.sh\n"
        "         gbatch sbatch < job.sh\n"
        '         gbatch sbatch --wrap "python train.py" --gres gpu:1',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "file",
        nargs="?",
        help="a job file (YAML; see examples/) or a batch script (#! and #SBATCH lines; "
        "read from stdin when no file and no --wrap is given)",
    )
    p.add_argument(
        "script_args",
        nargs=argparse.REMAINDER,
        metavar="ARG",
        help="arguments of the batch script ($1...)",
    )
    add_job_options(p)
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    p.add_argument(
        "--test-only",
        dest="test_only",
        action="store_true",
        help="queue nothing: check the job and say where and when it would start now",
    )
    p.set_defaults(run=run)


def _job_source(args: argparse.Namespace) -> tuple[dict[str, object] | None, BatchScript | None]:
    """The YAML job file's data, or the batch script (a file, or stdin), or neither
    (--wrap). Options after a YAML file are options, as they always were."""
    from gbatch.jobspec.batchscript import looks_like_script, parse_script
    from gbatch.jobspec.reader import parse_job_text, read_job_text
    from gbatch.jobspec.spec import SpecError
    from gbatch.jobspec.submit import NO_JOB, embedded_script, wrap_with_file

    if args.file is None:
        if args.wrap is not None:
            return None, None
        if sys.stdin is None or sys.stdin.isatty():
            raise CliError(
                NO_JOB,
                Exit.USAGE,
            )
        text = sys.stdin.read(MAX_SCRIPT_CHARS + 1)
        if not text.strip():
            raise CliError(NO_JOB, Exit.USAGE)
        if len(text) > MAX_SCRIPT_CHARS:
            raise SpecError("stdin", "the script is larger than 1 MiB. Keep data out of it")
        return None, parse_script(text, "sbatch")
    text = read_job_text(args.file)
    if looks_like_script(text, args.file):
        if args.wrap is not None:
            raise CliError(wrap_with_file(args.file), Exit.USAGE)
        return None, parse_script(text, args.file)
    if args.script_args:
        try:
            options_parser("gbatch sbatch").parse_args(args.script_args, namespace=args)
        except OptionProblem as err:
            raise CliError(f"{err}. Options go before or after the job file", Exit.USAGE) from None
    if args.wrap is not None:
        raise CliError(wrap_with_file(args.file), Exit.USAGE)
    data = parse_job_text(text, args.file)
    return data, embedded_script(data, args)


def _warn_default_output(spec: Any, submit_dir: str) -> None:
    """The default slurm-%j.out goes where the job is submitted from (or its -D): say
    so at once when the submitter cannot write there. Not refused, as Slurm does not
    refuse it: the job runs, and `gbatch logs` has its output."""
    from gbatch.jobspec.submit import start_dir

    if spec.output is None:
        warn_unwritable(start_dir(spec, submit_dir))


def run(args: argparse.Namespace, ctx: Context) -> int:
    submit_dir = os.getcwd()
    everyday = _everyday_request(args, submit_dir, os.environ)
    if everyday is not None:
        reply = ctx.client.send(everyday)
        ids = reply["ids"]
        warn_unwritable(submit_dir)  # --wrap alone: slurm-%j.out where it was submitted
    else:
        from gbatch.jobspec.submit import build_submit, line_of
        from gbatch.protocol.client import RequestFailed

        try:
            built, spec, script, lines = build_submit(
                args, lambda: _job_source(args), submit_dir=submit_dir, environ=os.environ
            )
        except BadSubmit as err:
            raise CliError(err.message, Exit.USAGE) from err
        from gbatch.protocol import requests

        try:
            reply = ctx.client.call(requests.Submit(**built.fields()))
        except RequestFailed as err:
            # The daemon names the job-file key (`partition: ...`): name the line too.
            line = line_of(err.message.split(":", 1)[0], lines)
            if script is not None and line is not None:
                from gbatch.jobspec.batchscript import DIRECTIVE, ScriptError

                located = ScriptError(script.location, line, f"{DIRECTIVE} {err.message}")
                raise RequestFailed(err.kind, str(located)) from err
            raise
        if args.test_only:
            print(_test_only_line(reply["test"], spec.total_gpus), file=sys.stderr)
            return Exit.OK
        ids = reply["ids"]
        _warn_default_output(spec, submit_dir)  # after the submit: a refusal stays one line
    if not args.quiet:
        # An array answers with its id (its first task's; tasks are N_K), as Slurm.
        print(ids[0] if args.parsable else f"Submitted batch job {ids[0]}", flush=True)
    if args.wait:
        return _wait_for(ctx, ids)
    return Exit.OK


# What `sbatch --wrap CMD` may carry besides and still take _everyday_request: -H,
# --parsable and -Q change the request's `held` or what is printed, nothing of the job.
# (gbatch's own --debug, the command's name and its function are not options of sbatch.)
# script_args: a script's words, [] when none (checked apart).
_EVERYDAY_DESTS = frozenset(
    {"wrap", "hold", "parsable", "quiet", "debug", "command", "run", "script_args"}
)
_FALSE_BY_DEFAULT = frozenset({"test_only"})


def _everyday_request(
    args: argparse.Namespace, submit_dir: str, environ: Mapping[str, str]
) -> dict[str, Any] | None:
    """everyday.wrap_request (the submit request of `sbatch --wrap CMD`, as build_submit's,
    built without the model, spec or wire) when `args` carry --wrap and no other job
    option (-H, --parsable and -Q aside); None for anything else, or for what
    build_submit would refuse. tests/unit/test_sbatch_everyday.py holds the two paths
    equal. (A command line that argparse did not read takes everyday.py's path.)"""
    if args.wrap is None or args.file is not None or args.script_args:
        return None
    for dest, value in vars(args).items():
        # Not given: None, or False for a flag whose default it is (--no-requeue's False
        # is given, and changes the job).
        if dest in _EVERYDAY_DESTS or value is None:
            continue
        if value is not False or dest not in _FALSE_BY_DEFAULT:
            return None
    return wrap_request(args.wrap, bool(args.hold), submit_dir, environ)


def _wait_for(ctx: Context, ids: list[int]) -> int:
    """sbatch -W: poll until every job of `ids` has ended; the exit status is Slurm's:
    the job's exit code (an array's highest), 1 for a job that ended without one of its
    own (killed by a signal, cancelled, timed out, lost with its node)."""
    from gbatch.protocol import codec, requests

    pause = 0.2
    while True:
        reply = ctx.client.call(requests.ListJobs(ids=tuple(ids), history=True, brief=True))
        jobs = [codec.job_from_wire(job) for job in reply["jobs"]]
        if len(jobs) == len(ids) and all(job.state.is_final for job in jobs):
            return max(_wait_status(job) for job in jobs)
        time.sleep(pause)  # a CLI waiting on a job: no event to wait on over the socket
        pause = min(pause * 1.5, 2.0)


def _wait_status(job: Job) -> int:
    from gbatch.core.model import JobState

    if job.state is JobState.COMPLETED:
        return 0
    if job.state is JobState.FAILED and not job.exit_signal and job.exit_code:
        return min(job.exit_code, 255)
    return 1


def _test_only_line(test: dict[str, Any], gpus: int) -> str:
    """Slurm's `sbatch: Job N to start at TIME using N processors on nodes N in
    partition P`, without the job id (none is given) and counting GPUs."""
    from gbatch.core.timefmt import format_timestamp

    if test.get("node"):
        partition = f" in partition {test['partition']}" if test.get("partition") else ""
        return (
            f"sbatch: Job to start at {format_timestamp(test['start'])} using {gpus} GPUs "
            f"on nodes {test['node']}{partition}"
        )
    if test.get("start") is not None:
        return f"sbatch: Job would wait for its begin time {format_timestamp(test['start'])}"
    return f"sbatch: Job would not start now (reason {test.get('reason') or 'unknown'})"
