"""gbatch sbatch: queue a job from a YAML job file and/or Slurm-style options."""

from __future__ import annotations

import argparse
import functools
import os
import re
import socket
import sys
import time
from pathlib import Path

from gbatch.cli.context import Context
from gbatch.cli.everyday import user_name, warn_unwritable, wrap_request
from gbatch.cli.exits import CliError, Exit
from gbatch.cli.suggest import did_you_mean, option_strings
from gbatch.protocol.client import RequestFailed

TYPE_CHECKING = False  # typing's, without importing typing: 2 ms of every start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, NoReturn

    from gbatch.core.model import Job
    from gbatch.jobspec.batchscript import BatchScript
    from gbatch.jobspec.sweep import Sweep
    from gbatch.protocol.wire import Submit

# Imported where used, not here: batch scripts (batchscript), job files and validation
# (spec), the model and the wire. `sbatch --wrap CMD` with no other job option needs
# none of them (_everyday_request), and they are most of a submit's start-up.

HELP = "queue a job (a job file, a batch script, options, or --wrap)"
MAX_SCRIPT_CHARS = 1 << 20
NO_JOB = 'no job file given. Pass a job file or a batch script, pipe one in, or --wrap "CMD"'

# Slurm options that mean nothing on gbatch, taken so that cluster templates run
# unchanged: (flags, dest, metavar, nargs, what happens here instead). `--help` and the
# README ("Coming from Slurm") list them.
IGNORED_OPTIONS: tuple[tuple[tuple[str, ...], str, str, str | None, str], ...] = (
    (("-A", "--account"), "account", "NAME", None, "fair-share is per user, not per account"),
    (("-q", "--qos"), "qos", "NAME", None, "per-user limits (gbatch sshare) play QOS's part"),
    (
        ("--exclusive",),
        "exclusive",
        "user|mcs",
        "?",
        "a job gets the GPUs it asks for; other jobs may use the node's other GPUs",
    ),
    (("--get-user-env",), "get_user_env", "TIMEOUT", "?", "the job's variables are --export's"),
    (("--propagate",), "propagate", "RLIMIT", "?", "a job gets its node's default limits"),
    (("--hint",), "hint", "TYPE", None, "gbatch places no tasks on cores"),
    (("--no-kill",), "no_kill", "off", "?", "a job runs on one node, so none is lost alone"),
)


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
    _add_options(p)
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    p.add_argument(
        "--test-only",
        dest="test_only",
        action="store_true",
        help="queue nothing: check the job and say where and when it would start now",
    )
    p.set_defaults(run=run)


