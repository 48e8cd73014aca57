"""The MCP server's tools: each is a request on gbatchd's socket, built as the CLI builds it.

Each is built by the code the CLI builds it with, and sent as the user who started the
server (SO_PEERCRED, as for any command). submit builds sbatch's request
(gbatch.jobspec.submit, the HTTP API's too); queue and cancel send squeue's and
scancel's requests and answer with their text (gbatch.render's table, scancel's refusal
lines); why-pending and logs read what `scontrol show job`, `sprio` and `logs` read;
cluster-status sends `gbatch cluster status`'s request and prints its renderer's text.

A tool answers text. A refusal (bad input gbatch itself checks, the daemon's no, no
daemon) raises ToolRefused with gbatch's one line, `gbatch <command>: error: ...`,
which the server sends as a result with isError. Arguments off their JSON Schema are
the server's protocol error (check_arguments, BadArguments).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from gbatch.core.jobids import JobTarget
    from gbatch.core.model import Job
    from gbatch.protocol.client import Client

MAX_LOG_BYTES = 1 << 20  # one answer's log text at most
DEFAULT_LOG_BYTES = 64 * 1024
T = TypeVar("T")
JOB_ID = "a job id: N, or N_K for task K of array N"


class Context(Protocol):
    """Whom the tools act for: a connection to gbatchd and its user's name.

    The CLI's gbatch.cli.context.Context is one.
    """

    @property
    def client(self) -> Client: ...

    @property
    def me(self) -> str: ...


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
    "qos": "--qos",
    "image": "--image",
    "array": "--array",
    "dependency": "--dependency",
    "workdir": "--chdir",
    "cpus": "--cpus-per-task",
    "mem": "--mem",
    "output": "--output",
    "error": "--error",
    "constraint": "--constraint",
    "gpu_mem": "--gpu-mem",
    "nodes": "--nodes",
    "ntasks_per_node": "--ntasks-per-node",
    "gpus_per_node": "--gpus-per-node",
    "nodelist": "--nodelist",
    "exclude": "--exclude",
    "reservation": "--reservation",
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
        "gpus": {
            "type": "integer",
            "minimum": 0,
            "description": "GPUs in all (-G); with nodes, they must divide evenly over them",
        },
        "nodes": {
            "type": "integer",
            "minimum": 1,
            "description": "nodes the job spans, allocated at once (-N; default 1)",
        },
        "gpus_per_node": {
            "type": "integer",
            "minimum": 0,
            "description": "GPUs on each node (--gpus-per-node); instead of gpus",
        },
        "ntasks_per_node": {
            "type": "integer",
            "minimum": 1,
            "description": "tasks srun starts on each node (--ntasks-per-node)",
        },
        "nodelist": _text("nodes the job must run on, a host list such as gpu[01-02] (-w)"),
        "exclude": _text("nodes the job must not run on, a host list (-x)"),
        "reservation": _text("the reservation to run in (--reservation)"),
        "exclusive": {
            "type": "boolean",
            "description": "hold each node whole: all its GPUs, no other job beside (--exclusive)",
        },
        "gpu_type": _text(
            "only GPUs of this model, e.g. a100 (as --gpus=a100:N; `gbatch sinfo -o %G` "
            "lists the types); with no gpus, one"
        ),
        "constraint": _text("only nodes with these features, e.g. nvlink or a100|h100 (-C)"),
        "gpu_mem": _text(
            "a share of one GPU instead of whole GPUs: this much of its memory, e.g. 20G "
            "(--gpu-mem); on a card the admin made shareable"
        ),
        "time": _text("time limit: MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED (-t)"),
        "partition": _text("the partition (-p); default: the default partition"),
        "qos": _text("the QOS (-q); default normal; `gbatch scontrol show qos` lists yours"),
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

CLUSTER_SCHEMA = _schema(
    {"all": {"type": "boolean", "description": "everyone's links, not only yours (admins)"}}
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
            lambda args: [_refusals("squeue", lambda: queue(ctx, args))],
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
            "cluster-status",
            "Slurm cluster partitions and links",
            "The Slurm cluster partitions this head sends jobs to (up, or down and why) and "
            "your links to them (ok, new, or broken and why: the cluster refused the key), "
            "as `gbatch cluster status` prints them; all: everyone's links (admins).",
            CLUSTER_SCHEMA,
            lambda args: [_refusals("cluster", lambda: cluster_status(ctx, args))],
            read_only=True,
        ),
        Tool(
            "cancel",
            "Cancel jobs",
            "Cancel jobs as `gbatch scancel` does: a pending job is removed, a running one "
            "stopped (SIGTERM, then SIGKILL after the grace period). Only your own jobs, "
            "unless you are an admin; each refusal is scancel's line.",
            CANCEL_SCHEMA,
            lambda args: [_refusals("scancel", lambda: cancel(ctx, args["jobs"]))],
            read_only=False,
            destructive=True,
        ),
    ]
    return {tool.name: tool for tool in tools}


def cluster_status(ctx: Context, args: Mapping[str, Any]) -> str:
    from gbatch.protocol import requests
    from gbatch.render.clusterstatus import cluster_status_text

    reply = ctx.client.call(requests.ClusterStatus(all_users=bool(args.get("all", False))))
    return cluster_status_text(reply)


def _refusals(command: str, action: Callable[[], T]) -> T:
    """action(), with a failure to reach the daemon or its refusal as ToolRefused
    carrying `gbatch <command>`'s line (the one the CLI prints for the same failure)."""
    from gbatch.protocol.failures import failure_line

    try:
        return action()
    except Exception as err:
        known = failure_line(err)
        if known is None:
            raise
        raise ToolRefused(f"gbatch {command}: error: {known}") from err


