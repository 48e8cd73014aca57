"""The MCP server's tools: each is a request on gbatchd's socket, built by the code the
CLI builds it with, as the user who started the server (SO_PEERCRED, as for any
command). queue and cancel run `gbatch squeue` / `gbatch scancel` in this process, so
their listing and their refusals are the CLI's word for word; submit builds sbatch's
request (cli/sbatch.request_for_text, the HTTP API's too); why-pending and logs read
what `scontrol show job`, `sprio` and `logs` read.

A tool answers text. A refusal (bad input gbatch itself checks, the daemon's no, no
daemon) raises ToolRefused with gbatch's one line, `gbatch <command>: error: ...`,
which the server sends as a result with isError. Arguments off their JSON Schema are
the server's protocol error (check_arguments, BadArguments).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from gbatch.cli.context import Context
    from gbatch.core.model import Job

MAX_LOG_BYTES = 1 << 20  # one answer's log text at most
DEFAULT_LOG_BYTES = 64 * 1024
T = TypeVar("T")
JOB_ID = "a job id: N, or N_K for task K of array N"


class ToolRefused(Exception):
    """gbatch refused the call: `message` is its one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadArguments(Exception):
    """Arguments that each fit the schema but not together (a protocol error)."""


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any]], list[str]]
    read_only: bool
    destructive: bool = False

    def describe(self) -> dict[str, Any]:
        """The tool as tools/list lists it."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.read_only,
                "openWorldHint": False,
            },
        }


def _schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _words(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


# submit's arguments that are sbatch options, with the option each stands for.
SUBMIT_OPTIONS: dict[str, str] = {
    "name": "--job-name",
    "gpus": "--gpus",
    "time": "--time",
    "partition": "--partition",
    "image": "--image",
    "array": "--array",
    "dependency": "--dependency",
    "workdir": "--chdir",
    "cpus": "--cpus-per-task",
    "mem": "--mem",
    "output": "--output",
    "error": "--error",
}

SUBMIT_SCHEMA = _schema(
    {
        "script": _text(
            "The job as text: a YAML job file (keys as in `gbatch sbatch job.yaml`: command, "
            "gpus, time_limit, image, ...) or a batch script (a #! line, then #SBATCH "
            "lines). Give this or wrap."
        ),
        "wrap": _text(
            "A shell command to run with /bin/sh -c, as sbatch --wrap. Give this or script."
        ),
        "name": _text("the job's name (-J)"),
        "gpus": {"type": "integer", "minimum": 0, "description": "GPUs, on one node (-G)"},
        "time": _text("time limit: MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED (-t)"),
        "partition": _text("the partition (-p); default: the default partition"),
        "image": _text("run in this container image (--image)"),
        "array": _text("an array's task ids, e.g. 0-9 or 1-100%4 (--array)"),
        "dependency": _text("e.g. afterok:12 (-d)"),
        "workdir": _text("where the job starts (-D); relative to the server's directory"),
        "cpus": {"type": "integer", "minimum": 1, "description": "CPUs (-c)"},
        "mem": _text("memory, e.g. 16G (--mem)"),
        "output": _text("stdout file pattern, e.g. slurm-%j.out (-o)"),
        "error": _text("stderr file pattern (-e)"),
        "hold": {"type": "boolean", "description": "queue the job held (-H)"},
        "options": _words(
            'any other `gbatch sbatch` options, one word each, e.g. ["--mem-per-gpu=20G", '
            '"--retries=2"]; these and the arguments above win over the script\'s #SBATCH lines'
        ),
    }
)
QUEUE_SCHEMA = _schema(
    {
        "users": _words("only these users' jobs (squeue -u)"),
        "me": {"type": "boolean", "description": "only my jobs (squeue --me)"},
        "states": _words("only these states, e.g. PENDING, PD, RUNNING; ALL adds finished jobs"),
        "jobs": _words(f"only these jobs; each {JOB_ID}, N_[K-M] or FIRST-LAST"),
        "long": {"type": "boolean", "description": "squeue -l: STATE and TIME_LIMIT columns"},
    }
)
WHY_SCHEMA = _schema({"job": _text(JOB_ID)}, required=("job",))
LOGS_SCHEMA = _schema(
    {
        "job": _text(JOB_ID),
        "tail_lines": {"type": "integer", "minimum": 1, "description": "the log's last N lines"},
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "the first byte to read (default 0); the answer names the next",
        },
        "max_bytes": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LOG_BYTES,
            "description": f"at most this many bytes (default {DEFAULT_LOG_BYTES})",
        },
    },
    required=("job",),
)
CANCEL_SCHEMA = _schema(
    {"jobs": {**_words(f"the jobs; each {JOB_ID}, N_[K-M] or FIRST-LAST"), "minItems": 1}},
    required=("jobs",),
)


def make_tools(ctx: Context) -> dict[str, Tool]:
    """The tools, by name, talking to the daemon of `ctx`."""
    tools = [
        Tool(
            "submit",
            "Submit a job",
            "Queue a job, as `gbatch sbatch` does from the server's working directory: a "
            "YAML job file's or batch script's text (script), or a shell command (wrap), "
            "with sbatch's options. Answers `Submitted batch job N`.",
            SUBMIT_SCHEMA,
            lambda args: [_refusals("sbatch", lambda: submit(ctx, args))],
            read_only=False,
        ),
        Tool(
            "queue",
            "List the queue",
            "Jobs waiting and running, as `gbatch squeue` lists them (JOBID PARTITION NAME "
            "USER ST TIME NODES NODELIST(REASON)); filters by user, state and job id.",
            QUEUE_SCHEMA,
            lambda args: [run_cli(queue_words(args))],
            read_only=True,
        ),
        Tool(
            "why-pending",
            "Why is a job pending",
            "A job's state and the reason squeue and scontrol show for it, what it waits "
            "for, and its place in the scheduler's order of pending jobs.",
            WHY_SCHEMA,
            lambda args: [_refusals("scontrol", lambda: why_pending(ctx, args["job"]))],
            read_only=True,
        ),
        Tool(
            "logs",
            "Read a job's log",
            "A job's output (stdout and stderr, every attempt), as `gbatch logs` prints it: "
            "its last tail_lines lines, or max_bytes from offset. The first text says which "
            "bytes came and the offset to read on from.",
            LOGS_SCHEMA,
            lambda args: _refusals("logs", lambda: read_log(ctx, args)),
            read_only=True,
        ),
        Tool(
            "cancel",
            "Cancel jobs",
            "Cancel jobs as `gbatch scancel` does: a pending job is removed, a running one "
            "stopped (SIGTERM, then SIGKILL after the grace period). Only your own jobs, "
            "unless you are an admin; each refusal is scancel's line.",
            CANCEL_SCHEMA,
            lambda args: [cancel(args["jobs"])],
            read_only=False,
            destructive=True,
        ),
    ]
    return {tool.name: tool for tool in tools}


def _refusals(command: str, action: Callable[[], T]) -> T:
    """action(), with gbatch's refusals as ToolRefused carrying `gbatch <command>`'s
    line (the one main() prints for the same failure)."""
    from gbatch.cli._main import daemon_failure
    from gbatch.cli.exits import CliError

    try:
        return action()
    except CliError as err:
        raise ToolRefused(f"gbatch {command}: error: {err.message}") from err
    except Exception as err:
        known = daemon_failure(err)
        if known is None:
            raise
        raise ToolRefused(f"gbatch {command}: error: {known[0]}") from err


def run_cli(words: list[str]) -> str:
    """`gbatch WORDS` run in this process: what it prints, or ToolRefused with what it
    printed on stderr when it exits non-zero."""
    from gbatch.cli._main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(words)
        except SystemExit as stop:  # a usage error: argparse printed it
            status = stop.code if isinstance(stop.code, int) else 2
    if status != 0:
        said = err.getvalue().strip()
        raise ToolRefused(said or f"gbatch {words[0]}: error: exit status {status}")
    return out.getvalue() + err.getvalue()


def submit_words(args: Mapping[str, Any]) -> list[str]:
    """sbatch's option words for submit's arguments (`--opt=value`: a value that
    starts with '-' stays a value)."""
    words = [f"{option}={args[key]}" for key, option in SUBMIT_OPTIONS.items() if key in args]
    if args.get("hold"):
        words.append("--hold")
    words += args.get("options", [])
    if "wrap" in args:
        words.append(f"--wrap={args['wrap']}")
    return words


def submit(ctx: Context, args: Mapping[str, Any]) -> str:
    from gbatch.cli.sbatch import request_for_text  # deferred: yaml, the spec

    if ("script" in args) == ("wrap" in args):
        raise BadArguments("script, wrap: give one of them (the job's text, or a command)")
    request = request_for_text(
        args.get("script"), "mcp", submit_words(args), submit_dir=os.getcwd(), environ=os.environ
    )
    reply = ctx.client.call(request)
    if "ids" not in reply:  # --test-only among the options: nothing was queued
        import json

        return "Nothing queued (--test-only): " + json.dumps(reply.get("test"))
    return f"Submitted batch job {reply['ids'][0]}"


def queue_words(args: Mapping[str, Any]) -> list[str]:
    words = ["squeue"]
    for key, option in (("users", "--user"), ("states", "--states"), ("jobs", "--jobs")):
        if args.get(key):
            words.append(f"{option}={','.join(args[key])}")
    words += [f"--{flag}" for flag in ("me", "long") if args.get(flag)]
    return words


def cancel(jobs: list[str]) -> str:
    run_cli(["scancel", "--", *jobs])  # prints nothing on success, as Slurm's
    return f"Cancelled {', '.join(jobs)} (a running job is stopped: SIGTERM, then SIGKILL)"


# What a pending job's reason means it waits for (the reasons the planner gives).
WAITS_FOR: dict[str, str] = {
    "Resources": "GPUs (or CPUs, memory) to come free: no node it may use has what it "
    "asks for free now. It starts when running jobs end",
    "Priority": "jobs ahead of it in the scheduler's order; it starts after them, or "
    "sooner if it fits in free GPUs and ends before the next reserved start (backfill)",
    "Dependency": "the jobs its dependency names",
    "DependencyNeverSatisfied": "nothing: its dependency can never be met (a job it "
    "needs failed or was cancelled). Cancel it, or change it with `gbatch scontrol update`",
    "JobHeldUser": "a release: it is held. `gbatch scontrol release ID` lets it run",
    "JobHeldAdmin": "a release by an admin: an admin held it",
    "BeginTime": "its --begin time",
    "NodeDown": "its nodes: the nodes it may use are down (`gbatch sinfo -R` says why)",
    "ReqNodeNotAvail": "its nodes: the nodes it may use are down or drained",
    "QOSMaxJobsPerUserLimit": "your running jobs to end: you run as many as you may",
    "QOSMaxGRESPerUser": "your running jobs to end: they hold as many GPUs as you may "
    "(`gbatch sshare` shows your limits)",
}


def why_pending(ctx: Context, text: str) -> str:
    from gbatch.cli.context import parse_job
    from gbatch.core.model import JobState
    from gbatch.protocol import wire
    from gbatch.render import formatting

    target = parse_job(text, "job")
    reply = ctx.client.call(wire.ShowJob(id=target.job, task=target.single_task))
    job = wire.job_from_wire(reply["job"])
    reason = formatting.reason_text(job)
    lines = [
        f"JobId={target} JobName={job.spec.name} UserId={job.user} "
        f"JobState={job.state.value} Reason={reason}"
    ]
    if job.spec.dependency:
        lines.append(f"Dependency={formatting.dependency_text(job)}")
    if job.state is not JobState.PENDING:
        lines.append(f"Not pending: it is {job.state.value}" + _where(job))
        return "\n".join(lines) + "\n"
    waits = WAITS_FOR.get(reason.split()[0] if reason.split() else reason)
    if waits:
        lines.append(f"Waits for: {waits}.")
    partition = job.spec.partition or "the default partition"
    lines.append(f"Asks for: {job.spec.gpus} GPU(s) on one node in {partition}.")
    lines.append(_place(ctx, job))
    return "\n".join(lines) + "\n"


def _where(job: Job) -> str:
    if job.node:
        gpus = ",".join(map(str, job.gpus)) or "none"
        return f" on node {job.node} (GPUs {gpus})."
    return "."


def _place(ctx: Context, job: Job) -> str:
    """The job's place in the planner's order, as `gbatch sprio -l` ranks it."""
    from gbatch.core.views import JobPriority
    from gbatch.protocol import wire

    reply = ctx.client.call(wire.ShowPriorities())
    ranked = sorted((JobPriority.from_wire(row) for row in reply["jobs"]), key=lambda p: p.rank)
    mine = next((p for p in ranked if p.id == job.id), None)
    if mine is None:
        return (
            "Queue: not among the jobs the scheduler orders now (a held job, or one whose "
            "--begin time is to come, waits outside the order)."
        )
    ahead = [p for p in ranked if p.rank < mine.rank]
    shown = ", ".join(f"{p.id} ({p.user})" for p in ahead[:5])
    more = f" and {len(ahead) - 5} more" if len(ahead) > 5 else ""
    line = (
        f"Queue: place {mine.rank} of {len(ranked)} pending jobs in the scheduler's order "
        "(fair-share, then priority - nice, then submit time; `gbatch sprio -l`)"
    )
    return line + (f"; ahead of it: {shown}{more}." if ahead else "; none is ahead of it.")


def read_log(ctx: Context, args: Mapping[str, Any]) -> list[str]:
    """[a line saying which bytes came, the log's text]."""
    from gbatch.cli.context import parse_job
    from gbatch.protocol import wire

    if "tail_lines" in args and "offset" in args:
        raise BadArguments("tail_lines, offset: give one of them (the end, or a place)")
    target = parse_job(args["job"], "job")
    limit = int(args.get("max_bytes", DEFAULT_LOG_BYTES))
    tail = args.get("tail_lines")
    start = int(args.get("offset", 0))
    at, kept, state, done = start, "", "", False
    while True:
        reply = ctx.client.call(wire.ReadLog(id=target.job, task=target.single_task, offset=at))
        data, at, state, done = reply["data"], reply["offset"], reply["state"], reply["done"]
        kept += data
        if tail is not None:  # the answer is at most `limit` bytes: no more chars are needed
            kept = _last_lines(kept[-limit:], int(tail))
        elif len(kept.encode()) >= limit:
            break
        if done or not data:
            break
    text = kept.encode()
    if tail is not None:
        text = text[-limit:]  # the end: the lines asked for, cut to max_bytes
        first, end = at - len(text), at
    else:
        text = text[:limit]
        first, end = start, start + len(text)
    if end < at:
        over = "more follows"
    elif done:
        over = "the job has ended: that is all"
    else:
        over = "the job is not over: more may come"
    head = f"job {target} {state}: bytes {first}-{end} of its log; next offset {end} ({over})"
    return [head, text.decode(errors="replace")]


def _last_lines(text: str, count: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[-count:]) if len(lines) > count else text


def check_arguments(schema: Mapping[str, Any], arguments: object) -> str | None:
    """What is wrong with `arguments` against a tool's schema (the subset written here:
    an object of strings, integers, booleans and arrays of strings), naming the field;
    None when nothing is."""
    if not isinstance(arguments, dict):
        return f"arguments: give an object, not {_kind(arguments)}"
    properties: Mapping[str, Any] = schema["properties"]
    for name in schema.get("required", ()):
        if name not in arguments:
            return f"{name}: required"
    for name, value in arguments.items():
        if name not in properties:
            return f"{name}: not an argument of this tool (it takes {', '.join(properties)})"
        problem = _value_problem(properties[name], value)
        if problem is not None:
            return f"{name}: {problem}"
    return None


_TYPES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "string": ("a string", lambda v: isinstance(v, str)),
    "integer": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "boolean": ("true or false", lambda v: isinstance(v, bool)),
    "array": ("an array", lambda v: isinstance(v, list)),
}


def _value_problem(schema: Mapping[str, Any], value: object) -> str | None:
    expected, fits = _TYPES[schema["type"]]
    if not fits(value):
        return f"expected {expected}, got {_kind(value)}"
    if isinstance(value, int) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{value} is below the least, {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{value} is above the most, {schema['maximum']}"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"give at least {schema['minItems']}"
        for index, item in enumerate(value):
            problem = _value_problem(schema["items"], item)
            if problem is not None:
                return f"item {index}: {problem}"
    return None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return names.get(type(value), "an array" if isinstance(value, list) else "an object")
