"""A job's nodes and tasks as sbatch's options and a job file ask for them (issue 32).

-N/--nodes (`nodes:`), -n/--ntasks, --ntasks-per-node, -w/--nodelist, -x/--exclude
and --exclusive, each checked alone (the check_* below, build_spec's field checks), and
together (`settle_nodes`: the node count they imply, and the combinations refused). Which
nodes a partition has is the daemon's to say (gbatch/head/handlers/submit.py).
"""

from __future__ import annotations

import re

from gbatch.core import hostlist
from gbatch.core.gputypes import profile_of
from gbatch.core.timefmt import show_value
from gbatch.jobspec.errors import SpecError
from gbatch.jobspec.optvalues import MAX_NODES as MAX_NODES
from gbatch.jobspec.optvalues import check_nodes as check_nodes

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

MAX_TASKS = 65536
MAX_TASKS_PER_NODE = 1024
# A node name a host list may hold: the inventory's names and the embedded `local`, and
# the host names a Slurm user brings (which the daemon then refuses if none is here).
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)


def _count_check(high: int, what: str) -> Any:
    def check(value: object, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise SpecError(
                field,
                f"{show_value(value)} is not a number of {what}. Use a whole number from 1 "
                f"to {high}" + (", without quotes" if isinstance(value, str) else ""),
            )
        return value

    return check


check_ntasks = _count_check(MAX_TASKS, "tasks")
check_ntasks_per_node = _count_check(MAX_TASKS_PER_NODE, "tasks per node")


def check_host_list(value: object, field: str) -> tuple[str, ...]:
    """-w/--nodelist or -x/--exclude (a host list, or a job file's list): the names, once.

    A Slurm host list is `gpu[01-02],cpu7`; a job file may give a list of them. Slurm
    also reads a file of names when the value holds a '/': refused here (a file is where
    sbatch runs, which the HTTP API and the daemon are not)."""
    items: list[object] = list(value) if isinstance(value, list | tuple) else [value]
    if not items or not all(isinstance(item, str) for item in items):
        raise SpecError(
            field, f"{show_value(value)} is not a list of nodes. Give names, e.g. gpu[01-02],gpu07"
        )
    names: list[str] = []
    for item in items:
        assert isinstance(item, str)
        if "/" in item:
            raise SpecError(
                field,
                f"{show_value(item)} looks like a file of node names (Slurm's form), which "
                "gbatch does not read. Give the names themselves, e.g. gpu[01-02]",
            )
        try:
            expanded = hostlist.expand(item)
        except ValueError as err:
            raise SpecError(field, f"{err}. Give names, e.g. gpu[01-02],gpu07") from None
        for name in expanded:
            if not _NODE_NAME.fullmatch(name):
                raise SpecError(
                    field,
                    f"{show_value(name)} is not a node name. Give names such as gpu01 "
                    "(`gbatch sinfo -N` lists them)",
                )
            if name not in names:
                names.append(name)
    return tuple(names)


def check_exclusive(value: object, field: str) -> bool:
    """`exclusive:` in a job file (true or false); --exclusive[=user|mcs|topo] gives True."""
    if isinstance(value, bool):
        return value
    raise SpecError(field, f"{show_value(value)} is not true or false. Write true or false")


def settle_nodes(fields: dict[str, Any], labels: dict[str, str]) -> None:
    """The node count the other fields imply, set in `fields`, and their refused mixes.

    `fields` are build_spec's checked JobSpec fields (nodes, ntasks, ntasks_per_node,
    nodelist, exclude, exclusive, gpu_mem_mb, gpu_shards, gpu_type when given); `labels`
    how the user named each (an option or a job-file key), by field. Without a node
    count: -w's nodes, or -n over --ntasks-per-node, else 1. SpecError for what no
    allocation could be: more nodes named than asked, a node both named and excluded,
    fewer tasks than nodes, -n and --ntasks-per-node that disagree, or a share of one
    GPU (--gpu-mem, shards, a MIG slice) across nodes."""
    nodelist: tuple[str, ...] = fields.get("nodelist", ())
    exclude: tuple[str, ...] = fields.get("exclude", ())
    ntasks: int | None = fields.get("ntasks")
    per_node: int | None = fields.get("ntasks_per_node")
    if "nodes" not in fields:
        if nodelist:
            fields["nodes"] = len(nodelist)
        elif ntasks is not None and per_node is not None:
            if ntasks % per_node:
                raise SpecError(
                    labels["ntasks"],
                    f"{ntasks} tasks do not fill nodes of {per_node} "
                    f"({labels['ntasks_per_node']}). Give a multiple of {per_node}, or -N too",
                )
            fields["nodes"] = ntasks // per_node
    nodes = fields.get("nodes", 1)
    both = [name for name in nodelist if name in exclude]
    if both:
        raise SpecError(
            labels["nodelist"],
            f"{both[0]} is named by {labels['exclude']} too. Name it in one of them",
        )
    if len(nodelist) > nodes:
        raise SpecError(
            labels["nodelist"],
            f"{hostlist.compress(nodelist)} names {len(nodelist)} nodes but "
            f"{labels['nodes']} asks for {nodes}. Ask for {len(nodelist)} nodes, or name fewer",
        )
    if ntasks is not None and ntasks < nodes:
        raise SpecError(
            labels["ntasks"],
            f"{ntasks} task{'s' if ntasks > 1 else ''} on {nodes} nodes ({labels['nodes']}) "
            "leaves a node without one. "
            f"Ask for at least {nodes} tasks, or for fewer nodes",
        )
    if ntasks is not None and per_node is not None and ntasks != per_node * nodes:
        raise SpecError(
            labels["ntasks"],
            f"{ntasks} tasks, but {labels['ntasks_per_node']} {per_node} on {nodes} nodes is "
            f"{per_node * nodes}. Give one of them, or make them agree",
        )
    shared = "gpu_mem_mb" in fields or "gpu_shards" in fields
    if nodes > 1 and shared:
        label = labels["gpu_mem" if "gpu_mem_mb" in fields else "gpu_shards"]
        raise SpecError(
            label,
            f"a share of one GPU cannot span nodes, and {labels['nodes']} asks for {nodes}. "
            "Ask for whole GPUs (--gpus-per-node N), or for one node",
        )
    kind = fields.get("gpu_type")
    if nodes > 1 and kind is not None and profile_of(kind):
        raise SpecError(
            labels["gpu_type"],
            f"{kind} is a MIG slice, and slices are not given across nodes ({labels['nodes']} "
            f"{nodes}). Ask for whole GPUs (--gpus-per-node TYPE:N), or for one node",
        )
    if fields.get("exclusive") and shared:
        raise SpecError(
            labels["exclusive"],
            "holds whole nodes, but the job asks for a share of one GPU. Drop one of them",
        )