def _job(text: str, command: str) -> JobTarget:
    """One job, N or N_K, as the CLI reads a JOBID argument named `job`."""
    from gbatch.core.jobids import ONE, JobIdError, parse_one_job

    try:
        return parse_one_job(text, ONE)
    except JobIdError as err:
        raise ToolRefused(f"gbatch {command}: error: job: {err}") from err


def _job_ids(values: list[str], what: str, command: str) -> tuple[str, ...]:
    """Job ids in every form (N, N_K, N_[K-M], FIRST-LAST, comma lists), canonical, as
    the CLI checks them before sending; `what` names the option in the refusal."""
    from gbatch.core.jobids import ANY, JobIdError, parse_job_ids

    try:
        return tuple(str(t) for value in values for t in parse_job_ids(value, ANY))
    except JobIdError as err:
        raise ToolRefused(f"gbatch {command}: error: {what}: {err}") from err


def _split(values: list[str] | None) -> list[str]:
    """Slurm lists, as the CLI reads `-u a,b -u c`: [a, b, c]."""
    return [item for value in values or () for item in value.split(",") if item]


def submit_words(args: Mapping[str, Any]) -> list[str]:
    """sbatch's option words for submit's arguments.

    Each is `--opt=value`, so a value that starts with '-' stays a value.
    """
    words = [f"{option}={args[key]}" for key, option in SUBMIT_OPTIONS.items() if key in args]
    if "gpu_type" in args:  # one option for both: --gpus=TYPE:N (or --gpus-per-node=)
        option = "--gpus-per-node" if "gpus_per_node" in args else "--gpus"
        count = args.get("gpus_per_node" if "gpus_per_node" in args else "gpus", 1)
        words = [w for w in words if not w.startswith(option + "=")]
        words.append(f"{option}={args['gpu_type']}:{count}")
    if args.get("hold"):
        words.append("--hold")
    if args.get("exclusive"):
        words.append("--exclusive")
    words += args.get("options", [])
    if "wrap" in args:
        words.append(f"--wrap={args['wrap']}")
    return words