def _add_options(p: argparse.ArgumentParser) -> None:
    """The job's options: the command line's, and a batch script's #SBATCH lines'."""
    p.add_argument("-J", "--job-name", dest="name", metavar="NAME")
    p.add_argument("-G", "--gpus", metavar="N", help="GPUs for the job, on one node")
    p.add_argument("--gres", metavar="gpu:N", help="Slurm spelling of --gpus")
    p.add_argument(
        "-t",
        "--time",
        dest="time_limit",
        metavar="TIME",
        help="time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS or UNLIMITED",
    )
    p.add_argument("--wrap", metavar="CMD", help="run CMD with /bin/sh -c (no file needed)")
    p.add_argument(
        "--image",
        "--container-image",
        dest="image",
        metavar="IMAGE",
        help="run in this container image (--container-image: pyxis's spelling; without "
        "either, the partition's default image if its admin set one)",
    )
    p.add_argument(
        "-p",
        "--partition",
        metavar="NAME",
        help="the partition (node pool) to run in; one name (default: the default partition, "
        "marked * by `gbatch sinfo`)",
    )
    p.add_argument("--retries", metavar="N", help="retry a failing job N times")
    p.add_argument(
        "--requeue",
        dest="requeue",
        action="store_const",
        const=True,
        help="requeue the job if its node is lost (the default)",
    )
    p.add_argument(
        "--no-requeue",
        dest="requeue",
        action="store_const",
        const=False,
        help="end the job NODE_FAIL if its node is lost, instead of starting it over",
    )
    p.add_argument("--priority", metavar="N")
    p.add_argument("--nice", metavar="N", help="lower the job's priority by N")
    p.add_argument(
        "-D",
        "--chdir",
        dest="workdir",
        metavar="DIR",
        help="working directory (default: the current one, for bare processes)",
    )
    p.add_argument(
        "-a",
        "--array",
        metavar="A-B[:S],...",
        help="queue one job per index (A-B, A-B:STEP, lists like 1,4,10-12; a lone N is "
        "N tasks 0 to N-1); each sees SLURM_ARRAY_TASK_ID",
    )
    p.add_argument(
        "--param",
        dest="param",
        action="append",
        metavar="NAME=V1,V2,...",
        help="sweep a parameter (repeatable): one array task per combination of the values "
        "of all --param options, the last one varying fastest. Task k sees {NAME} in its "
        "command replaced by its value ({{ and }} for literal braces) and GBATCH_PARAM_NAME "
        "(upper-cased) set; replaces the job file's sweep:. Not with --array",
    )
    p.add_argument(
        "--name-template",
        dest="name_template",
        metavar="TEMPLATE",
        help='name each task of a sweep, e.g. "{name}-lr{lr}" ({name}: the job\'s name); '
        "characters a job name cannot hold become _",
    )
    p.add_argument(
        "--export",
        metavar="ALL|NONE|VAR[=val],...",
        help="the variables of your shell the job gets: ALL (the default for a bare job), "
        "NONE (the default with --image), or the ones named, with values given as "
        "VAR=val (ALL,VAR=val: all, and those set). The job file's env wins over them",
    )
    p.add_argument(
        "-b",
        "--begin",
        metavar="TIME",
        help="start no sooner than TIME: YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], "
        "now+N[seconds|minutes|hours|days|weeks], midnight, noon, teatime, today, tomorrow",
    )
    p.add_argument(
        "--signal",
        metavar="[B:]SIG[@SECONDS]",
        help="send SIG (a name or number) SECONDS (default 60) before the time limit, once "
        "per run, to the whole job (B: too)",
    )
    p.add_argument(
        "--mail-type",
        dest="mail_type",
        metavar="TYPE",
        help="BEGIN, END, FAIL, REQUEUE, TIME_LIMIT[_50|_80|_90], ALL, ARRAY_TASKS (an "
        "array's BEGIN, END, FAIL per task, not once for the whole array); mailed when the "
        "admin set an SMTP server",
    )
    p.add_argument(
        "--mail-user",
        dest="mail_user",
        metavar="ADDRESS",
        help="where mail goes (default: the admin's mail_domain)",
    )
    p.add_argument(
        "--notify",
        metavar="URL[,EVENT...]",
        help="POST the job's events (default END,FAIL) to URL as JSON; a job file's notify: "
        "has more. Only under the URL prefixes the admin allows (not a Slurm option)",
    )
    p.add_argument("--comment", metavar="TEXT", help="a comment, shown by scontrol show job")
    p.add_argument(
        "--secret-env",
        dest="secret_env",
        action="append",
        metavar="NAME",
        help="pass $NAME from your environment as a secret: never shown, stored encrypted "
        "(repeatable; replaces the file's secret_env)",
    )
    p.add_argument(
        "--network",
        metavar="NAME",
        help="the docker network of the job's container: one the admins offer "
        "(job_network, job_networks in the head's config)",
    )
    p.add_argument(
        "-c",
        "--cpus-per-task",
        dest="cpus",
        metavar="N",
        help="CPUs for the job (counted by the scheduler; default 1, not enforced). "
        "Containers get --cpus N; bare processes are pinned to N CPUs",
    )
    mem_units = "MB, or with a unit K, M, G or T, e.g. 16G"
    p.add_argument(
        "--mem",
        metavar="SIZE",
        help=f"memory for the job in all: {mem_units}. The job waits for a node with "
        "that much free and is held to it (a container's limit; a bare process's data "
        "size). 0 (all of a node's memory) is not supported",
    )
    p.add_argument("--mem-per-gpu", dest="mem_per_gpu", metavar="SIZE", help="--mem per GPU")
    p.add_argument("--mem-per-cpu", dest="mem_per_cpu", metavar="SIZE", help="--mem per CPU")
    p.add_argument(
        "-d",
        "--dependency",
        dest="dependency",
        metavar="LIST",
        help="start only once LIST holds, as Slurm: afterok:ID[:ID...], afternotok:ID, "
        "afterany:ID, after:ID[+MINUTES] (started), aftercorr:ID (array task by task), "
        "singleton (one job of this name of yours at a time); join with , (all) or ? "
        "(any). An array's id means all its tasks, ID_K one task",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the job's stdout (and its stderr, without -e) to FILE, as its submitter "
        "(default: slurm-%%j.out, slurm-%%A_%%a.out for an array task, in the submit dir); "
        "patterns %%j %%J %%x %%u %%A %%a %%N %%%%; a relative path starts from -D (bare "
        "process) or the submit dir. The head keeps its own copy for `gbatch logs`",
    )
    p.add_argument(
        "-e", "--error", metavar="FILE", help="write the job's stderr apart, to FILE (as -o)"
    )
    p.add_argument(
        "--open-mode",
        dest="open_mode",
        metavar="append|truncate",
        help="start the output files afresh (truncate, the default) or add to them; a "
        "requeued or retried job always adds to them",
    )
    p.add_argument("-H", "--hold", action="store_true", default=None, help="queue the job held")
    # One task on one node is what a gbatch job is; Slurm scripts say so explicitly.
    for flags, dest in (
        (("-N", "--nodes"), "nodes"),
        (("-n", "--ntasks"), "ntasks"),
        (("--ntasks-per-node",), "ntasks_per_node"),
    ):
        p.add_argument(
            *flags, dest=dest, metavar="1", help="accepted as 1 only: one task, one node"
        )
    for flag, dest in (("--gpus-per-node", "gpus_per_node"), ("--gpus-per-task", "gpus_per_task")):
        p.add_argument(flag, dest=dest, metavar="[TYPE:]N", help="the same as --gpus here")
    p.add_argument(
        "--cpus-per-gpu", dest="cpus_per_gpu", metavar="N", help="-c N times the job's GPUs"
    )
    p.add_argument(
        "-Q", "--quiet", action="store_true", default=None, help="print no job id on success"
    )
    p.add_argument(
        "-W",
        "--wait",
        action="store_true",
        default=None,
        help="return only when the job has ended, with its exit code (an array's highest; "
        "1 for a job killed by a signal, cancelled, timed out or lost with its node)",
    )
    # Slurm options gbatch takes so that cluster templates run unchanged, without effect.
    for names, dest, metavar, nargs, effect in IGNORED_OPTIONS:
        p.add_argument(
            *names,
            dest=dest,
            metavar=metavar,
            nargs=nargs,
            help=f"accepted, no effect here: {effect}",
        )
    p.add_argument("-v", "--verbose", action="count", help="accepted, no effect here")


