"""sbatch's options, as the command line and a batch script's #SBATCH lines give them.

The argparse declarations (add_job_options), the parsers that raise instead of printing
(for #SBATCH lines, options after a job file, and a submit's text). The rules between
options are gbatch.jobspec.submit's and gbatch.jobspec.nodeopts'.
"""

from __future__ import annotations

import argparse
import functools

from gbatch.core.suggest import did_you_mean, option_strings

# --exclusive's values (Slurm's): all hold the nodes whole here (no node is shared with
# the submitter's other jobs either: stricter than `user` and `mcs` ask, never looser).
EXCLUSIVE_VALUES = ("user", "mcs", "topo")

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any, NoReturn


# Slurm options that mean nothing on gbatch, taken so that cluster templates run
# unchanged: (flags, dest, metavar, nargs, what happens here instead). `--help` and the
# README ("Coming from Slurm") list them. nargs "?": Slurm's optional value (getopt's
# optional argument), taken only after '=' (IgnoredFlag), as --exclusive's.
IGNORED_OPTIONS: tuple[tuple[tuple[str, ...], str, str, str | None, str], ...] = (
    (("-A", "--account"), "account", "NAME", None, "fair-share is per user, not per account"),
    (("--get-user-env",), "get_user_env", "TIMEOUT", "?", "the job's variables are --export's"),
    (("--propagate",), "propagate", "RLIMIT", "?", "a job gets its node's default limits"),
    (("--hint",), "hint", "TYPE", None, "gbatch places no tasks on cores"),
    (
        ("--no-kill",),
        "no_kill",
        "off",
        "?",
        "a job across nodes ends (or is requeued) whole when one of its nodes is lost",
    ),
)


def add_node_options(p: argparse.ArgumentParser) -> None:
    """The job's nodes and tasks (issue 32; docs/multinode.md)."""
    p.add_argument(
        "-N",
        "--nodes",
        dest="nodes",
        metavar="N",
        help="nodes for the job, all allocated at once, in one partition (default 1). "
        "Slurm's MIN-MAX (2-4) is taken as MIN. A batch script runs on the first node and "
        "`gbatch srun` in it starts the tasks on every node; a job file's command and a "
        "container job run on every node. -c, --mem and the GPUs are per node",
    )
    p.add_argument(
        "-n",
        "--ntasks",
        dest="ntasks",
        metavar="N",
        help="tasks srun starts in the job (SLURM_NTASKS): spread over -N's nodes, or "
        "without -N, all N on one node (Slurm would spread them over nodes as needed)",
    )
    p.add_argument(
        "--ntasks-per-node",
        dest="ntasks_per_node",
        metavar="N",
        help="tasks srun starts on each node; with -n and no -N, the nodes are -n / N",
    )
    p.add_argument(
        "--gpus-per-node",
        dest="gpus_per_node",
        metavar="[TYPE:]N",
        help="GPUs on each node of the job (as --gres=gpu[:TYPE]:N)",
    )
    p.add_argument(
        "--gpus-per-task",
        dest="gpus_per_task",
        metavar="[TYPE:]N",
        help="GPUs per task: N times the tasks on each node (--ntasks-per-node, or -n "
        "over the nodes; 1 without either)",
    )
    p.add_argument(
        "-w",
        "--nodelist",
        dest="nodelist",
        metavar="LIST",
        help="nodes the job must run on, as a Slurm host list (gpu[01-02],gpu07); "
        "without -N, the job gets that many nodes. Not a file of names",
    )
    p.add_argument(
        "-x",
        "--exclude",
        dest="exclude",
        metavar="LIST",
        help="nodes the job must not run on, as a Slurm host list",
    )
    p.add_argument(
        "--exclusive",
        dest="exclusive",
        action="store_const",
        const=True,
        help="hold each node whole: all its GPUs, no other job beside it (so do Slurm's "
        "--exclusive=user, =mcs and =topo here)",
    )
    # Slurm's values come only after '=' (getopt's optional argument): as option strings
    # of their own, so that `--exclusive job.sh` leaves job.sh a word, never a value.
    p.add_argument(
        *(f"--exclusive={value}" for value in EXCLUSIVE_VALUES),
        dest="exclusive",
        action="store_const",
        const=True,
        help=argparse.SUPPRESS,
    )