def submit(ctx: Context, args: Mapping[str, Any]) -> str:
    from gbatch.jobspec.errors import BadSubmit
    from gbatch.jobspec.submit import request_for_text  # deferred: yaml, the spec
    from gbatch.protocol import requests

    if ("script" in args) == ("wrap" in args):
        raise BadArguments("script, wrap: give one of them (the job's text, or a command)")
    try:
        built = request_for_text(
            args.get("script"),
            "mcp",
            submit_words(args),
            submit_dir=os.getcwd(),
            environ=os.environ,
        )
    except BadSubmit as err:
        raise ToolRefused(f"gbatch sbatch: error: {err.message}") from err
    reply = ctx.client.call(requests.Submit(**built.fields()))
    if "ids" not in reply:  # --test-only among the options: nothing was queued
        import json

        return "Nothing queued (--test-only): " + json.dumps(reply.get("test"))
    return f"Submitted batch job {reply['ids'][0]}"


def queue(ctx: Context, args: Mapping[str, Any]) -> str:
    """`gbatch squeue` with these filters (and -l for long): its request, its table."""
    from gbatch.core import constants
    from gbatch.core.accounts import user_exists
    from gbatch.render import squeue
    from gbatch.render.squeue_brief import format_default, list_jobs

    users = _split(args.get("users")) or ([ctx.me] if args.get("me") else [])
    for user in users:  # as squeue: an unknown user is an error, not an empty table
        if not user_exists(user):
            raise ToolRefused(f"gbatch squeue: error: Invalid user: {user}")
    jobs = _job_ids(args.get("jobs") or [], "-j/--jobs", "squeue")
    states = _split(args.get("states"))
    history = "all" in (state.lower() for state in states)  # finished jobs too
    long = bool(args.get("long"))
    fields = {
        "users": tuple(users),
        "jobs": jobs,
        "states": () if history else tuple(states),
        "history": history,
        "names": (),
        "partitions": (),
        "nodes": (),
    }
    if not long and not jobs:  # squeue's everyday table (squeue_brief)
        reply = ctx.client.send(list_jobs(**fields, brief=True, columns=True, starts=False))
        return format_default(reply["columns"], reply["now"])
    fmt = constants.SQUEUE_LONG_FORMAT if long else None
    letters = squeue.squeue_letters(fmt)
    sort = squeue.parse_squeue_sort(constants.SQUEUE_DEFAULT_SORT)
    starts_asked = bool(letters & constants.SQUEUE_START_LETTERS) or any(
        key in "Se" for key, _ in sort
    )
    brief = not letters & constants.SQUEUE_FULL_SPEC_LETTERS
    request = list_jobs(
        **fields, brief=brief, columns=brief and not starts_asked, starts=starts_asked
    )
    reply = ctx.client.send(request)
    listed = _jobs_of(reply)
    if not listed and jobs:
        _check_jobs_exist(ctx, jobs)
    now = reply["now"]
    starts = {int(job_id): at for job_id, at in reply.get("starts", ())}
    table = squeue.format_squeue(
        squeue.sort_squeue(listed, sort, now, starts), now, fmt=fmt, starts=starts
    )
    if not long:
        return table
    import time

    # squeue -l's date line (its ctime form), in the daemon's clock.
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)) + "\n" + table


def _jobs_of(reply: Mapping[str, Any]) -> list[Job]:
    """A ListJobs reply's jobs, whichever encoding the daemon chose."""
    from gbatch.protocol import codec, listings

    if "columns" in reply:
        return listings.jobs_from_columns(reply["columns"])
    if "table" in reply:
        return listings.jobs_from_table(reply["table"])
    return [codec.job_from_wire(job) for job in reply["jobs"]]


def _check_jobs_exist(ctx: Context, jobs: tuple[str, ...]) -> None:
    """As squeue: jobs named and none exists in any state is an error (filtered out
    ones still give the empty table)."""
    from gbatch.protocol import requests

    known = ctx.client.call(requests.ListJobs(jobs=jobs, history=True, brief=True))
    if not known["jobs"]:
        raise ToolRefused(f"gbatch squeue: error: Invalid job id specified: {','.join(jobs)}")


