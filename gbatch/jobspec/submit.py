"""A job file's or batch script's text and sbatch's options -> the submit request.

The request (a Submission: wire.Submit's fields) is built the one way for every front:
`gbatch sbatch`, the HTTP API and its web page, the MCP server's submit tool.

Bad input is BadSubmit, one line naming the option, the job-file key or the #SBATCH
line (`job.sh:7: #SBATCH --mem: ...`). The options themselves are
gbatch.jobspec.sbatchopts'; validating the job, gbatch.jobspec.spec's.
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from gbatch.core.suggest import did_you_mean, option_strings
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.optvalues import array_request, check_output_dirs
from gbatch.jobspec.optvalues import int_option as _int_option
from gbatch.jobspec.sbatchopts import (
    GPU_OPTIONS,
    OptionProblem,
    no_options,
    options_parser,
    text_parser,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from gbatch.jobspec.batchscript import BatchScript
    from gbatch.jobspec.sweep import Sweep

# Imported where used, not here: batch scripts (batchscript), job files and validation
# (spec), the model. `sbatch --wrap CMD` with no other job option needs none of them
# (cli/everyday.py), and they are most of a submit's start-up.


@dataclass(frozen=True)
class Submission:
    """A submit request's fields: the spec as sent, the secret values, what else it asks.

    They are wire.Submit's, which a front makes of them: `wire.Submit(**submission.fields())`.
    Beside the spec come the secret values and what the submit asks besides the job.
    """

    spec: dict[str, Any]
    secret_env: dict[str, str]
    held: bool
    submit_env: dict[str, str] | None
    array: str | None
    test_only: bool
    sweep: dict[str, Any] | None
    name_template: str | None

    def fields(self) -> dict[str, Any]:
        """wire.Submit's keyword arguments."""
        return dict(self.__dict__)


NO_JOB = 'no job file given. Pass a job file or a batch script, pipe one in, or --wrap "CMD"'


def _gpus_option(
    args: argparse.Namespace, data: Mapping[str, object] | None
) -> tuple[str | None, int | None, int | None]:
    """The GPUs an option asks for, on each node: (type or None for any, count, shards).

    One of --gpus, --gres, --gpus-per-node, --gpus-per-task; (None, None, None) if none.
    -G/--gpus counts the job's GPUs in all: over -N K nodes, N/K on each (N must divide
    by K). --gpus-per-task: N times the tasks on each node. Slurm's --gres=shard[:TYPE]:N
    asks N shards of one GPU (count None: the daemon makes them its share)."""
    given = [dest for dest in GPU_OPTIONS if getattr(args, dest, None) is not None]
    if len(given) > 1:
        first, second = (GPU_OPTIONS[dest] for dest in given[:2])
        raise BadSubmit(f"{first} and {second} both given. Use one")
    if not given:
        return None, None, None
    # Imported past the common case (no option given; every HTTP API submit): an import
    # statement costs time even when the module is loaded.
    from gbatch.jobspec.slurmopts import parse_gpus, parse_gres, parse_shards

    (dest,) = given
    value = getattr(args, dest)
    if dest == "gres":
        shards = parse_shards(value)
        if shards is not None:
            return shards[0], None, shards[1]
        return (*parse_gres(value), None)
    nodes = _nodes_asked(args, data) or 1
    kind, count = parse_gpus(value, GPU_OPTIONS[dest], nodes if dest == "gpus" else 1)
    if dest == "gpus" and count % nodes:
        from gbatch.jobspec.spec import SpecError

        raise SpecError(
            "--gpus",
            f"{count} GPUs in all do not split evenly over {nodes} nodes (-N/--nodes). "
            f"Give a multiple of {nodes}, or --gpus-per-node N for N on each node",
        )
    if dest == "gpus":
        count //= nodes
    elif dest == "gpus_per_task":
        count *= _tasks_on_each_node(args, data, nodes)
    return kind, count, None


def _nodes_asked(args: argparse.Namespace, data: Mapping[str, object] | None) -> int | None:
    """The node count -N (or the job file's `nodes:`) asks for; None when neither does."""
    from gbatch.jobspec.nodeopts import check_nodes

    if args.nodes is not None:
        return check_nodes(args.nodes, "-N/--nodes")
    if data and data.get("nodes") is not None:
        return check_nodes(data["nodes"], "nodes")
    return None


