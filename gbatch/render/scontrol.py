"""`scontrol show job|node|partition`: Slurm's key=value records, and a job's `--json`.

A job's record ends with its events.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from gbatch.core.constants import NORMAL_QOS as NORMAL
from gbatch.core.gputypes import gres_text, node_gres
from gbatch.core.hostlist import compress, names_of
from gbatch.core.jobids import job_label
from gbatch.core.labels import format_spans, memory_text, printable, spans_of
from gbatch.core.model import (
    ALLOCATED_STATES,
    ClusterNodes,
    Event,
    Job,
    JobSpec,
    JobState,
    NodeInfo,
    NodeState,
    PartitionInfo,
)
from gbatch.core.shares import card_text, job_share_text
from gbatch.core.timefmt import format_duration, format_elapsed_fixed, format_timestamp
from gbatch.render.cells import (
    NULL,
    as_json,
    as_text,
    command_line,
    dependency_text,
    elapsed_seconds,
    exit_code_text,
    gpu_type,
    job_to_dict,
    node_count,
    nodelist_text,
    params_text,
    partition_text,
    reason_text,
    time_limit_fixed,
    tres_text,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:  # only show job's reply carries it
    from typing import Any

    from gbatch.core.gpuusage import GpuUsage

SECRET_MASK = "<secret>"  # shown for a secret_env variable, in place of its value


def _array_task_ids(job: Job) -> str:
    """scontrol's ArrayTaskId: the task's index, or the indices a pending record holds."""
    if not job.array_more:
        return str(job.spec.array_task)
    label = job_label(job)
    return label[label.index("[") + 1 : -1].partition("%")[0]


def _expected_end(job: Job) -> float | None:
    """Actual end, else (like Slurm) start + limit for a job holding GPUs."""
    if job.end_time is not None:
        return job.end_time
    if job.state in ALLOCATED_STATES and job.start_time is not None and job.time_limit:
        return job.start_time + job.time_limit
    return None


def _event_lines(events: Sequence[Event]) -> list[str]:
    ordered = sorted(events, key=lambda e: e.time)  # stable: same-instant order kept
    width = max((len(e.state.value) for e in ordered), default=0)
    return [
        f"   {format_timestamp(e.time)}  {e.state.value.ljust(width)}  "
        f"{printable(e.reason)}".rstrip()
        for e in ordered
    ]


def format_job_details(
    job: Job, events: Sequence[Event], now: float, gpu_usage: GpuUsage | None = None
) -> str:
    """Render one job as `scontrol show job` does: key=value lines, then its events.

    `gpu_usage` (its current run's GPU samples) adds `GpuMemUsed=` (while it runs) and
    `GpuMemPeak=`, the GPU memory its own processes use, once a report has listed one.

    The lines are indented three spaces; the `Events:` block gives time, state and
    reason, oldest first.

    Environment lists variable names only: values may be secrets and never appear;
    secret_env names read NAME=<secret>.
    Unset values read `(null)`, unknown times `Unknown`, as in Slurm. When printing
    several jobs, separate them with a blank line as scontrol does.
    """
    spec = job.spec
    from gbatch.core.outputs import output_paths  # deferred: squeue needs none

    files = output_paths(job, job.node)
    env_names = ",".join(
        [printable(name) for name, _ in spec.env]
        + [f"{printable(name)}={SECRET_MASK}" for name in spec.secret_env]
    )
    lines = [
        f"JobId={job.id}"
        # As scontrol, for an array task only.
        + (
            f" ArrayJobId={job.array_job_id} ArrayTaskId={_array_task_ids(job)}"
            + (f" ArrayTaskThrottle={spec.array_throttle}" if spec.array_throttle else "")
            if job.array_job_id is not None
            else ""
        )
        + f" JobName={printable(spec.name)}",
        f"   UserId={printable(job.user)}({job.uid})",
        f"   Priority={spec.effective_priority} Nice={spec.nice}"
        f" QOS={printable(spec.qos or NORMAL)}",
        f"   JobState={job.state.value} Reason={reason_text(job)}"
        # Only for a job that has one, so every other job's lines stay as they were.
        + (f" Dependency={dependency_text(job)}" if spec.dependency else "")
        + f" ExitCode={exit_code_text(job)}",
        f"   RunTime={format_elapsed_fixed(elapsed_seconds(job, now))}"
        f" TimeLimit={time_limit_fixed(job)}",
        # Two lines, as scontrol prints them (and one line would not fit 80 columns).
        f"   SubmitTime={format_timestamp(job.submit_time)}",
        f"   StartTime={format_timestamp(job.start_time)}"
        f" EndTime={format_timestamp(_expected_end(job))}",
        f"   Partition={partition_text(job)}",
        # Only for a job that names nodes (-w, -x), so every other job's lines stay.
        *(
            [f"   ReqNodeList={_hosts(spec.nodelist)} ExcNodeList={_hosts(spec.exclude)}"]
            if spec.nodelist or spec.exclude
            else []
        ),
        # Gres= is per node (TresPerNode); GPUs= the first node's (BatchHost's), and a job
        # across nodes has a line per node with its GPUs, as scontrol -d's.
        f"   NodeList={nodelist_text(job) or NULL}"
        f" Gres={_job_gres(spec)}"
        f" GPUs={','.join(map(str, job.gpus)) if job.gpus else NULL}"
        f" Attempt={job.attempt} Retries={spec.retries}"
        f" Requeue={1 if spec.requeue else 0}",
        *(_node_lines(job) if job.peers else []),
        *([f"   BatchHost={printable(job.node)}"] if job.node else []),
        f"   NumNodes={node_count(job)} NumTasks={_num_tasks(job)}",
        # Slurm's names, every node's CPUs together; memory per node, 0 as Slurm prints
        # a job without --mem.
        f"   NumCPUs={spec.cpus_counted * spec.nodes} MinMemoryNode={memory_text(spec.memory_mb)}",
        f"   ReqTRES={tres_text(spec)}",
        f"   AllocTRES={'' if job.node is None else tres_text(spec)}",
        # gbatch's: only once its processes were seen on its GPUs.
        *([f"   {own}"] if (own := _own_gpu_memory(job, gpu_usage)) else []),
        # Only for a job that asks for them, so every other job's lines stay as they were.
        *([f"   Features={printable(spec.constraint)}"] if spec.constraint else []),
        *(["   OverSubscribe=NO"] if spec.exclusive else []),  # --exclusive: whole nodes
        *([f"   TresPerNode=gres/{_job_gres(spec)}"] if spec.gpus else []),
        f"   Command={command_line(spec.command)}",
        f"   Image={printable(spec.image or NULL)}"
        f" WorkDir={printable(spec.workdir or NULL)}"
        f" Mounts={printable(','.join(spec.mounts) or NULL)}"
        f" ShmSize={printable(spec.shm_size or NULL)}"
        # Only when the job picked one: the admin's job_network is every other job's.
        + (f" Network={printable(spec.network)}" if spec.network else ""),
        f"   Environment={env_names or NULL}",
        *_slurm_option_lines(spec),
        # As scontrol: the paths the files have (patterns expanded), stdin never read.
        f"   StdErr={printable(files[1]) if files else NULL}",
        "   StdIn=/dev/null",
        f"   StdOut={printable(files[0]) if files else NULL}",
        "Events:",
        *_event_lines(events),
    ]
    return as_text(lines)


def _hosts(names: Sequence[str]) -> str:
    return printable(compress(names)) if names else NULL


def _num_tasks(job: Job) -> int:
    """Slurm's NumTasks: -n, else --ntasks-per-node on each node, else one per node."""
    from gbatch.core.multinode import tasks_per_node  # deferred: squeue needs none

    return sum(tasks_per_node(job.spec, node_count(job)))


def _node_lines(job: Job) -> list[str]:
    """A job across nodes' GPUs on each node, as scontrol -d shows them:
    `     Nodes=gpu02 GRES=gpu:2(IDX:0-1)`."""
    lines = []
    for name, gpus in job.placements:
        gres = gres_text(len(gpus), job.spec.gpu_type) if gpus else "gpu:0"
        where = f"(IDX:{format_spans(spans_of(gpus))})" if gpus else ""
        lines.append(f"     Nodes={printable(name)} GRES={gres}{where}")
    return lines


def _own_gpu_memory(job: Job, usage: GpuUsage | None) -> str:
    from gbatch.core.gpuusage import own_memory_fields  # deferred: squeue needs none

    return own_memory_fields(usage, job.state is JobState.RUNNING)


def _slurm_option_lines(spec: JobSpec) -> list[str]:
    """Export (mode and names; the values are never shown, as in Slurm), BeginTime,
    Signal, MailUser/MailType and Comment: a line only for the options a job gave."""
    parts = []
    if spec.export is not None:
        parts.append(f"Export={printable(spec.export)}")
    if spec.begin is not None:
        parts.append(f"BeginTime={format_timestamp(spec.begin)}")
    if spec.signal is not None:
        parts.append(f"Signal={printable(spec.signal)}")
    lines = [f"   {' '.join(parts)}"] if parts else []
    if spec.mail_user is not None or spec.mail_type is not None:
        lines.append(
            f"   MailUser={printable(spec.mail_user or NULL)}"
            f" MailType={printable(spec.mail_type or 'NONE')}"
        )
    if spec.comment is not None:
        lines.append(f"   Comment={printable(spec.comment)}")
    if spec.reservation is not None:
        lines.append(f"   Reservation={printable(spec.reservation)}")
    if spec.params:  # a parameter sweep's task
        lines.append(f"   Params={printable(params_text(spec.params))}")
    return lines


def format_job_details_json(
    job: Job, events: Sequence[Event], now: float, gpu_usage: GpuUsage | None = None
) -> str:
    """A job's `--json`: its squeue JSON object plus its spec and its events.

    The spec gives env names only, never values; the events come oldest first. With
    `gpu_usage` measured, `gpu_mem_used_mib` (while it runs) and `gpu_mem_peak_mib`: its
    own processes' GPU memory.
    """
    spec = job.spec
    from gbatch.core.outputs import output_paths  # deferred: squeue needs none

    files = output_paths(job, job.node)
    data = job_to_dict(job, now)
    data.update(
        {
            "command": list(spec.command),
            "image": spec.image,
            "workdir": spec.workdir,
            "mounts": list(spec.mounts),
            "shm_size": spec.shm_size,
            "network": spec.network,  # null: the head's job_network
            "dependency": spec.dependency,
            "stdout": files[0] if files else None,
            "stderr": files[1] if files else None,
            "stdin": "/dev/null",
            "open_mode": spec.open_mode or "truncate",
            "env_names": [name for name, _ in spec.env],
            "secret_env_names": list(spec.secret_env),
            "retries": spec.retries,
            "requeue": spec.requeue,
            "nice": spec.nice,
            "held": job.held,
            # Across nodes (issue 32): the tasks, the nodes asked and refused, --exclusive.
            "num_tasks": _num_tasks(job),
            "nodelist_requested": list(spec.nodelist),
            "exclude": list(spec.exclude),
            "exclusive": spec.exclusive,
            "events": [
                {"time": e.time, "state": e.state.value, "reason": e.reason}
                for e in sorted(events, key=lambda e: e.time)
            ],
        }
    )
    if gpu_usage is not None and gpu_usage.own_measured:
        if job.state is JobState.RUNNING:
            data["gpu_mem_used_mib"] = gpu_usage.own_mem_mib
        data["gpu_mem_peak_mib"] = gpu_usage.own_mem_max_mib
    return as_json(data)


# Slurm's node state words for gbatch's (SUSPECT: silent for a while, no new jobs, as
# Slurm's NOT_RESPONDING, which it shows as IDLE* etc.; here plainly).
_SLURM_NODE_STATE = {
    NodeState.IDLE: "IDLE",
    NodeState.MIXED: "MIXED",
    NodeState.ALLOCATED: "ALLOCATED",
    NodeState.DRAINED: "DRAINED",
    NodeState.SUSPECT: "NOT_RESPONDING",
    NodeState.DOWN: "DOWN",
}


def _node_tres(cpus: int | None, mem_mb: int | None, gpus: int, nodes: int | None = None) -> str:
    """scontrol's TRES list of a node or partition: `cpu=8,mem=64000M,node=1,gres/gpu=2`,
    unknown parts left out (a job's, as sacct prints it, is _tres)."""
    parts = [] if cpus is None else [f"cpu={cpus}"]
    if mem_mb is not None:
        parts.append(f"mem={mem_mb}M")
    if nodes is not None:
        parts.append(f"node={nodes}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    return ",".join(parts)


def _job_gres(spec: JobSpec) -> str:
    """A job's GPUs as Gres= shows them: `gpu:a100:2`, a share `gpumem:20G`, `(null)`."""
    if not spec.gpus:
        return NULL
    if spec.gpu_mem_mb is not None:
        return job_share_text(spec.gpu_mem_mb, spec.gpu_shards, spec.gpu_type)
    return gres_text(spec.gpus, spec.gpu_type)


def format_node_details(node: NodeInfo) -> str:
    """One node as `scontrol show node` prints it: `NodeName=...`, then key=value lines.

    The lines are indented three spaces. CPUTot/RealMemory are what the node reported
    (`N/A` when it has not); CfgTRES what it has, AllocTRES what gbatch's jobs there hold.
    """
    cpus = "N/A" if node.cpus_total is None else str(node.cpus_total)
    memory = "N/A" if node.mem_total_mb is None else str(node.mem_total_mb)
    allocated = node.gpus_allocated
    # MIG slices by their type (Gres=gpu:a100_1g.10gb:7), not their card.
    types = [g.type for g in node.schedulable_gpus]
    used = [g.type for g in node.schedulable_gpus if g.index in node.allocations]
    features = ",".join(printable(f) for f in node.all_features) or NULL
    lines = [
        f"NodeName={printable(node.name)} NodeAddr={printable(node.address) or '(null)'}",
        f"   CPUAlloc={node.cpus_allocated} CPUTot={cpus}",
        f"   AvailableFeatures={features}",
        f"   ActiveFeatures={features}",
        f"   Gres={node_gres(types) if types else 'gpu:0'}"
        f" GresUsed={node_gres(types, used) if types else 'gpu:0'}",
        f"   GpuType={gpu_type(node)}",
        # Only for a node with shareable GPUs, so every other node's lines stay as they were.
        *([f"   Shares={'; '.join(card_text(c) for c in node.shares)}"] if node.shares else []),
        f"   RealMemory={memory} AllocMem={node.mem_allocated_mb}",
        f"   State={_SLURM_NODE_STATE[node.state]}",
        f"   Partitions={','.join(printable(p) for p in node.partitions) or '(null)'}",
        f"   CfgTRES={_node_tres(node.cpus_total, node.mem_total_mb, node.gpus_total)}",
        "   AllocTRES="
        + (
            _node_tres(node.cpus_allocated, node.mem_allocated_mb or None, allocated)
            if allocated or node.cpus_allocated
            else ""
        ),
        f"   Reason={printable(node.reason) if node.reason else '(null)'}",
    ]
    return as_text(lines)


def format_partition_details(partition: PartitionInfo, nodes: Sequence[NodeInfo]) -> str:
    """One partition as `scontrol show partition` prints it: its name, then key=value lines.

    The first line is `PartitionName=...`, the others are indented three spaces. Totals
    count its nodes as they report now (a node that has not reported adds nothing);
    State is UP while any node is up.
    """
    members = [n for n in nodes if n.name in partition.nodes]
    up = [n for n in members if n.state not in (NodeState.DOWN, NodeState.SUSPECT)]
    cpus = sum(n.cpus_total or 0 for n in members)
    memory = sum(n.mem_total_mb or 0 for n in members)
    gpus = sum(n.gpus_total for n in members)
    default_time = (
        "NONE" if partition.default_time is None else format_duration(partition.default_time)
    )
    # gbatch's own (Slurm has no such limit): shown only where an admin set it.
    interactive = (
        ""
        if partition.max_interactive_time is None
        else f" MaxInteractiveTime={format_duration(partition.max_interactive_time)}"
    )
    state = "UP" if up or not members else "DOWN"
    node_list = ",".join(printable(n) for n in partition.nodes)
    count = len(partition.nodes)
    if partition.cluster is not None:  # a Slurm cluster's: up while it answers
        state = "DOWN" if partition.down_reason else "UP"
        if partition.known_cluster_nodes:  # its own sinfo's
            node_list, count, cpus, memory, gpus = _cluster_totals(partition.known_cluster_nodes)
    lines = [
        f"PartitionName={printable(partition.name)}",
        f"   Default={'YES' if partition.default else 'NO'} DefaultTime={default_time} "
        f"MaxTime={format_duration(partition.max_time)}{interactive}",
        f"   Nodes={node_list or '(null)'}",
        f"   State={state} TotalCPUs={cpus} TotalNodes={count} TotalGPUs={gpus}",
        f"   TRES={_node_tres(cpus, memory, gpus, count)}",
    ]
    if partition.cluster is not None:
        lines.append(f"   Cluster={printable(partition.cluster)}")
        if partition.down_reason:
            lines.append(f"   Reason={printable(partition.down_reason)}")
    return as_text(lines)


# A GPU gres of a cluster's sinfo %G: `gpu:4`, `gpu:a100:4`, `gpu:a100:4(S:0-1)`, one of
# several (`gpu:2,shard:8`).
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


def _cluster_totals(groups: Sequence[ClusterNodes]) -> tuple[str, int, int, int, int]:
    """A cluster partition's nodes, and their count, CPUs, MiB and GPUs, as its sinfo said.

    The node list is one ranged list of all its lines' nodes (each line's as it is where
    one cannot be read)."""
    names = [name for group in groups for name in names_of(group.names)]
    cpus = sum((group.cpus or 0) * group.count for group in groups)
    memory = sum((group.mem_mb or 0) * group.count for group in groups)
    gpus = sum(sum(int(n) for n in _GPU_GRES.findall(group.gres)) * group.count for group in groups)
    count = sum(group.count for group in groups)
    return compress(printable(name) for name in names), count, cpus, memory, gpus


def format_qos_details(qos: Mapping[str, Any], allowed: Collection[str]) -> str:
    """One QOS (gbatch/core/qos.py describe) as `scontrol show qos` prints it.

    sacctmgr show qos's fields as key=value lines; UsableBy says who may submit to it,
    (yours) whether the caller may."""

    def limit(value: object) -> str:
        return "UNLIMITED" if value is None else str(value)

    users = qos["users"]
    usable = (
        ["ALL"]
        if users == "ALL"
        else [*(printable(u) for u in users), *("@" + printable(g) for g in qos["groups"])]
    )
    wall = qos["max_wall"]
    lines = [
        f"QOS={printable(qos['name'])} Priority={qos['priority']}"
        f" UsableBy={','.join(usable) or 'admins'}{' (yours)' if qos['name'] in allowed else ''}",
        f"   MaxTRESPerUser=gres/gpu={limit(qos['max_gpus'])}"
        f" MaxJobsPerUser={limit(qos['max_running_jobs'])}"
        f" MaxSubmitJobsPerUser={limit(qos['max_pending_jobs'])}"
        f" MaxWall={'UNLIMITED' if wall is None else format_duration(wall)}",
        f"   Preempt={','.join(printable(p) for p in qos['preempt']) or '(null)'}"
        f" PreemptMode={str(qos['preempt_mode']).upper()}"
        f" GraceTime={qos['grace_time']}"
        f" PreemptExemptTime={format_duration(qos['preempt_exempt_time'])}",
    ]
    return as_text(lines)
