"""gbatch sbatch: queue a job from a YAML job file and/or Slurm-style options."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit

HELP = "queue a job (a job file, options, or --wrap)"
OPTION_NAMES = {
    "name": "-J/--job-name",
    "gpus": "--gpus",
    "time_limit": "-t/--time",
    "command": "--wrap",
    "image": "--image",
    "retries": "--retries",
    "priority": "--priority",
    "nice": "--nice",
    "workdir": "-D/--chdir",
    "secret_env": "--secret-env",
    "network": "--network",
}


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "sbatch",
        help=HELP,
        description=HELP + ". Options override the file's keys.",
        epilog="example: gbatch sbatch train.yaml -t 2:00:00 --gpus 2\n"
        '         gbatch sbatch --wrap "python train.py" --gres gpu:1',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", nargs="?", help="job file (YAML); see examples/")
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
    p.add_argument("--image", metavar="IMAGE", help="run in this container image")
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
        metavar="N|A-B",
        help="queue one job per index; each sees GBATCH_ARRAY_TASK_ID",
    )
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
    p.add_argument("-H", "--hold", action="store_true", help="queue the job held")
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    p.set_defaults(run=run)


def _array_count(text: str | None) -> int:
    """Indices run from 0: `--array 10` and `--array 0-9` both mean ten tasks."""
    if text is None:
        return 1
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-", 1))
            if low != 0 or high < low:
                raise ValueError
            return high - low + 1
        count = int(text)
        if count < 1:
            raise ValueError
        return count
    except ValueError as err:
        raise CliError(f"--array: {text!r} is not an array. Use N or 0-M", Exit.USAGE) from err


def _gpus_option(args: argparse.Namespace) -> int | None:
    from gbatch.spec import SpecError, parse_gres

    if args.gpus is not None and args.gres is not None:
        raise CliError("--gpus and --gres both given. Use one", Exit.USAGE)
    if args.gres is not None:
        return parse_gres(args.gres)
    if args.gpus is None:
        return None
    text = args.gpus.rsplit(":", 1)[-1]  # Slurm allows --gpus=TYPE:N
    try:
        return int(text)
    except ValueError as err:
        raise SpecError("--gpus", f"{args.gpus!r} is not a GPU count. Use a number like 2") from err


def _secret_env_option(names: list[str] | None) -> dict[str, str] | None:
    """--secret-env NAME...: each value from the submitter's own environment, so it never
    sits in argv (ps) or shell history."""
    from gbatch.spec import SpecError

    if not names:
        return None
    values: dict[str, str] = {}
    for name in names:
        if name not in os.environ:
            raise SpecError(
                "--secret-env",
                f"{name} is not set in your environment. Export it first "
                f"(e.g. read -rs {name} && export {name}), then submit again",
            )
        values[name] = os.environ[name]
    return values


def _int_option(text: str | None, option: str) -> int | None:
    """A whole-number option, checked here rather than by argparse so that a bad value is
    one line naming the option (build_spec checks the range)."""
    from gbatch.spec import SpecError
    from gbatch.timefmt import show_value

    if text is None:
        return None
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", text.strip(), re.ASCII):
        raise SpecError(option, f"{show_value(text)} is not a whole number. Use e.g. 3")
    return int(text)


def run(args: argparse.Namespace, ctx: Context) -> int:
    # Deferred: yaml and validation are needed by sbatch alone.
    from gbatch import wire
    from gbatch.spec import SpecError, build_spec, load_job_file, secret_env_values

    try:
        if args.file is None and args.wrap is None:
            raise CliError('no job file given. Pass FILE, or --wrap "CMD"', Exit.USAGE)
        data = load_job_file(args.file) if args.file is not None else None
        overrides = {
            "name": args.name,
            "gpus": _gpus_option(args),
            "time_limit": args.time_limit,
            "command": args.wrap,
            "image": args.image,
            "retries": _int_option(args.retries, "--retries"),
            "requeue": args.requeue,
            "priority": _int_option(args.priority, "--priority"),
            "nice": _int_option(args.nice, "--nice"),
            "workdir": args.workdir,
            "secret_env": _secret_env_option(args.secret_env),
            "network": args.network,
        }
        default_name = Path(args.file).stem if args.file else "wrap"
        spec = build_spec(
            data,
            overrides,
            default_name=default_name,
            option_names=OPTION_NAMES,
            source=args.file or "options",
        )
        secrets = secret_env_values(data, overrides, option_names=OPTION_NAMES)
    except SpecError as err:
        raise CliError(f"{err}", Exit.USAGE) from err
    count = _array_count(args.array)
    wire_spec = spec.to_dict()
    if spec.image is None and spec.workdir is None:
        wire_spec["workdir"] = os.getcwd()  # as Slurm: a job starts where it was submitted
    request = wire.Submit(spec=wire_spec, secret_env=secrets, count=count, held=args.hold)
    reply = ctx.client.call(request)
    ids = reply["ids"]
    if len(ids) == 1:
        print(ids[0] if args.parsable else f"Submitted batch job {ids[0]}")
    else:
        span = f"{ids[0]}-{ids[-1]}"
        print(span if args.parsable else f"Submitted batch jobs {span}")
    return Exit.OK
