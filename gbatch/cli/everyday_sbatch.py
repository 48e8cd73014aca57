"""`gbatch sbatch` as most calls write it, on everyday's fast path (gbatch/cli/everyday.py).

The lines it takes: `sbatch [OPTIONS] --wrap CMD` and `sbatch [OPTIONS] SCRIPT [ARG...]`
(a batch script with `#!` and `#SBATCH` lines; its words after it are its arguments),
where OPTIONS and the script's #SBATCH lines are among -H/--hold, --parsable,
-Q/--quiet, -G/--gpus, --gres=gpu[:TYPE][:N], -t/--time, -J/--job-name, -p/--partition,
-q/--qos, -o/--output, -e/--error, -c/--cpus-per-task, --mem, -a/--array,
-d/--dependency, -D/--chdir, --nice, --open-mode, --mail-type, --mail-user, --comment,
--export, --signal, --requeue (the default), and -N/--nodes, -n/--ntasks and
--ntasks-per-node of one node and one task (a university template's 20 lines), each
read as argparse reads it (everyday_words.read_options). Any GPU type, -a, -d, --signal
and a -o/-e with a directory part load re; the rest of the common lines do not.
Each value is read by the full path's own reader (gbatch/jobspec/optvalues.py; -d's is
slurmopts'), the spec is the one build_submit makes of it, and the request is sent,
output printed and warnings given as sbatch.run does.

Anything else declines (returns None before anything is sent) and argparse's path runs
the same line and says what is wrong as ever: another option or #SBATCH line, a value a
reader refuses, a job file (YAML), a script from stdin, a script that is not a regular
file of at most 1 MiB of UTF-8 text (a FIFO is never opened to wait on it: a directory,
a device, a file that cannot be read all decline), a script the full path refuses, an
output file that could not be written. After the request is sent, the daemon's refusal
names the #SBATCH line that gave the value, as sbatch.run does.
tests/unit/test_sbatch_everyday.py holds the two paths equal.
"""

from __future__ import annotations

import os
import sys

from gbatch.cli.everyday_words import read_options

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    Exchange = Callable[[dict[str, Any]], dict[str, Any] | None]  # everyday.exchange's
    from gbatch.jobspec.batchscript import BatchScript

# sbatch's options this path reads, by their dest in sbatch's parser: the flags, and the
# job's options that take a value (the command line's and the #SBATCH lines').
SBATCH_FLAGS = {"-H": "hold", "--hold": "hold", "--parsable": "parsable", "-Q": "quiet"}
SBATCH_FLAGS |= {"--quiet": "quiet", "--requeue": "requeue"}  # --requeue: the default
JOB_VALUES = {"-G": "gpus", "--gpus": "gpus", "--gres": "gres", "-t": "time_limit"}
JOB_VALUES |= {"--time": "time_limit", "-J": "name", "--job-name": "name"}
JOB_VALUES |= {"-p": "partition", "--partition": "partition", "-q": "qos", "--qos": "qos"}
JOB_VALUES |= {"-o": "output", "--output": "output", "-e": "error", "--error": "error"}
JOB_VALUES |= {"-c": "cpus", "--cpus-per-task": "cpus", "--mem": "mem", "-a": "array"}
JOB_VALUES |= {"--array": "array", "-d": "dependency", "--dependency": "dependency"}
JOB_VALUES |= {"-D": "workdir", "--chdir": "workdir", "--nice": "nice"}
JOB_VALUES |= {"--open-mode": "open_mode", "--mail-type": "mail_type", "--comment": "comment"}
JOB_VALUES |= {"--mail-user": "mail_user", "-N": "nodes", "--nodes": "nodes", "-n": "ntasks"}
JOB_VALUES |= {"--ntasks": "ntasks", "--ntasks-per-node": "ntasks_per_node"}
JOB_VALUES |= {"--export": "export", "--signal": "signal"}
SBATCH_VALUES = {"--wrap": "wrap", **JOB_VALUES}
# How build_spec names each option in its refusals (spec.OVERRIDE_OPTION's).
_LABELS = {"name": "-J/--job-name", "time_limit": "-t/--time", "partition": "-p/--partition"}
_LABELS |= {"qos": "-q/--qos", "output": "-o/--output", "error": "-e/--error", "mem": "--mem"}
_LABELS |= {"cpus": "-c/--cpus-per-task", "dependency": "-d/--dependency"}
_LABELS |= {"workdir": "-D/--chdir", "nice": "--nice", "open_mode": "--open-mode"}
_LABELS |= {"mail_type": "--mail-type", "mail_user": "--mail-user", "comment": "--comment"}