# The ways Slurm asks for GPUs; on one node with one task they all mean the job's count.
GPU_OPTIONS = {
    "gpus": "--gpus",
    "gres": "--gres",
    "gpus_per_node": "--gpus-per-node",
    "gpus_per_task": "--gpus-per-task",
}


def _gpus_option(args: argparse.Namespace) -> int | None:
    given = [dest for dest in GPU_OPTIONS if getattr(args, dest, None) is not None]
    if len(given) > 1:
        first, second = (GPU_OPTIONS[dest] for dest in given[:2])
        raise CliError(f"{first} and {second} both given. Use one", Exit.USAGE)
    if not given:
        return None
    # Imported past the common case (no option given; every HTTP API submit): an import
    # statement costs ~0.5 us even when the module is loaded.
    from gbatch.jobspec.spec import SpecError, parse_gres

    (dest,) = given
    value = getattr(args, dest)
    if dest == "gres":
        return parse_gres(value)
    text = value.rsplit(":", 1)[-1]  # Slurm allows --gpus=TYPE:N
    try:
        return int(text)
    except ValueError as err:
        raise SpecError(
            GPU_OPTIONS[dest], f"{value!r} is not a GPU count. Use a number like 2"
        ) from err


def _cpus_option(args: argparse.Namespace, gpus: object) -> int | None:
    """-c, or --cpus-per-gpu times the GPUs (Slurm's two ways; they exclude each other)."""
    cpus = _int_option(args.cpus, "-c/--cpus-per-task")
    per_gpu = _int_option(getattr(args, "cpus_per_gpu", None), "--cpus-per-gpu")
    if per_gpu is None:
        return cpus
    if cpus is not None:
        raise CliError("-c/--cpus-per-task and --cpus-per-gpu both given. Use one", Exit.USAGE)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise CliError(
            "--cpus-per-gpu: the job asks for no GPUs. Use -c N, or ask for GPUs (--gpus N)",
            Exit.USAGE,
        )
    return per_gpu * gpus


