"""A job across nodes: how its tasks lie on its nodes, and the variables each task sees.

Pure: the dispatcher (the runs of a job file's `nodes:`, one per node) and `srun`
inside an allocation (one task per node, or per --ntasks-per-node) both ask `Layout`
for the environment of each task, so a task sees the same names whichever started it:
Slurm's (SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NODEID, SLURM_PROCID, SLURM_LOCALID,
SLURM_NTASKS) and those torchrun and DeepSpeed read (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK). docs/multinode.md says which is which.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gbatch.core import hostlist
from gbatch.core.model import Job, JobSpec


def tasks_per_node(spec: JobSpec, nodes: int) -> tuple[int, ...]:
    """How many tasks each of `nodes` nodes runs, first node first (Slurm's block layout).

    --ntasks-per-node N: N on each. -n/--ntasks T alone: T spread as evenly as they go,
    the first nodes taking one more (5 on 2 nodes: 3, 2). Neither: one per node.
    """
    if nodes < 1:
        raise ValueError("a layout needs at least one node")
    if spec.ntasks_per_node is not None:
        return (spec.ntasks_per_node,) * nodes
    if spec.ntasks is not None and spec.ntasks >= nodes:
        each, more = divmod(spec.ntasks, nodes)
        return tuple(each + (1 if index < more else 0) for index in range(nodes))
    return (1,) * nodes


@dataclass(frozen=True)
class Layout:
    """The tasks of one job (or one step) across its nodes.

    `nodes`: node names, first node first (Job.node_names); `addresses`: how the other
    nodes reach each one (MASTER_ADDR is the first's); `tasks`: tasks on each node
    (tasks_per_node); `master_port`: a port free on the first node for the tasks'
    rendezvous (MASTER_PORT).
    """

    nodes: tuple[str, ...]
    addresses: tuple[str, ...]
    tasks: tuple[int, ...]
    master_port: int

    @classmethod
    def of(cls, job: Job, addresses: tuple[str, ...], master_port: int) -> Layout:
        """The layout of `job`'s allocation (its spec's tasks on its nodes)."""
        nodes = job.node_names
        if len(addresses) != len(nodes):
            raise ValueError(f"{len(nodes)} nodes but {len(addresses)} addresses")
        return cls(nodes, addresses, tasks_per_node(job.spec, len(nodes)), master_port)

    @property
    def ntasks(self) -> int:
        return sum(self.tasks)

    def first_rank(self, node_index: int) -> int:
        """The global rank (SLURM_PROCID) of node `node_index`'s first task."""
        return sum(self.tasks[:node_index])

    def node_env(self, node_index: int) -> dict[str, str]:
        """What every process on node `node_index` sees, whichever task it is."""
        nodelist = hostlist.compress(self.nodes)
        return {
            "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NODELIST": nodelist,
            "SLURM_JOB_NUM_NODES": str(len(self.nodes)),
            "SLURM_NNODES": str(len(self.nodes)),
            "SLURM_NODEID": str(node_index),
            "SLURMD_NODENAME": self.nodes[node_index],
            "SLURM_NTASKS": str(self.ntasks),
            "SLURM_NPROCS": str(self.ntasks),
            "SLURM_TASKS_PER_NODE": _tasks_text(self.tasks),
            "MASTER_ADDR": self.addresses[0],
            "MASTER_PORT": str(self.master_port),
            "WORLD_SIZE": str(self.ntasks),
            "NODE_RANK": str(node_index),
        }

    def task_env(self, node_index: int, local_id: int) -> dict[str, str]:
        """What task `local_id` (0-based) of node `node_index` sees: node_env and its ranks."""
        if not 0 <= local_id < self.tasks[node_index]:
            raise ValueError(f"node {node_index} runs {self.tasks[node_index]} tasks")
        rank = self.first_rank(node_index) + local_id
        return {
            **self.node_env(node_index),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(local_id),
            "RANK": str(rank),
            "LOCAL_RANK": str(local_id),
        }

    def step_task_env(
        self, node_index: int, local_id: int, job_nodes: tuple[str, ...]
    ) -> dict[str, str]:
        """task_env for a step's task (srun inside a job), this layout being the step's.

        The job's own node list stays SLURM_JOB_NODELIST (a step may run on some of its
        nodes); SLURM_NODELIST and SLURM_STEP_* are the step's, as Slurm's srun sets them."""
        env = self.task_env(node_index, local_id)
        env.update(
            {
                "SLURM_JOB_NODELIST": hostlist.compress(job_nodes),
                "SLURM_JOB_NUM_NODES": str(len(job_nodes)),
                "SLURM_STEP_NODELIST": env["SLURM_NODELIST"],
                "SLURM_STEP_NUM_NODES": str(len(self.nodes)),
                "SLURM_STEP_NUM_TASKS": str(self.ntasks),
                "SLURM_STEP_TASKS_PER_NODE": env["SLURM_TASKS_PER_NODE"],
            }
        )
        return env


def rank_label(rank: int, count: int) -> bytes:
    """srun -l's prefix of task `rank`'s lines (of `count`): `0: `, padded to the widest.

    `gbatch logs --label` prefixes an every-node run's lines with its node's rank alike."""
    width = len(str(max(count - 1, 0)))
    return f"{rank:>{width}}: ".encode()


def _tasks_text(tasks: tuple[int, ...]) -> str:
    """SLURM_TASKS_PER_NODE's form: runs of equal counts as N(xK): (2, 2, 1) -> 2(x2),1."""
    out: list[str] = []
    at = 0
    while at < len(tasks):
        run = 1
        while at + run < len(tasks) and tasks[at + run] == tasks[at]:
            run += 1
        out.append(f"{tasks[at]}(x{run})" if run > 1 else str(tasks[at]))
        at += run
    return ",".join(out)


# MASTER_PORT: a port of this range, chosen from the job id (master_port), so every run
# of a job (and srun's tasks in it) computes the same one without asking the node.
MASTER_PORT_BASE = 29500
MASTER_PORT_SPAN = 1000


def master_port(job_id: int) -> int:
    """The rendezvous port (MASTER_PORT) of job `job_id`: MASTER_PORT_BASE + id mod span.

    Two jobs share one only when their ids differ by a multiple of MASTER_PORT_SPAN
    and both have the same first node at once on the host's network (docs/multinode.md)."""
    return MASTER_PORT_BASE + job_id % MASTER_PORT_SPAN


def runs_everywhere(spec: JobSpec) -> bool:
    """Whether the job's command runs once on EVERY node of its allocation.

    A job file's `nodes:` (every_node) and every container job across nodes (a
    container has no Slurm form: nothing would start srun's tasks in the others). Else
    the batch script runs on the first node only, and the other nodes hold their GPUs
    for srun."""
    return spec.nodes > 1 and (spec.every_node or spec.image is not None)


def node_index(job: Job, name: str) -> int:
    """The position of node `name` in `job`'s allocation (SLURM_NODEID).

    0 for the first node, and for a job on one node or not on `name`."""
    names = job.node_names
    return names.index(name) if name in names[1:] else 0


def run_env(layout: Layout, index: int) -> dict[str, str]:
    """What the run of a job across nodes on node `index` sees beside its job's variables.

    One process per node, as task 0 of that node: RANK is the node's first rank,
    LOCAL_RANK 0, WORLD_SIZE every task of the layout; a node that runs more tasks
    (--ntasks-per-node) starts them itself (torchrun --nproc-per-node
    $SLURM_TASKS_PER_NODE...), or through srun. The batch script of the Slurm form is
    the run of node 0."""
    return layout.task_env(index, 0)


def run_at(job: Job, name: str, index: int) -> Job:
    """`job` as its run on node `name`, place `index` of its allocation, knows it.

    For a run the job no longer names (requeued, its nodes forgotten) whose container
    name still says its place (`gbatch-<job>-<attempt>-n<index>`): node_index(result,
    name) is `index`, so a node finds that run to kill and remove it."""
    if index == 0:
        return replace(job, node=name, peers=())
    # Placeholders: only this node's place matters to the node that is asked.
    before = tuple((f"?{k}", ()) for k in range(1, index))
    return replace(job, node="?0", peers=(*before, (name, ())))


# The most tasks one step starts on one node: each is a shim (or relay) and a socket
# pair in gbatchd, so `srun -n 100000` must not exhaust the head.
MAX_STEP_TASKS_PER_NODE = 128


def step_nodes(
    job_nodes: tuple[str, ...],
    spec: JobSpec,
    *,
    nodes: int | None = None,
    ntasks: int | None = None,
    ntasks_per_node: int | None = None,
    nodelist: tuple[str, ...] = (),
) -> tuple[tuple[str, int], ...]:
    """The nodes a step inside a job runs on and its tasks on each (srun -N/-n/-w inside it).

    Nothing asked: the job's own layout (tasks_per_node of its spec on all its nodes).
    `nodelist` (-w): those of the job's nodes, in the job's order, and with `nodes`
    (-N K) more of them up to K; `nodes` alone: the first K; `ntasks` alone: as many
    nodes as tasks, at most all. ValueError, its message one line naming the option,
    for a step larger than the allocation (Slurm refuses it the same way)."""
    have = len(job_nodes)
    shown = hostlist.compress(job_nodes)
    for name in nodelist:
        if name not in job_nodes:
            raise ValueError(
                f"-w/--nodelist: {name} is not a node of the job's allocation ({shown}). "
                "Name some of its nodes"
            )
    if nodes is not None and not 1 <= nodes <= have:
        raise ValueError(
            f"-N/--nodes {nodes}: the job's allocation has {have} node(s) ({shown}). "
            f"Ask for at most {have}"
        )
    if nodes is not None and nodelist and len(set(nodelist)) > nodes:
        raise ValueError(
            f"-w/--nodelist names {len(set(nodelist))} nodes and -N/--nodes asks {nodes}. "
            "Name at most that many"
        )
    if nodelist:
        chosen = [name for name in job_nodes if name in nodelist]
        for name in job_nodes:
            if nodes is None or len(chosen) >= nodes:
                break
            if name not in chosen:
                chosen.append(name)
        chosen.sort(key=job_nodes.index)
    elif nodes is not None:
        chosen = list(job_nodes[:nodes])
    elif ntasks is not None and ntasks_per_node is None:
        chosen = list(job_nodes[: max(1, min(ntasks, have))])
    else:
        chosen = list(job_nodes)
    if ntasks is not None and ntasks < len(chosen):
        raise ValueError(
            f"-n/--ntasks {ntasks} is fewer than the {len(chosen)} nodes asked: each node "
            "runs at least one task. Ask for fewer nodes (-N) or more tasks"
        )
    if ntasks is None and ntasks_per_node is None and not (nodes or nodelist):
        counts = tasks_per_node(spec, len(chosen))  # the job's own layout
    elif ntasks_per_node is not None:
        counts = (ntasks_per_node,) * len(chosen)
    else:
        counts = tasks_per_node(replace(spec, ntasks=ntasks, ntasks_per_node=None), len(chosen))
    if max(counts) > MAX_STEP_TASKS_PER_NODE:
        raise ValueError(
            f"-n/--ntasks-per-node: {max(counts)} tasks on one node, more than the "
            f"{MAX_STEP_TASKS_PER_NODE} a step starts on a node (each is a process "
            "gbatchd relays). Ask for fewer, and start more inside each task"
        )
    return tuple(zip(chosen, counts, strict=True))