def _tasks_on_each_node(
    args: argparse.Namespace, data: Mapping[str, object] | None, nodes: int
) -> int:
    """The tasks on each node, for --gpus-per-task: --ntasks-per-node, else -n over the
    nodes (they must share them evenly: every node gets the same GPUs), else 1."""
    from gbatch.jobspec.nodeopts import check_ntasks, check_ntasks_per_node

    file = data or {}
    per_node = _int_option(args.ntasks_per_node, "--ntasks-per-node")
    if per_node is None and file.get("ntasks_per_node") is not None:
        per_node = check_ntasks_per_node(file["ntasks_per_node"], "ntasks_per_node")
    if per_node is not None:
        return per_node
    ntasks = _int_option(args.ntasks, "-n/--ntasks")
    if ntasks is None and file.get("ntasks") is not None:
        ntasks = check_ntasks(file["ntasks"], "ntasks")
    if ntasks is None:
        return 1
    if ntasks % nodes:
        from gbatch.jobspec.spec import SpecError

        raise SpecError(
            "--gpus-per-task",
            f"{ntasks} tasks (-n) do not share {nodes} nodes evenly, so their nodes would "
            "need different GPUs. Give --ntasks-per-node, or --gpus-per-node",
        )
    return ntasks // nodes


def _count_of(gpus: object) -> object:
    """A job file's `gpus` as a count where it is one (`a100:2`: 2), else as it is."""
    if isinstance(gpus, str) and ":" in gpus:
        count = gpus.rpartition(":")[2].strip()
        return int(count) if count.isdigit() else gpus
    return gpus


def _gpu_count(
    gpus: int | None, args: argparse.Namespace, data: Mapping[str, object] | None
) -> object:
    """The job's GPU count for --cpus-per-gpu: the option's, else the job file's, else 1
    for a share of one GPU (--gpu-mem, `gpu_mem:`)."""
    if gpus is not None:
        return gpus
    file = data or {}
    given = _count_of(
        file.get("gpus") if file.get("gpus") is not None else file.get("gpus_per_node")
    )
    if given is None and (args.gpu_mem is not None or (data or {}).get("gpu_mem") is not None):
        return 1
    return given


def _cpus_option(args: argparse.Namespace, gpus: object) -> int | None:
    """-c, or --cpus-per-gpu times the GPUs (Slurm's two ways; they exclude each other)."""
    cpus = _int_option(args.cpus, "-c/--cpus-per-task")
    per_gpu = _int_option(getattr(args, "cpus_per_gpu", None), "--cpus-per-gpu")
    if per_gpu is None:
        return cpus
    if cpus is not None:
        raise BadSubmit("-c/--cpus-per-task and --cpus-per-gpu both given. Use one")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise BadSubmit(
            "--cpus-per-gpu: the job asks for no GPUs. Use -c N, or ask for GPUs (--gpus N)"
        )
    return per_gpu * gpus


def secret_env_option(names: list[str] | None, environ: Mapping[str, str]) -> dict[str, str] | None:
    """The values --secret-env NAME... names, read from the submitter's own `environ`.

    Read there so that a value never sits in argv (ps) or shell history. None without
    names; SpecError for a name not set in `environ`.
    """
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


def _apply_directives(args: argparse.Namespace, script: BatchScript) -> dict[str, int]:
    """Fill the options the command line left unset from the script's #SBATCH lines
    (the command line wins; a later line wins over an earlier one). ScriptError for a
    line gbatch cannot take, naming it. Returns the line that set each option taken
    from the script (by dest), for the refusals found later (a value build_spec
    checks) to name it too."""
    from gbatch.jobspec.batchscript import DIRECTIVE, ScriptError

    parser = options_parser(DIRECTIVE)
    taken: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for directive in script.directives:
        try:
            found, extra = parser.parse_known_args(list(directive.words), argparse.Namespace())
        except OptionProblem as err:
            raise ScriptError(script.location, directive.line, f"{DIRECTIVE}: {err}") from None
        if extra:
            raise ScriptError(
                script.location,
                directive.line,
                f"{DIRECTIVE} {extra[0]}: not an option gbatch knows"
                f"{did_you_mean(extra[0], option_strings(parser))}. Remove the line, or "
                "see `gbatch sbatch --help` for the options gbatch takes",
            )
        # Not given: absent (SUPPRESS), but -H, -Q and -W declare a None default, which
        # a later line must not set over an earlier line's flag.
        values = {dest: value for dest, value in vars(found).items() if value is not None}
        if "wrap" in values:
            raise ScriptError(
                script.location,
                directive.line,
                f"{DIRECTIVE} --wrap: a batch script is its own command. Remove the line",
            )
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


def line_of(key: str, lines: dict[str, int]) -> int | None:
    """The #SBATCH line that gave job-file key `key` its value, or None.

    Found by the option's dest: several options give `gpus` (and two give `cpus`), and
    the latest line among them counts.
    """
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


def wrap_with_file(file: str) -> str:
    """The refusal of a job file or script given with --wrap as well.

    Neither silently wins, as with Slurm's sbatch, which takes no script with --wrap.
    """
    return (
        f"--wrap: {file} is given too, and both name the job's command. Drop {file}, "
        "or drop --wrap (a job file's command is its `command:` key)"
    )