def _secret_env_option(
    names: list[str] | None, environ: Mapping[str, str]
) -> dict[str, str] | None:
    """--secret-env NAME...: each value from the submitter's own environment (`environ`),
    so it never sits in argv (ps) or shell history."""
    if not names:
        return None
    from gbatch.jobspec.spec import SpecError

    values: dict[str, str] = {}
    for name in names:
        if name not in environ:
            raise SpecError(
                "--secret-env",
                f"{name} is not set in your environment. Export it first "
                f"(e.g. read -rs {name} && export {name}), then submit again",
            )
        values[name] = environ[name]
    return values


def _int_option(text: str | None, option: str) -> int | None:
    """A whole-number option, checked here rather than by argparse so that a bad value is
    one line naming the option (build_spec checks the range)."""
    if text is None:  # before the imports: five calls a submit, most with None
        return None
    from gbatch.core.timefmt import show_value
    from gbatch.jobspec.spec import SpecError

    if not re.fullmatch(r"[+-]?[0-9]{1,18}", text.strip(), re.ASCII):
        raise SpecError(option, f"{show_value(text)} is not a whole number. Use e.g. 3")
    return int(text)


class _OptionProblem(Exception):
    pass


class _OptionParser(argparse.ArgumentParser):
    """sbatch's options alone: for a batch script's #SBATCH lines, and for options
    written after a YAML job file. Problems are raised, not printed."""

    def error(self, message: str) -> NoReturn:
        unknown = message.partition("unrecognized arguments: ")[2].split()
        if unknown:  # options after a YAML job file: the nearest one, as on the line
            message += did_you_mean(unknown[0], option_strings(self))
        raise _OptionProblem(message)


def _options_parser(prog: str) -> _OptionParser:
    parser = _OptionParser(
        prog=prog, add_help=False, argument_default=argparse.SUPPRESS, allow_abbrev=False
    )
    _add_options(parser)
    parser.add_argument("--parsable", action="store_true")
    parser.add_argument("--test-only", dest="test_only", action="store_true")
    return parser


ONE_TASK = {"nodes": "-N/--nodes", "ntasks": "-n/--ntasks", "ntasks_per_node": "--ntasks-per-node"}


def _one_task_problem(values: dict[str, Any]) -> str | None:
    """What is wrong with -N/-n/--ntasks-per-node, if anything: a job is one task."""
    for dest, flag in ONE_TASK.items():
        value = values.get(dest)
        if value is not None and str(value).strip() not in ("1", "1-1"):
            return (
                f"{flag}: {value!r} asks for more than one task or node; a gbatch job is one "
                "task on one node. Use 1, or start the tasks inside the job"
            )
    return None


def _apply_directives(args: argparse.Namespace, script: BatchScript) -> dict[str, int]:
    """Fill the options the command line left unset from the script's #SBATCH lines
    (the command line wins; a later line wins over an earlier one). ScriptError for a
    line gbatch cannot take, naming it. Returns the line that set each option taken
    from the script (by dest), for the refusals found later (a value build_spec
    checks) to name it too."""
    from gbatch.jobspec.batchscript import DIRECTIVE, ScriptError

    parser = _options_parser(DIRECTIVE)
    taken: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for directive in script.directives:
        try:
            found, extra = parser.parse_known_args(list(directive.words), argparse.Namespace())
        except _OptionProblem as err:
            raise ScriptError(script.location, directive.line, f"{DIRECTIVE}: {err}") from None
        if extra:
            raise ScriptError(
                script.location,
                directive.line,
                f"{DIRECTIVE} {extra[0]}: not an option gbatch knows"
                f"{did_you_mean(extra[0], option_strings(parser))}. Remove the line, or "
                "see `gbatch sbatch --help` for the options gbatch takes",
            )
        values = vars(found)
        if "wrap" in values:
            raise ScriptError(
                script.location,
                directive.line,
                f"{DIRECTIVE} --wrap: a batch script is its own command. Remove the line",
            )
        problem = _one_task_problem(values)
        if problem is not None:
            raise ScriptError(script.location, directive.line, f"{DIRECTIVE} {problem}")
        if "param" in values and "param" in taken:  # --param lines add up, as options do
            values["param"] = [*taken["param"], *values["param"]]
        taken.update(values)
        lines.update(dict.fromkeys(values, directive.line))
    applied: dict[str, int] = {}
    for dest, value in taken.items():
        if getattr(args, dest, None) in (None, False):
            setattr(args, dest, value)
            applied[dest] = lines[dest]
    return applied