def read_line(words: list[str]) -> dict[str, Any] | None:
    """sbatch's `words` as argparse reads them, for this path's options; None for others.

    read_options' {dest: True} and {dest: [value, ...]}, with "file" (the first word
    that is not an option: the script) and "script_args" (every word after it). Not a
    line with `--` anywhere: argparse drops it, even among the script's words."""
    if "--" in words:
        return None
    at = 0
    while at < len(words):
        word = words[at]
        if word[:1] not in ("", "-"):
            break  # the script: argparse's `file`, and every word after it its arguments
        at += 2 if word in SBATCH_VALUES else 1
    found = read_options(words[:at], SBATCH_FLAGS, SBATCH_VALUES)
    if found is None:
        return None
    if at < len(words):
        found["file"] = words[at]
        found["script_args"] = words[at + 1 :]
    return found


def sbatch_run(words: list[str], exchange: Exchange) -> Callable[[], int | None] | None:
    """everyday's run() of sbatch `words`; None for a line this path does not read.

    It sends with `exchange` (everyday.exchange)."""
    values = read_line(words)
    if values is None or ("wrap" in values) == ("file" in values):
        return None  # neither (stdin) or both (the full path's refusal)
    return lambda: run_sbatch(values, os.environ, exchange)


def run_sbatch(values: dict[str, Any], environ: Mapping[str, str], send: Exchange) -> int | None:
    """sbatch.run for read_line's `values`: the same request, output and warnings.

    None declines, as everyday's run()."""
    try:
        submit_dir = os.getcwd()
    except OSError:
        return None
    built = submit_request(values, environ, submit_dir)
    if built is None:
        return None
    request, script, lines, flags = built
    try:
        reply = send(request)
    except Exception as err:
        from gbatch.protocol.client import RequestFailed

        located = err
        if isinstance(err, RequestFailed) and script is not None:
            located = _located(err, script, lines)
        if located is err:
            raise
        raise located from err
    if reply is None:
        return None
    ids = reply["ids"]
    spec = request["spec"]
    if "output" not in spec:  # the default slurm-%j.out: where the job starts
        warn_unwritable(str(spec["workdir"]))
    if not flags.get("quiet"):
        # An array answers with its id (its first task's; tasks are N_K), as Slurm.
        print(ids[0] if flags.get("parsable") else f"Submitted batch job {ids[0]}", flush=True)
    return 0


def _located(err: Any, script: BatchScript, lines: dict[str, int]) -> Exception:
    """sbatch.run's RequestFailed for a daemon's refusal of a value an #SBATCH line gave:
    the script's file and line before it (`err` itself for another refusal)."""
    from gbatch.jobspec.submit import line_of

    line = line_of(err.message.split(":", 1)[0], lines)
    if line is None:
        return err  # type: ignore[no-any-return]
    from gbatch.jobspec.batchscript import DIRECTIVE, ScriptError
    from gbatch.protocol.client import RequestFailed

    located = ScriptError(script.location, line, f"{DIRECTIVE} {err.message}")
    return RequestFailed(err.kind, str(located))


def submit_request(
    values: dict[str, Any], environ: Mapping[str, str], submit_dir: str
) -> tuple[dict[str, Any], BatchScript | None, dict[str, int], dict[str, bool]] | None:
    """The submit request build_submit makes of read_line's `values`, as a plain dict.

    With it: the batch script (None for --wrap), the #SBATCH line that set each option
    taken from it, and the flags (-H, --parsable, -Q) given. None for anything
    build_submit would refuse (which then says why) or this path does not read."""
    options = {dest: given[-1] for dest, given in values.items() if dest in _JOB_DESTS}
    flags = {dest: True for dest in ("hold", "parsable", "quiet") if values.get(dest)}
    script: BatchScript | None = None
    lines: dict[str, int] = {}
    if "file" in values:
        script = _script(values["file"])
        if script is None:
            return None
        taken = _directives(script)
        if taken is None:
            return None
        for dest, (value, line) in taken.items():
            if dest in options or dest in flags:
                continue  # the command line wins
            if dest in _FLAG_DESTS:
                flags[dest] = True
            else:
                options[dest] = value
            lines[dest] = line
        command: str | list[str] = script.command(list(values["script_args"]))
        default_name = os.path.basename(script.name)
    else:
        command = values["wrap"][-1]
        default_name = "wrap"
    from gbatch.jobspec.errors import SpecError

    try:
        spec = _spec(options, command, default_name, submit_dir)
    except SpecError:
        return None  # the full path's to refuse, naming the option or the line
    if spec is None:
        return None
    request = _request(spec, bool(flags.get("hold")), environ, options)
    return None if request is None else (request, script, lines, flags)