def add_job_options(p: argparse.ArgumentParser) -> None:
    """The job's options: the command line's, and a batch script's #SBATCH lines'."""
    p.add_argument("-J", "--job-name", dest="name", metavar="NAME")
    p.add_argument(
        "-G",
        "--gpus",
        metavar="[TYPE:]N",
        help="GPUs for the job: on one node, or with -N K, N in all (N/K on each node; "
        "N must divide by K); TYPE: only that model (a100:2; the types are those `gbatch "
        "sinfo -o %%G` lists), or MIG slices (a100_1g.10gb:1, or a profile alone: "
        "1g.10gb:1; one node only); without TYPE, whole GPUs only",
    )
    p.add_argument(
        "--gres",
        metavar="gpu[:TYPE]:N",
        help="GPUs on each node, Slurm's spelling (gpu:2, gpu:a100:2); shard[:TYPE]:N: N of "
        "the admin's shards of one GPU (shard_mib), as --gpu-mem",
    )
    p.add_argument(
        "--gpu-mem",
        dest="gpu_mem",
        metavar="SIZE",
        help="a share of one GPU instead of whole GPUs: SIZE of its memory (MB, or with a "
        "unit K, M, G or T, e.g. 20G), on a card the admin made shareable, beside other "
        "shared jobs; the job sees GBATCH_GPU_MEM_MIB. --gpus=TYPE:1 names the model",
    )
    p.add_argument(
        "-C",
        "--constraint",
        metavar="LIST",
        help="run only on a node with these features (`gbatch sinfo -o %%f`; GPU types "
        "count as features): names joined by & (all) and | (any), e.g. 'a100|h100', "
        "'nvlink&[a100|h100]'",
    )
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
        help="the partition (node pool) to run in: one name (default: the default partition, "
        "marked * by `gbatch sinfo`), or one of the lab's and one backed by a Slurm cluster "
        "(gpu,uni: it runs on whichever starts it first, never both)",
    )
    p.add_argument(
        "-q",
        "--qos",
        metavar="NAME",
        help="the quality of service: its priority, limits and preemption (default normal; "
        "`gbatch scontrol show qos` lists those you may use)",
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
    p.add_argument("--priority", metavar="N", help="the job's priority (admins only, as Slurm)")
    p.add_argument(
        "--nice", metavar="N", help="lower the job's priority by N (below 0: admins only)"
    )
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
        "--reservation",
        metavar="NAME",
        help="run in reservation NAME (scontrol show reservation): only on its nodes or "
        "GPUs, within its window; only its users may",
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
    p.add_argument(
        "-c",
        "--cpus-per-task",
        dest="cpus",
        metavar="N",
        help="CPUs for the job, on each node (counted by the scheduler; default 1, not "
        "enforced). "
        "Containers get --cpus N; a bare process gets N CPUs (its cgroup's CPU quota "
        "and cpuset where the host allows one, else CPU affinity)",
    )
    mem_units = "MB, or with a unit K, M, G or T, e.g. 16G"
    p.add_argument(
        "--mem",
        metavar="SIZE",
        help=f"memory for the job in all (with -N: on each node): {mem_units}. The job "
        "waits for a node with "
        "that much free and is held to it (a container's limit; a bare process's "
        "cgroup, or its data size where the host gives no cgroup); killed for memory, "
        "it ends OUT_OF_MEMORY. 0 (all of a node's memory) is not supported",
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
        "process) or the submit dir. A regular file or /dev/null (not a FIFO or device). "
        "The head keeps its own copy for `gbatch logs`",
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
    add_node_options(p)
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
        if nargs == "?":
            p.add_argument(
                *names,
                dest=dest,
                action=IgnoredFlag,
                help=f"accepted, no effect here: {effect} ({names[-1]}={metavar} too)",
            )
        else:
            p.add_argument(
                *names, dest=dest, metavar=metavar, help=f"accepted, no effect here: {effect}"
            )
    p.add_argument("-v", "--verbose", action="count", help="accepted, no effect here")


# The ways Slurm asks for GPUs: -G/--gpus in all (per node on one node), the others per
# node (--gpus-per-task: times the tasks on each node).
GPU_OPTIONS = {
    "gpus": "--gpus",
    "gres": "--gres",
    "gpus_per_node": "--gpus-per-node",
    "gpus_per_task": "--gpus-per-task",
}


class IgnoredFlag(argparse.Action):
    """An option without effect whose Slurm value is optional: given after '=' only.

    Slurm's getopt takes an optional argument only as `--no-kill=off`; argparse's
    `nargs="?"` also took the next word, so `sbatch --no-kill job.sh` lost its job file.
    This takes no word; the parsers (OptionParser, cli/_parser.py's) read
    `--no-kill=off` as the option alone (`value_after_equals`): its value means nothing
    here."""

    value_after_equals = True

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)


class OptionProblem(Exception):
    """An option OptionParser could not take; str() is argparse's message."""


class OptionParser(argparse.ArgumentParser):
    """A parser of sbatch's options that raises its problems instead of printing them.

    For a batch script's #SBATCH lines, and for options written after a YAML job file.
    An unknown option's problem names the nearest known one.
    """

    def _parse_optional(self, arg_string: str) -> Any:
        # `--no-kill=off`: an IgnoredFlag alone (cli/_parser.py's parser does the same).
        name, equals, _ = arg_string.partition("=")
        if equals and getattr(self._option_string_actions.get(name), "value_after_equals", False):
            arg_string = name
        return super()._parse_optional(arg_string)

    def error(self, message: str) -> NoReturn:
        unknown = message.partition("unrecognized arguments: ")[2].split()
        if unknown:  # options after a YAML job file: the nearest one, as on the line
            message += did_you_mean(unknown[0], option_strings(self))
        raise OptionProblem(message)


def options_parser(prog: str) -> OptionParser:
    """A parser of the job's options alone, each left unset when not given (SUPPRESS).

    For #SBATCH lines, and the words after a job file.
    """
    parser = OptionParser(
        prog=prog, add_help=False, argument_default=argparse.SUPPRESS, allow_abbrev=False
    )
    add_job_options(parser)
    parser.add_argument("--parsable", action="store_true")
    parser.add_argument("--test-only", dest="test_only", action="store_true")
    return parser


@functools.cache
def text_parser() -> OptionParser:
    """request_for_text's parser of a submit's text, built once and shared.

    Building it was most of an API submit (bench/bench_api.py). Parsing reads the parser
    and changes nothing on it, and no option has a mutable default, so the API's threads
    share it. A problem is raised (OptionProblem), never printed: the caller is a server,
    not a terminal.
    """
    parser = OptionParser(prog="gbatch sbatch", add_help=False, allow_abbrev=False)
    parser.add_argument("file", nargs="?")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    add_job_options(parser)
    parser.add_argument("--test-only", dest="test_only", action="store_true")
    return parser


@functools.cache
def no_options() -> tuple[dict[str, Any], tuple[str, ...]]:
    """What text_parser makes of no options, parsed once, and which of its values are lists.

    Parsed once because argparse was a good share of the API's parsing per submit; the
    lists are named so that each request gets its own.
    """
    values = dict(vars(text_parser().parse_args([])))
    return values, tuple(key for key, value in values.items() if isinstance(value, list))