def _line_of(key: str, lines: dict[str, int]) -> int | None:
    """The #SBATCH line that gave job-file key `key` its value (by the option's dest:
    several options give `gpus`), or None."""
    dests = {"gpus": (*GPU_OPTIONS,), "cpus": ("cpus", "cpus_per_gpu")}.get(key, (key,))
    return max((lines[dest] for dest in dests if dest in lines), default=None)


def _on_its_line(err: Exception, script: BatchScript | None, lines: dict[str, int]) -> str:
    """A refusal of an option's value, with the script's file and line when an #SBATCH
    line gave the value (`job.sh:7: #SBATCH --mem: ...`)."""
    from gbatch.jobspec.batchscript import DIRECTIVE, ScriptError
    from gbatch.jobspec.spec import OVERRIDE_OPTION

    field = getattr(err, "field", None)
    if script is not None and isinstance(field, str):
        labels = {
            **OVERRIDE_OPTION,
            **GPU_OPTIONS,
            "array": "--array",
            "cpus_per_gpu": "--cpus-per-gpu",
            "param": "--param",
            "name_template": "--name-template",
        }
        for dest, label in labels.items():
            if label == field and dest in lines:
                return str(ScriptError(script.location, lines[dest], f"{DIRECTIVE} {err}"))
    return str(err)


def _job_source(args: argparse.Namespace) -> tuple[dict[str, object] | None, BatchScript | None]:
    """The YAML job file's data, or the batch script (a file, or stdin), or neither
    (--wrap). Options after a YAML file are options, as they always were."""
    from gbatch.jobspec.batchscript import looks_like_script, parse_script
    from gbatch.jobspec.spec import SpecError, parse_job_text, read_job_text

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
            raise CliError(_wrap_with_file(args.file), Exit.USAGE)
        return None, parse_script(text, args.file)
    if args.script_args:
        try:
            _options_parser("gbatch sbatch").parse_args(args.script_args, namespace=args)
        except _OptionProblem as err:
            raise CliError(f"{err}. Options go before or after the job file", Exit.USAGE) from None
    if args.wrap is not None:
        raise CliError(_wrap_with_file(args.file), Exit.USAGE)
    data = parse_job_text(text, args.file)
    return data, _embedded_script(data, args)


def _wrap_with_file(file: str) -> str:
    """The refusal of a job file or script given with --wrap: neither silently wins (as
    Slurm's sbatch, which takes no script with --wrap)."""
    return (
        f"--wrap: {file} is given too, and both name the job's command. Drop {file}, "
        "or drop --wrap (a job file's command is its `command:` key)"
    )


def _embedded_script(data: dict[str, object], args: argparse.Namespace) -> BatchScript | None:
    """A job file's `script:` (taken out of `data`): a batch script as a file holds one,
    run by its #! line (bash without one), its #SBATCH lines read as a file's are."""
    text = data.pop("script", None)
    if text is None:
        return None
    from gbatch.jobspec.batchscript import parse_script
    from gbatch.jobspec.spec import SpecError

    if not isinstance(text, str) or not text.strip():
        raise SpecError("script", "give the script's text, e.g. `script: |` and its lines")
    if data.get("command") is not None or args.wrap is not None:
        raise SpecError(
            "script", "a job file's script is its command. Keep script or command, not both"
        )
    return parse_script(
        text, f"{args.file} script", name=os.path.basename(args.file), default_shell=True
    )


def _sweep_of(
    data: dict[str, object] | None, args: argparse.Namespace, here: bool = True
) -> tuple[Sweep | None, str | None]:
    """The sweep (--param, else the job file's `sweep:`, taken out of `data`; a file of
    rows read here, as the submitter, relative to the job file; refused unless `here`:
    this process is not the submitter) and the name template (--name-template, else the
    file's `name_template:`)."""
    file_sweep = None if data is None else data.pop("sweep", None)
    template = None if data is None else data.pop("name_template", None)
    if file_sweep is None and template is None and not args.param and args.name_template is None:
        return None, None  # no sweep, the common case: before the imports
    from gbatch.jobspec.spec import SpecError
    from gbatch.jobspec.sweep import parse_param_options, read_rows_file, sweep_from_yaml

    if args.name_template is not None:
        template = args.name_template
    elif template is not None and not isinstance(template, str):
        raise SpecError("name_template", 'give text, e.g. "{name}-lr{lr}"')
    sweep: Sweep | None = None
    if args.param:
        sweep = parse_param_options(args.param)
    elif file_sweep is not None:
        found = sweep_from_yaml(file_sweep)
        if isinstance(found, str) and not here:
            raise SpecError(
                "sweep", "a file of rows is read where gbatch sbatch runs; give the rows inline"
            )
        if isinstance(found, str):
            base = os.path.dirname(os.path.abspath(args.file)) if args.file else os.getcwd()
            found = read_rows_file(os.path.join(base, os.path.expanduser(found)))
        sweep = found
    if sweep is not None and args.array is not None:
        raise SpecError(
            "--array", "a sweep is its own array (one task per row). Remove --array, or the sweep"
        )
    if sweep is None and template is not None:
        field = "--name-template" if args.name_template is not None else "name_template"
        raise SpecError(field, "names the tasks of a sweep; give --param or sweep: too")
    return sweep, template