_JOB_DESTS = frozenset(JOB_VALUES.values()) | {"wrap"}
_FLAG_DESTS = frozenset(SBATCH_FLAGS.values())


def _script(path: str) -> BatchScript | None:
    """The batch script at `path` as _job_source reads it; None where it is not plainly
    one: not a regular file of at most 1 MiB of UTF-8 text (never opened to block on a
    FIFO), a job file (YAML), a script parse_script refuses."""
    import stat

    from gbatch.jobspec.optvalues import MAX_FILE_BYTES

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        return None
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        return None
    from gbatch.jobspec.batchscript import ScriptError, looks_like_script, parse_script

    if not looks_like_script(text, path):
        return None
    try:
        return parse_script(text, path)
    except ScriptError:
        return None


def _directives(script: BatchScript) -> dict[str, tuple[Any, int]] | None:
    """_apply_directives' reading of the script's #SBATCH lines: each option's value
    (True for a flag) and its line, a later line winning; None for a line with any
    other option or word (--wrap among them)."""
    taken: dict[str, tuple[Any, int]] = {}
    for directive in script.directives:
        found = read_options(list(directive.words), SBATCH_FLAGS, JOB_VALUES)
        if found is None:
            return None
        for dest, value in found.items():
            taken[dest] = (value if value is True else value[-1], directive.line)
    return taken


def _spec(
    options: dict[str, str], command: str | list[str], default_name: str, submit_dir: str
) -> dict[str, Any] | None:
    """build_spec's spec of `options` and `command`, as to_wire writes it and
    build_submit sends it; SpecError (or None) for what the full path refuses."""
    from gbatch.jobspec import optvalues as read

    if not all(_utf8(value) for value in [*options.values(), command]):
        return None  # _check_utf8's refusal
    if "gpus" in options and "gres" in options:
        return None  # _gpus_option's refusal
    kind, gpus = None, None
    if "gres" in options:
        if read.parse_shards(options["gres"]) is not None:
            return None  # a share of one GPU: the full path's
        kind, gpus = read.parse_gres(options["gres"])
    elif "gpus" in options:
        kind, gpus = read.parse_gpus(options["gpus"], "--gpus")
    if kind is not None and not gpus:
        return None  # a type but no GPUs: build_spec's refusal
    # One node and one task (a template's `-N 1`, `-n 1`): a job across nodes or with
    # more tasks is the full path's (nodeopts.settle_nodes, -G over the nodes).
    if "nodes" in options and read.check_nodes(options["nodes"], "-N/--nodes") != 1:
        return None
    for key, label in (("ntasks", "-n/--ntasks"), ("ntasks_per_node", "--ntasks-per-node")):
        if key in options and read.int_option(options[key], label) != 1:
            return None
    workdir = options.get("workdir")
    if workdir is not None and not os.path.isabs(workdir):
        workdir = os.path.join(submit_dir, workdir)  # as Slurm: from here
    field = _LABELS.__getitem__
    name = options.get("name")
    spec: dict[str, Any] = {
        "name": (
            read.safe_default_name(default_name)
            if name is None
            else read.check_name(name, field("name"))
        ),
        "command": list(read.check_command(command, "--wrap")),
    }
    if gpus:
        spec["gpus"] = read.check_gpus(gpus, "--gpus")
    if "time_limit" in options:
        limit = read.check_time_limit(options["time_limit"], field("time_limit"))
        if limit is not None:
            spec["time_limit"] = limit
    if workdir is not None:
        spec["workdir"] = read.check_workdir(workdir, field("workdir"))
    if "nice" in options:
        nice = read.check_nice(read.int_option(options["nice"], field("nice")), field("nice"))
        if nice:
            spec["nice"] = nice
    if "partition" in options:
        spec["partition"] = read.check_partition(options["partition"], field("partition"))
    for key in ("output", "error"):
        if key in options:
            spec[key] = read.check_output_path(options[key], field(key))
    if "open_mode" in options:
        spec["open_mode"] = read.check_open_mode(options["open_mode"], field("open_mode"))
    if "ntasks" in options:
        spec["ntasks"] = 1
    if "cpus" in options:
        cpus = read.int_option(options["cpus"], field("cpus"))
        spec["cpus"] = read.check_cpus(cpus, field("cpus"))
    if "mem" in options:
        spec["mem"] = read.check_mem(options["mem"], field("mem"))
    if "dependency" in options:
        from gbatch.jobspec.slurmopts import check_dependency  # rare: its grammar's cost

        spec["dependency"] = check_dependency(options["dependency"], field("dependency"))
    if "export" in options:
        spec["export"] = read.parse_export(options["export"], "--export").mode_text
    if "signal" in options:
        spec["signal"] = read.parse_signal(options["signal"], "--signal").text
    if "mail_type" in options:
        spec["mail_type"] = read.check_mail_type(options["mail_type"], field("mail_type"))
    if "mail_user" in options:
        spec["mail_user"] = read.check_mail_user(options["mail_user"], field("mail_user"))
    if "comment" in options:
        spec["comment"] = read.check_comment(options["comment"], field("comment"))
    if kind is not None:
        spec["gpu_type"] = kind
    if "ntasks_per_node" in options:
        spec["ntasks_per_node"] = 1
    if "qos" in options:
        spec["qos"] = read.check_qos(options["qos"], field("qos"))
    if "array" in options:
        read.array_request(options["array"])  # refused here, before anything is sent
    start = spec.get("workdir", submit_dir)  # submit.start_dir's
    outputs = ((spec.get("output"), field("output")), (spec.get("error"), field("error")))
    read.check_output_dirs(outputs, spec["name"], start)
    if "workdir" not in spec:
        spec["workdir"] = submit_dir  # as Slurm: a job starts where it was submitted
    from _socket import gethostname  # socket.gethostname itself, without socket.py

    spec["submit_dir"] = submit_dir
    spec["submit_host"] = gethostname()
    return spec