def cancel(ctx: Context, jobs: list[str]) -> str:
    """`gbatch scancel -- JOBS`: a line saying what was cancelled, or scancel's failures.

    scancel itself prints nothing on success, as Slurm's; the tool answers with a line
    naming the jobs. Each failure is scancel's line, raised together as ToolRefused.
    """
    from gbatch.protocol import requests

    ids = _job_ids(jobs, "JOBID", "scancel")
    if not ids:  # an empty Cancel would mean all the caller's jobs: never by accident
        raise ToolRefused(
            "gbatch scancel: error: no job ids given. Name job ids, or use -u USER / -t STATE "
            "/ --me"
        )
    reply = ctx.client.call(requests.Cancel(jobs=ids))
    lines = [
        f"gbatch scancel: error: Kill job error on job id {failure['id']}: {failure['error']}"
        for failure in reply["results"]
    ]
    more = int(reply.get("failed", len(lines))) - len(lines)
    if more > 0:
        lines.append(f"gbatch scancel: error: and {more:,} more jobs failed")
    if lines:
        raise ToolRefused("\n".join(lines))
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
    from gbatch.core.model import JobState
    from gbatch.protocol import codec, requests
    from gbatch.render import cells

    target = _job(text, "scontrol")
    reply = ctx.client.call(requests.ShowJob(id=target.job, task=target.single_task))
    job = codec.job_from_wire(reply["job"])
    reason = cells.reason_text(job)
    lines = [
        f"JobId={target} JobName={job.spec.name} UserId={job.user} "
        f"JobState={job.state.value} Reason={reason}"
    ]
    if job.spec.dependency:
        lines.append(f"Dependency={cells.dependency_text(job)}")
    if job.state is not JobState.PENDING:
        lines.append(f"Not pending: it is {job.state.value}" + _where(job))
        return "\n".join(lines) + "\n"
    waits = WAITS_FOR.get(reason.split()[0] if reason.split() else reason)
    if waits:
        lines.append(f"Waits for: {waits}.")
    partition = job.spec.partition or "the default partition"
    model = f" {job.spec.gpu_type}" if job.spec.gpu_type else ""
    features = f" with {job.spec.constraint}" if job.spec.constraint else ""
    nodes = job.spec.nodes
    span = "on one node" if nodes == 1 else f"on each of {nodes} nodes, all at once"
    lines.append(f"Asks for: {job.spec.gpus}{model} GPU(s) {span}{features} in {partition}.")
    lines.append(_place(ctx, job))
    return "\n".join(lines) + "\n"


def _where(job: Job) -> str:
    if job.peers:  # across nodes (issue 32): each node with its GPUs
        from gbatch.render.cells import nodelist_text

        each = "; ".join(
            f"{name}: {','.join(map(str, gpus)) or 'none'}" for name, gpus in job.placements
        )
        return f" on {len(job.placements)} nodes {nodelist_text(job)} (GPUs {each})."
    if job.node:
        gpus = ",".join(map(str, job.gpus)) or "none"
        return f" on node {job.node} (GPUs {gpus})."
    return "."


def _place(ctx: Context, job: Job) -> str:
    """The job's place in the planner's order, as `gbatch sprio -l` ranks it."""
    from gbatch.core.views import JobPriority
    from gbatch.protocol import requests

    reply = ctx.client.call(requests.ShowPriorities())
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
    from gbatch.protocol import requests

    if "tail_lines" in args and "offset" in args:
        raise BadArguments("tail_lines, offset: give one of them (the end, or a place)")
    target = _job(args["job"], "logs")
    limit = int(args.get("max_bytes", DEFAULT_LOG_BYTES))
    tail = args.get("tail_lines")
    start = int(args.get("offset", 0))
    at, kept, state, done = start, "", "", False
    while True:
        reply = ctx.client.call(requests.ReadLog(id=target.job, task=target.single_task, offset=at))
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
    """What is wrong with `arguments` against a tool's schema, naming the field; None if nothing.

    The schema is the subset written here: an object of strings, integers, booleans and
    arrays of strings.
    """
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