def _file_keys_win(data: dict[str, object] | None, lines: dict[str, int], args: Any) -> None:
    """A job file's keys win over the #SBATCH lines of its own `script:` (the command
    line wins over both): the options those lines set are unset again."""
    if not data:
        return
    keys = {**{dest: "gpus" for dest in GPU_OPTIONS}, "cpus_per_gpu": "cpus"}
    for dest in list(lines):
        if data.get(keys.get(dest, dest)) is not None:
            setattr(args, dest, None)
            del lines[dest]


def _check_output_dirs(spec: Any, submit_dir: str, *, from_file: bool, err_from_file: bool) -> None:
    """Refuse, before queueing, an output or error file the submitter could not write
    (sbatch runs as them): its directory missing or not writable, or the file there and
    not writable. A directory part with %j, %A, %a or %N is known only at start and is
    not checked; the default slurm-%j.out is not either (as Slurm, the job runs all the
    same, and its log says why there is no file)."""
    from gbatch.core.outputs import submit_check_dir
    from gbatch.jobspec.spec import SpecError

    base = _start_dir(spec, submit_dir)
    user = user_name()
    for pattern, field in (
        (spec.output, "output" if from_file else "-o/--output"),
        (spec.error, "error" if err_from_file else "-e/--error"),
    ):
        if pattern is None:
            continue
        directory = submit_check_dir(pattern, user, spec.name, base)
        if directory is None:
            continue
        shown = f"{pattern}: directory {directory}"
        if not os.path.isdir(directory):
            raise SpecError(
                field,
                f"{shown} does not exist. Create it or name a file in a directory that exists",
            )
        name = os.path.join(directory, os.path.basename(pattern))
        if "%" not in os.path.basename(pattern) and os.path.exists(name):
            # An existing file (/dev/null) needs only to be writable itself.
            problem = None if os.access(name, os.W_OK) else f"{pattern}: {name}"
        else:
            problem = None if os.access(directory, os.W_OK | os.X_OK) else shown
        if problem is not None:
            raise SpecError(
                field, f"{problem} is not writable by you. Name a file in a directory you can write"
            )


def _start_dir(spec: Any, submit_dir: str) -> str:
    """Where a bare job starts and its relative output paths begin: its -D, else where it
    was submitted."""
    return str(spec.workdir) if spec.image is None and spec.workdir else submit_dir


def _warn_default_output(spec: Any, submit_dir: str) -> None:
    """The default slurm-%j.out goes where the job is submitted from (or its -D): say
    so at once when the submitter cannot write there. Not refused, as Slurm does not
    refuse it: the job runs, and `gbatch logs` has its output."""
    if spec.output is None:
        warn_unwritable(_start_dir(spec, submit_dir))


def run(args: argparse.Namespace, ctx: Context) -> int:
    submit_dir = os.getcwd()
    everyday = _everyday_request(args, submit_dir, os.environ)
    if everyday is not None:
        reply = ctx.client.send(everyday)
        ids = reply["ids"]
        warn_unwritable(submit_dir)  # --wrap alone: slurm-%j.out where it was submitted
    else:
        request, spec, script, lines = build_submit(
            args, lambda: _job_source(args), submit_dir=submit_dir, environ=os.environ
        )
        try:
            reply = ctx.client.call(request)
        except RequestFailed as err:
            # The daemon names the job-file key (`partition: ...`): name the line too.
            line = _line_of(err.message.split(":", 1)[0], lines)
            if script is not None and line is not None:
                from gbatch.jobspec.batchscript import DIRECTIVE, ScriptError

                located = ScriptError(script.location, line, f"{DIRECTIVE} {err.message}")
                raise RequestFailed(err.kind, str(located)) from err
            raise
        if args.test_only:
            print(_test_only_line(reply["test"], spec.gpus), file=sys.stderr)
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