def _utf8(value: str | list[str]) -> bool:
    """Whether `value` (text or words) can be written as UTF-8 (no lone surrogate)."""
    try:
        for text in [value] if isinstance(value, str) else value:
            text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _request(
    spec: dict[str, Any], held: bool, environ: Mapping[str, str], options: dict[str, str]
) -> dict[str, Any] | None:
    """The submit request of `spec`, as requests.encode_request writes build_submit's;
    None for an environment too large to export (check_submit_env_size's refusal)."""
    from gbatch.core.submitenv import MAX_SUBMIT_ENV_BYTES, submit_env_bytes
    from gbatch.jobspec.optvalues import Export, array_request, exported_env, parse_export

    # --export's, else ALL: a bare job's default (a container's is the full path's).
    given = options.get("export")
    export = Export(everything=True) if given is None else parse_export(given, "--export")
    submit_env = exported_env(export, environ)
    if submit_env_bytes(submit_env) > MAX_SUBMIT_ENV_BYTES:
        return None
    array = options.get("array")
    if array is not None:
        array = array_request(array)
    return {
        "op": "submit",
        "spec": spec,
        "secret_env": {},
        "count": 1,
        "held": held,
        "submit_env": submit_env or None,
        "array": array,
        "test_only": False,
        "sweep": None,
        "name_template": None,
    }


def wrap_request(
    wrap: str, held: bool, submit_dir: str, environ: Mapping[str, str]
) -> dict[str, Any] | None:
    """The submit request of `sbatch --wrap CMD` given no other job option, as a plain dict.

    -H, --parsable and -Q aside (sbatch.run's _everyday_request, for a line argparse
    read). submit_request's, for --wrap alone."""
    built = submit_request({"wrap": [wrap], "hold": held}, environ, submit_dir)
    return None if built is None else built[0]


def warn_unwritable(directory: str) -> None:
    """Print sbatch's warning when the submitter cannot write `directory`, the job's output's.

    The job's slurm-%j.out goes there. It is not refused, as Slurm does not refuse it.
    """
    if not os.access(directory, os.W_OK | os.X_OK):
        print(
            f"gbatch sbatch: warning: you cannot write in {directory}, so the job's "
            "slurm-%j.out cannot be written there; `gbatch logs ID` keeps its output. "
            "Submit from a directory you can write, or pass -o FILE",
            file=sys.stderr,
        )
