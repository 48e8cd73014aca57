"""gbatch scontrol: show a job, a node or a partition; hold, release, requeue, update jobs.

A job is shown with its full record and history.
"""

from __future__ import annotations

import argparse
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context, parse_ids, parse_job, print_failures
from gbatch.cli.exits import CliError, Exit
from gbatch.protocol.requests import UPDATE_KEYS

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

    from gbatch.core.gpuusage import GpuUsage
    from gbatch.core.jobids import JobTarget

HELP = COMMANDS["scontrol"]


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "scontrol",
        help=HELP,
        description=HELP + ".",
        epilog="examples: gbatch scontrol show job 12 | gbatch scontrol hold 12,13 | "
        "gbatch scontrol hold 20-511 (every job with an id in that range) | "
        "gbatch scontrol release 12 | gbatch scontrol requeue 12 (a running job is stopped, "
        "then queued again; a finished one is queued again) | "
        "gbatch scontrol show node [NAME] | gbatch scontrol show partition [NAME] | "
        "gbatch scontrol show qos [NAME] (the QOS, and which you may use) | "
        "gbatch scontrol show hostnames [gpu[01-02]] (one host a line; default "
        "$SLURM_JOB_NODELIST) | gbatch scontrol show hostlist gpu01,gpu02 (gpu[01-02]) | "
        "gbatch scontrol update JobId=12 TimeLimit=30:00 Priority=-5 (keys, any case: "
        f"{', '.join(UPDATE_KEYS)}; Name= is JobName=; Gres=gpu[:TYPE]:N sets the GPUs and "
        "their type, NumGPUs=N the count alone; Features= (or Constraint=) the -C list; a pending "
        "job's fields, a running job's TimeLimit; raising a time limit or a priority "
        "needs an admin, as in Slurm) | "
        "gbatch scontrol create reservation ReservationName=demo StartTime=now+2minutes "
        "Duration=2:00:00 Users=alice,bob Nodes=gpu01 (or GPUs=2 [GpuType=a100]) "
        "[Groups=G] [PartitionName=P] [Flags=MAINT,IGNORE_JOBS,DAILY,WEEKLY] (admins) | "
        "gbatch scontrol update ReservationName=demo Duration=3:00:00 (Flags+=X, Flags-=X) | "
        "gbatch scontrol delete ReservationName=demo | "
        "gbatch scontrol show reservation [NAME] (docs/priorities.md)",
    )
    p.add_argument(
        "action", choices=("show", "hold", "release", "requeue", "update", "create", "delete")
    )
    p.add_argument(
        "args",
        nargs="+",
        metavar="ARG",
        help="`job [ID]` (N or N_K; no ID: every queued job), `node [NAME]`, "
        "`partition [NAME]`, `qos [NAME]`, `reservation [NAME]`, `hostnames [LIST]` or "
        "`hostlist LIST` for show; `JobId=N KEY=VALUE...` or `ReservationName=NAME "
        "KEY=VALUE...` for update; `reservation KEY=VALUE...` for create; "
        "`ReservationName=NAME` for delete; otherwise job ids: N (an array's id: all its "
        "tasks), N_K, N_[K-M], FIRST-LAST, and comma lists of those",
    )
    p.add_argument("--json", action="store_true", help="with show: JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from gbatch.protocol import codec, requests
    from gbatch.render import scontrol

    if args.action in ("create", "delete") or (
        args.action == "update" and args.args[0].lower().startswith("reservation")
    ):
        return _change_reservation(args.action, args.args, ctx)
    if args.action == "show" and args.args[0].lower() in ("reservation", "reservations", "res"):
        return _show_reservations(args.args, ctx, args.json)
    if args.action == "update":
        target, changes = parse_update(args.args)
        reply = ctx.client.call(
            requests.UpdateJob(id=target.job, changes=changes, task=target.single_task)
        )
        if not reply["changes"]:
            print(f"gbatch scontrol: job {target}: nothing changed", file=sys.stderr)
        return Exit.OK
    if args.action == "show" and args.args[0].lower() in ("hostnames", "hostlist"):
        return _show_hosts(args.args)
    if args.action == "show" and args.args[0].lower() in (
        "node",
        "nodes",
        "partition",
        "partitions",
        "qos",
    ):
        return _show_fleet(args.args, ctx)
    if args.action == "show":
        if len(args.args) > 2 or args.args[0].lower() not in ("job", "jobs"):
            raise CliError(
                "usage: gbatch scontrol show job [ID] | show node [NAME] | show partition [NAME] "
                "| show qos [NAME]",
                Exit.USAGE,
            )
        if len(args.args) == 1:
            return _show_all_jobs(args, ctx)
        target = parse_job(args.args[1], "show job")
        task = None if target.tasks is None else target.tasks[0][0]
        # JSON stays one object (the job named); the text shows an array's every task.
        reply = ctx.client.call(
            requests.ShowJob(id=target.job, task=task, with_tasks=not args.json)
        )
        job = codec.job_from_wire(reply["job"])
        events = [codec.event_from_wire(e) for e in reply["events"]]
        tasks = [codec.job_from_wire(j) for j in reply.get("tasks", ())]
        usage = _gpu_usage(reply.get("gpu_usage"))  # absent from an older daemon's reply
        if args.json:
            out = scontrol.format_job_details_json(job, events, reply["now"], usage)
        else:  # an array's tasks one after another, a blank line between, as scontrol
            out = "\n".join(
                scontrol.format_job_details(
                    j, events if j is job else (), reply["now"], usage if j is job else None
                )
                for j in [job, *tasks]
            )
        sys.stdout.write(out)
        return Exit.OK
    actions: dict[str, type[requests.Hold | requests.Release | requests.Requeue]] = {
        "hold": requests.Hold,
        "release": requests.Release,
        "requeue": requests.Requeue,
    }
    jobs = parse_ids(args.args, args.action) or []
    reply = ctx.client.call(actions[args.action](jobs=tuple(jobs)))
    failed = print_failures("scontrol", reply, lambda f: f"job {f['id']}: {f['error']}")
    return Exit.FAILED if failed else Exit.OK


def _show_hosts(words: list[str]) -> int:
    """scontrol show hostnames [LIST]: each host of a host list (`gpu[01-02]`) on a line
    of its own, LIST by default $SLURM_JOB_NODELIST (a job's script finds its nodes, and
    its MASTER_ADDR, so); show hostlist LIST: the names as one compressed list. Neither
    asks the daemon."""
    import os

    from gbatch.core import hostlist

    what = words[0].lower()
    if len(words) > 2:
        raise CliError(f"usage: gbatch scontrol show {what} [LIST]", Exit.USAGE)
    text = words[1] if len(words) == 2 else os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        raise CliError(
            f"show {what}: no host list given and SLURM_JOB_NODELIST is not set. Give "
            "one, e.g. gbatch scontrol show hostnames gpu[01-02]",
            Exit.USAGE,
        )
    try:
        names = hostlist.expand(text)
    except ValueError as err:
        raise CliError(f"show {what}: {err}", Exit.USAGE) from err
    if what == "hostlist":
        print(hostlist.compress(names))
    else:
        sys.stdout.write("".join(f"{name}\n" for name in names))
    return Exit.OK


def _gpu_usage(wire: list[float | int] | None) -> GpuUsage | None:
    """The job's current run's GPU samples from the reply, None when it has none."""
    if wire is None:
        return None
    from gbatch.core.gpuusage import GpuUsage

    return GpuUsage.from_wire(wire)


def _show_all_jobs(args: argparse.Namespace, ctx: Context) -> int:
    """scontrol show job(s) with no id: every job in the queue (pending, running,
    completing), each as `show job ID` prints it, as Slurm lists the jobs its
    controller holds; finished jobs are sacct's."""
    from gbatch.protocol import codec, requests
    from gbatch.render import scontrol

    reply = ctx.client.call(requests.ListJobs())
    jobs = [codec.job_from_wire(j) for j in reply["jobs"]]
    if args.json:
        import json  # deferred: only --json needs it

        items = [json.loads(scontrol.format_job_details_json(j, (), reply["now"])) for j in jobs]
        sys.stdout.write(json.dumps(items, indent=2) + "\n")
    elif not jobs:
        print("No jobs in the system")
    else:
        sys.stdout.write("\n".join(scontrol.format_job_details(j, (), reply["now"]) for j in jobs))
    return Exit.OK


def parse_update(words: list[str]) -> tuple[JobTarget, dict[str, str]]:
    """Read scontrol update's KEY=VALUE words into (the job, {Slurm's key: value}).

    `JobId=12 TimeLimit=30 Name=x` -> (12, {"TimeLimit": "30", "JobName": "x"}): Slurm's
    KEY=VALUE words, keys in any case. CliError (usage) for a word without `=`, no or
    two JobIds, or a key gbatch does not update (naming those it does).
    """
    from gbatch.core.jobids import ONE
    from gbatch.protocol.requests import update_key

    job_ids: list[str] = []
    changes: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if not equals:
            raise CliError(
                f"update: {word!r} is not KEY=VALUE. Write e.g. JobId=12 TimeLimit=30:00",
                Exit.USAGE,
            )
        if key.lower() in ("jobid", "job"):
            job_ids.append(value)
            continue
        canonical = update_key(key)
        if canonical is None:
            raise CliError(
                f"update: {key}: not a key gbatch updates. Use one of {', '.join(UPDATE_KEYS)}"
                " (any case)",
                Exit.USAGE,
            )
        if canonical in changes:
            raise CliError(f"update: {canonical} is given twice. Give it once", Exit.USAGE)
        changes[canonical] = value
    if len(job_ids) != 1:
        raise CliError("update: name one job: JobId=N, then KEY=VALUE...", Exit.USAGE)
    # N (an array's id: each of its tasks) or N_K (that task).
    target = parse_job(job_ids[0], "update: JobId", ONE)
    if not changes:
        raise CliError(
            f"update: nothing to change. Add KEY=VALUE, KEY one of {', '.join(UPDATE_KEYS)}",
            Exit.USAGE,
        )
    return target, changes


def _change_reservation(action: str, words: list[str], ctx: Context) -> int:
    """scontrol create reservation KEY=VALUE... | update ReservationName=N KEY=VALUE... |
    delete ReservationName=N (Slurm's words; the daemon reads them)."""
    from gbatch.protocol import requests

    if action == "create":
        if words[0].lower() not in ("reservation", "res"):
            raise CliError(
                "usage: gbatch scontrol create reservation ReservationName=NAME "
                "StartTime=TIME Duration=TIME Users=LIST (Nodes=LIST | GPUs=N) [Flags=...]",
                Exit.USAGE,
            )
        words = words[1:]
    if action == "delete":
        if words and words[0].lower() in ("reservation", "res"):
            words = words[1:]
        key, _, name = (words[0] if len(words) == 1 else "").partition("=")
        if len(words) != 1 or key.lower() not in ("reservationname", "reservation") or not name:
            raise CliError("usage: gbatch scontrol delete ReservationName=NAME", Exit.USAGE)
        ctx.client.call(requests.DeleteReservation(name=name))
        print(f"Reservation {name} deleted")
        return Exit.OK
    reply = ctx.client.call(requests.ChangeReservation(action=action, words=tuple(words)))
    name = reply["reservation"]["name"]
    print(f"Reservation created: {name}" if action == "create" else f"Reservation {name} updated")
    return Exit.OK


def _show_reservations(words: list[str], ctx: Context, as_json: bool) -> int:
    """scontrol show reservation [NAME]: Slurm's layout, a blank line between."""
    import json

    from gbatch.core.reservations import Reservation, format_show
    from gbatch.protocol import requests

    if len(words) > 2:
        raise CliError("usage: gbatch scontrol show reservation [NAME]", Exit.USAGE)
    reply = ctx.client.call(requests.ListReservations(name=words[1] if len(words) == 2 else None))
    if as_json:
        print(json.dumps({"reservations": reply["reservations"]}, indent=2))
        return Exit.OK
    found = [Reservation.from_dict(r) for r in reply["reservations"]]
    if not found:
        print("No reservations in the system")
        return Exit.OK
    print("\n\n".join(format_show(r, reply["now"]) for r in found))
    return Exit.OK


def _show_fleet(words: list[str], ctx: Context) -> int:
    """scontrol show node|partition|qos [NAME]: Slurm's layout (QOS: sacctmgr's fields)."""
    from gbatch.protocol import codec, requests
    from gbatch.render import scontrol

    if len(words) > 2:
        raise CliError(f"usage: gbatch scontrol show {words[0].lower()} [NAME]", Exit.USAGE)
    name = words[1] if len(words) == 2 else None
    reply = ctx.client.call(requests.ListNodes())
    nodes = [codec.node_from_wire(n) for n in reply["nodes"]]
    if words[0].lower() == "qos":
        shown_qos = [q for q in reply.get("qos", []) if name is None or q["name"] == name]
        if not shown_qos:
            raise CliError(f"QOS {name} not found", Exit.FAILED)
        allowed = set(reply.get("qos_allowed", []))
        sys.stdout.write("\n".join(scontrol.format_qos_details(q, allowed) for q in shown_qos))
        return Exit.OK
    if words[0].lower().startswith("node"):
        shown = [n for n in nodes if name is None or n.name == name]
        if not shown:
            raise CliError(f"Node {name} not found", Exit.FAILED)
        sys.stdout.write("\n".join(scontrol.format_node_details(n) for n in shown))
        return Exit.OK
    partitions = [codec.partition_from_wire(p) for p in reply.get("partitions", [])]
    chosen = [p for p in partitions if name is None or p.name == name]
    if not chosen:
        raise CliError(f"Partition {name} not found", Exit.FAILED)
    sys.stdout.write("\n".join(scontrol.format_partition_details(p, nodes) for p in chosen))
    return Exit.OK