@functools.cache
def _text_parser() -> _OptionParser:
    """request_for_text's parser, built once: building it was 0.7 ms of a 0.8 ms API
    submit (bench/bench_api.py). Parsing reads the parser and changes nothing on it, and
    no option has a mutable default, so the API's threads share it. A problem is
    raised (_OptionProblem), never printed: the caller is a server, not a terminal."""
    parser = _OptionParser(prog="gbatch sbatch", add_help=False, allow_abbrev=False)
    parser.add_argument("file", nargs="?")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    _add_options(parser)
    parser.add_argument("--test-only", dest="test_only", action="store_true")
    return parser


@functools.cache
def _no_options() -> tuple[dict[str, Any], tuple[str, ...]]:
    """What _text_parser makes of no options, parsed once (argparse was a quarter of
    the API's ~0.12 ms of parsing per submit), and which of its values are lists (each
    request gets its own)."""
    values = dict(vars(_text_parser().parse_args([])))
    return values, tuple(key for key, value in values.items() if isinstance(value, list))


def request_for_text(
    text: str | None,
    name: str,
    options: Sequence[str] = (),
    *,
    submit_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Submit:
    """The submit request `gbatch sbatch [OPTIONS] FILE` makes of a job file's (YAML or
    JSON) or a batch script's text (None: `options` hold --wrap), `name` standing for
    the file's name. For a submitter who is not here (the HTTP API) leave `submit_dir`
    and `environ` out: nothing is read from this process's environment, working
    directory or files, and the job starts in its user's home unless it names a
    workdir. The MCP server passes its own (its user's, as the CLI's). CliError (exit
    2's one line) for a job that cannot be queued."""
    if options:
        try:
            args = _text_parser().parse_args(list(options))
        except _OptionProblem as err:
            raise CliError(str(err), Exit.USAGE) from None
    else:  # the API's every submit: the parse's result, fresh (build_submit sets on it)
        values, lists = _no_options()
        args = argparse.Namespace()
        fields = vars(args)  # filled as a dict: Namespace(**values) set each one by one
        fields.update(values)
        for key in lists:
            fields[key] = list(values[key])
    stray = [word for word in [args.file, *args.script_args] if word is not None]
    if stray:
        raise CliError(f"{stray[0]!r} is not an option. Give options alone", Exit.USAGE)
    if text is None:
        if args.wrap is None:
            raise CliError(NO_JOB, Exit.USAGE)
        return build_submit(
            args, lambda: (None, None), submit_dir=submit_dir, environ=environ or {}
        )[0]
    if args.wrap is not None:
        raise CliError(_wrap_with_file(name), Exit.USAGE)
    args.file = name

    def source() -> tuple[dict[str, object] | None, BatchScript | None]:
        from gbatch.jobspec.batchscript import looks_like_script, parse_script
        from gbatch.jobspec.spec import parse_job_text

        if looks_like_script(text, name):
            return None, parse_script(text, name)
        data = parse_job_text(text, name)
        return data, _embedded_script(data, args)

    return build_submit(args, source, submit_dir=submit_dir, environ=environ or {})[0]


def build_submit(
    args: argparse.Namespace,
    job_source: Callable[[], tuple[dict[str, object] | None, BatchScript | None]],
    *,
    submit_dir: str | None,
    environ: Mapping[str, str],
) -> tuple[Submit, Any, BatchScript | None, dict[str, int]]:
    """The submit request for `args` and the job `job_source` reads, with the spec it
    holds, the batch script, and the #SBATCH line that set each option. `submit_dir`:
    where the submitter is (their files are checked and read there); None for one who
    is not on this machine (request_for_text). CliError for bad input."""
    # Deferred: yaml and validation are needed by sbatch alone.
    from gbatch.jobspec.batchscript import ScriptError
    from gbatch.jobspec.spec import (
        OVERRIDE_OPTION,
        Export,
        SpecError,
        build_spec,
        check_submit_env_size,
        export_of,
        exported_env,
        parse_array,
        secret_env_values,
    )
    from gbatch.jobspec.sweep import check_templates
    from gbatch.protocol import wire

    script: BatchScript | None = None
    lines: dict[str, int] = {}
    try:
        data, script = job_source()
        if script is not None:
            lines = _apply_directives(args, script)
            _file_keys_win(data, lines, args)
        sweep, name_template = _sweep_of(data, args, submit_dir is not None)
        problem = _one_task_problem(vars(args))
        if problem is not None:
            raise CliError(problem, Exit.USAGE)
        if args.workdir is not None and not os.path.isabs(args.workdir) and submit_dir:
            args.workdir = os.path.join(submit_dir, args.workdir)  # as Slurm: from here
        command: str | list[str] | None = args.wrap
        if script is not None:
            # After a job file, words are options (its script takes no arguments).
            command = script.command(list(args.script_args) if data is None else [])
        gpus = _gpus_option(args)
        overrides = {
            "name": args.name,
            "gpus": gpus,
            "time_limit": args.time_limit,
            "command": command,
            "image": args.image,
            "retries": _int_option(args.retries, "--retries"),
            "requeue": args.requeue,
            "priority": _int_option(args.priority, "--priority"),
            "nice": _int_option(args.nice, "--nice"),
            "workdir": args.workdir,
            "secret_env": _secret_env_option(args.secret_env, environ),
            "network": args.network,
            "partition": args.partition,
            "cpus": _cpus_option(args, gpus if gpus is not None else (data or {}).get("gpus")),
            "mem": args.mem,
            "mem_per_gpu": args.mem_per_gpu,
            "mem_per_cpu": args.mem_per_cpu,
            "dependency": args.dependency,
            "export": args.export,
            "begin": args.begin,
            "signal": args.signal,
            "mail_type": args.mail_type,
            "mail_user": args.mail_user,
            "comment": args.comment,
            "notify": args.notify,
            "output": args.output,
            "error": args.error,
            "open_mode": args.open_mode,
            "ntasks": None if args.ntasks is None else 1,  # more was refused above
        }
        if script is not None and data is None:
            # As Slurm: the job is named after its script (stdin: "sbatch").
            default_name = os.path.basename(script.name)
        else:
            default_name = _file_stem(args.file) if args.file else "wrap"
        spec = build_spec(
            data,
            overrides,
            default_name=default_name,
            option_names=OVERRIDE_OPTION,
            source=args.file or ("stdin" if script is not None else "options"),
            now=time.time(),
        )
        secrets = secret_env_values(data, overrides, option_names=OVERRIDE_OPTION)
        # A container job exports nothing unless asked: the host's PATH or
        # LD_LIBRARY_PATH inside an image breaks it (README, "Coming from Slurm").
        export = export_of(data, overrides, option_names=OVERRIDE_OPTION) or Export(
            everything=spec.image is None
        )
        submit_env = exported_env(export, environ)
        check_submit_env_size(submit_env)
        if args.array is not None:
            parse_array(args.array)  # refused here, in one line, before anything is sent
        if sweep is not None:
            check_templates(spec.command, sweep.names, name_template, spec.name)
        if submit_dir is not None:
            _check_output_dirs(
                spec, submit_dir, from_file=args.output is None, err_from_file=args.error is None
            )
    except SpecError as err:
        raise CliError(_on_its_line(err, script, lines), Exit.USAGE) from err
    except ScriptError as err:
        raise CliError(str(err), Exit.USAGE) from err
    wire_spec = spec.to_wire()
    if submit_dir is not None:
        if spec.image is None and spec.workdir is None:
            wire_spec["workdir"] = submit_dir  # as Slurm: a job starts where it was submitted
        wire_spec["submit_dir"] = submit_dir
    wire_spec["submit_host"] = socket.gethostname()
    request = wire.Submit(
        spec=wire_spec,
        secret_env=secrets,
        held=bool(args.hold),
        submit_env=submit_env or None,
        array=args.array,
        test_only=bool(args.test_only),
        sweep=None if sweep is None else sweep.to_wire(),
        name_template=name_template,
    )
    return request, spec, script, lines


@functools.lru_cache(maxsize=64)
def _file_stem(name: str) -> str:
    """Path(name).stem, kept: the API names every submit's text "api", and pathlib's
    parse of it was ~4 us of each."""
    return Path(name).stem


def _wait_for(ctx: Context, ids: list[int]) -> int:
    """sbatch -W: poll until every job of `ids` has ended; the exit status is Slurm's:
    the job's exit code (an array's highest), 1 for a job that ended without one of its
    own (killed by a signal, cancelled, timed out, lost with its node)."""
    from gbatch.protocol import wire

    pause = 0.2
    while True:
        reply = ctx.client.call(wire.ListJobs(ids=tuple(ids), history=True, brief=True))
        jobs = [wire.job_from_wire(job) for job in reply["jobs"]]
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