def embedded_script(data: dict[str, object], args: argparse.Namespace) -> BatchScript | None:
    """A job file's `script:`, taken out of `data`, as a BatchScript; None without one.

    A batch script as a file holds one, run by its #! line (bash without one), its
    #SBATCH lines read as a file's are. SpecError for an empty script, or one given
    beside `command:` or --wrap.
    """
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
        key = keys.get(dest, dest)
        if data.get(key) is not None or (key == "gpus" and data.get("gpus_per_node") is not None):
            setattr(args, dest, None)
            del lines[dest]


def start_dir(spec: Any, submit_dir: str) -> str:
    """Where a bare job starts and its relative output paths begin.

    Its -D, else where it was submitted; a container job always starts from `submit_dir`
    here, its workdir being a path inside the container.
    """
    return str(spec.workdir) if spec.image is None and spec.workdir else submit_dir


def request_for_text(
    text: str | None,
    name: str,
    options: Sequence[str] = (),
    *,
    submit_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Submission:
    """The submit request `gbatch sbatch [OPTIONS] FILE` makes of a job's text.

    The text is a job file's (YAML or JSON) or a batch script's (None: `options` hold
    --wrap), `name` standing for the file's name. For a submitter who is not here (the
    HTTP API) leave `submit_dir` and `environ` out: nothing is read from this process's
    environment, working directory or files, and the job starts in its user's home
    unless it names a workdir. The MCP server passes its own (its user's, as the CLI's).
    BadSubmit (exit 2's one line) for a job that cannot be queued.
    """
    if options:
        try:
            args = text_parser().parse_args(list(options))
        except OptionProblem as err:
            raise BadSubmit(str(err)) from None
    else:  # the API's every submit: the parse's result, fresh (build_submit sets on it)
        values, lists = no_options()
        args = argparse.Namespace()
        fields = vars(args)  # filled as a dict: Namespace(**values) set each one by one
        fields.update(values)
        for key in lists:
            fields[key] = list(values[key])
    stray = [word for word in [args.file, *args.script_args] if word is not None]
    if stray:
        raise BadSubmit(f"{stray[0]!r} is not an option. Give options alone")
    if text is None:
        if args.wrap is None:
            raise BadSubmit(NO_JOB)
        return build_submit(
            args, lambda: (None, None), submit_dir=submit_dir, environ=environ or {}
        )[0]
    if args.wrap is not None:
        raise BadSubmit(wrap_with_file(name))
    args.file = name

    def source() -> tuple[dict[str, object] | None, BatchScript | None]:
        from gbatch.jobspec.batchscript import looks_like_script, parse_script
        from gbatch.jobspec.reader import parse_job_text

        if looks_like_script(text, name):
            return None, parse_script(text, name)
        data = parse_job_text(text, name)
        return data, embedded_script(data, args)

    return build_submit(args, source, submit_dir=submit_dir, environ=environ or {})[0]


def build_submit(
    args: argparse.Namespace,
    job_source: Callable[[], tuple[dict[str, object] | None, BatchScript | None]],
    *,
    submit_dir: str | None,
    environ: Mapping[str, str],
    default_name: str | None = None,
) -> tuple[Submission, Any, BatchScript | None, dict[str, int]]:
    """The submit request for `args` and the job `job_source` reads, with what it was made of.

    Returned with the request: the spec it holds, the batch script, and the #SBATCH line
    that set each option. `submit_dir`: where the submitter is (their files are checked
    and read there); None for one who is not on this machine (request_for_text).
    `default_name`: the job's name when none is given (srun's: its command's), instead
    of the script's or file's. BadSubmit for bad input.
    """
    # Deferred: yaml and validation are needed by sbatch alone.
    from gbatch.jobspec.batchscript import ScriptError
    from gbatch.jobspec.slurmopts import Export, check_submit_env_size, exported_env
    from gbatch.jobspec.spec import (
        OVERRIDE_OPTION,
        SpecError,
        build_spec,
        export_of,
        secret_env_values,
    )
    from gbatch.jobspec.sweep import check_templates

    script: BatchScript | None = None
    lines: dict[str, int] = {}
    try:
        data, script = job_source()
        if script is not None:
            lines = _apply_directives(args, script)
            _file_keys_win(data, lines, args)
        sweep, name_template = _sweep_of(data, args, submit_dir is not None)
        if args.workdir is not None and not os.path.isabs(args.workdir) and submit_dir:
            args.workdir = os.path.join(submit_dir, args.workdir)  # as Slurm: from here
        command: str | list[str] | None = args.wrap
        if script is not None:
            # After a job file, words are options (its script takes no arguments).
            command = script.command(list(args.script_args) if data is None else [])
        gpu_type, gpus, shards = _gpus_option(args, data)
        overrides = {
            "name": args.name,
            "gpus": gpus,
            "gpu_type": gpu_type,
            "gpu_shards": shards,
            "constraint": args.constraint,
            "time_limit": args.time_limit,
            "command": command,
            "image": args.image,
            "retries": _int_option(args.retries, "--retries"),
            "requeue": args.requeue,
            "priority": _int_option(args.priority, "--priority"),
            "nice": _int_option(args.nice, "--nice"),
            "workdir": args.workdir,
            "secret_env": secret_env_option(args.secret_env, environ),
            "network": args.network,
            "partition": args.partition,
            "qos": args.qos,
            "cpus": _cpus_option(args, _gpu_count(gpus, args, data)),
            "mem": args.mem,
            "mem_per_gpu": args.mem_per_gpu,
            "mem_per_cpu": args.mem_per_cpu,
            "gpu_mem": args.gpu_mem,
            "dependency": args.dependency,
            "export": args.export,
            "begin": args.begin,
            "signal": args.signal,
            "mail_type": args.mail_type,
            "mail_user": args.mail_user,
            "comment": args.comment,
            "reservation": args.reservation,
            "notify": args.notify,
            "output": args.output,
            "error": args.error,
            "open_mode": args.open_mode,
            "ntasks": _int_option(args.ntasks, "-n/--ntasks"),
            "nodes": args.nodes,
            "ntasks_per_node": _int_option(args.ntasks_per_node, "--ntasks-per-node"),
            "nodelist": args.nodelist,
            "exclude": args.exclude,
            "exclusive": args.exclusive,
        }
        if default_name is not None:
            pass
        elif script is not None and data is None:
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
        spec = _across_nodes(spec, args, data, script)
        secrets = secret_env_values(data, overrides, option_names=OVERRIDE_OPTION)
        # A container job exports nothing unless asked: the host's PATH or
        # LD_LIBRARY_PATH inside an image breaks it (README, "Coming from Slurm").
        export = export_of(data, overrides, option_names=OVERRIDE_OPTION) or Export(
            everything=spec.image is None
        )
        submit_env = exported_env(export, environ)
        check_submit_env_size(submit_env)
        array: str | None = None
        if args.array is not None:  # refused here, in one line, before anything is sent
            array = array_request(args.array)
        if sweep is not None:
            check_templates(spec.command, sweep.names, name_template, spec.name)
        if submit_dir is not None:
            check_output_dirs(
                (
                    (spec.output, "output" if args.output is None else "-o/--output"),
                    (spec.error, "error" if args.error is None else "-e/--error"),
                ),
                spec.name,
                start_dir(spec, submit_dir),
            )
    except SpecError as err:
        raise BadSubmit(_on_its_line(err, script, lines)) from err
    except ScriptError as err:
        raise BadSubmit(str(err)) from err
    wire_spec = spec.to_wire()
    if submit_dir is not None:
        if spec.image is None and spec.workdir is None:
            wire_spec["workdir"] = submit_dir  # as Slurm: a job starts where it was submitted
        wire_spec["submit_dir"] = submit_dir
    wire_spec["submit_host"] = socket.gethostname()
    request = Submission(
        spec=wire_spec,
        secret_env=secrets,
        held=bool(args.hold),
        submit_env=submit_env or None,
        array=array,
        test_only=bool(args.test_only),
        sweep=None if sweep is None else sweep.to_wire(),
        name_template=name_template,
    )
    return request, spec, script, lines


def _across_nodes(
    spec: Any, args: argparse.Namespace, data: Mapping[str, object] | None, script: Any
) -> Any:
    """The spec of a job across nodes as its form says it runs there (JobSpec.every_node).

    A job file's command, and any container job, run on every node (dstack's form); a
    batch script (a file's `script:` too) or --wrap runs on the first node, with srun in
    it starting the tasks (Slurm's). -G counted in all needs the node count it was
    divided by: one that -w or -n gave instead of -N is refused (give -N too)."""
    from gbatch.jobspec.spec import SpecError

    if args.gpus is not None and spec.nodes != (_nodes_asked(args, data) or 1):
        raise SpecError(
            "--gpus",
            f"counts the job's GPUs in all, and its {spec.nodes} nodes come from "
            "-w/--nodelist or -n/--ntasks. Give -N/--nodes too, or --gpus-per-node N",
        )
    if spec.nodes > 1 and (spec.image is not None or (data is not None and script is None)):
        return spec.replace(every_node=True)
    return spec


@functools.lru_cache(maxsize=64)
def _file_stem(name: str) -> str:
    """Path(name).stem, kept: the API names every submit's text "api", and pathlib's
    parse of it was a cost to each."""
    return Path(name).stem
