"""The planner: which pending jobs start now, where, on which GPUs, and why the rest wait.

Pure: `plan()` takes the queue, the nodes, the usage and the clock, and returns a Plan.
The daemon's loop applies the plan (gbatch/head/loop/schedule.py and dispatch.py); nothing
here touches the store.
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial

from gbatch.core.constraints import parse as parse_constraint
from gbatch.core.constraints import satisfied
from gbatch.core.gputypes import profile_of, type_matches, types_served
from gbatch.core.limits import Use, UserLimits
from gbatch.core.model import BEGIN_TIME_REASON, HELD_REASON, Job, JobSpec
from gbatch.core.plan import Assignment, NodeView, Plan
from gbatch.core.qos import PREEMPTED_BY as PREEMPTED_BY
from gbatch.core.qos import QosTable
from gbatch.core.reservations import MAINT_REASON, RESERVATION_REASON
from gbatch.head.fairshare import factors

# Pending reasons, spelled as Slurm's squeue prints them.
HELD = HELD_REASON
RESOURCES = "Resources"
PRIORITY = "Priority"
NODE_DOWN = "NodeDown"
BAD_CONSTRAINTS = "BadConstraints"
MAX_JOBS_PER_USER = "QOSMaxJobsPerUserLimit"
MAX_GPUS_PER_USER = "QOSMaxGRESPerUser"
BEGIN_TIME = BEGIN_TIME_REASON  # set by the daemon, which plans without it


def queue_order(pending: Sequence[Job], usage: Mapping[str, float]) -> list[Job]:
    """Return `pending` in the order the planner considers it.

    Fair-share factor descending (see gbatch.head.fairshare.factors, over the users with
    pending jobs), then `spec.effective_priority` descending, then submit time, then
    id: FIFO among equals. Job ids are unique, so the order is total.
    """
    share = factors(usage, {job.user for job in pending})
    # One key tuple per job, built once; the sort then compares tuples only.
    return sorted(
        pending,
        key=lambda job: (
            -share[job.user],
            -job.spec.effective_priority,
            job.submit_time,
            job.id,
        ),
    )


@dataclass(slots=True)
class _Reservation:
    start: float  # the earliest time the blocked job fits on its nodes
    # Each reserved node (an index into the available nodes: one for a one-node job,
    # `spec.nodes` for a job across nodes) -> the GPUs free there at `start` beyond what
    # the blocked job needs.
    spares: dict[int, int]
    # The blocked job's GPU type: `spares` count GPUs of that type only (None: any).
    gpu_type: str | None = None


def plan(
    pending: Sequence[Job],
    nodes: Sequence[NodeView],
    usage: Mapping[str, float],
    now: float,
    limits: Mapping[str, UserLimits] | None = None,
    use: Mapping[str, Use] | None = None,
    running: Sequence[Running] = (),
    rules: PreemptRules | None = None,
) -> Plan:
    """Decide which pending jobs start now and give every other one a reason.

    Preconditions: `pending` holds jobs in state PENDING (some `held`); `usage` maps
    user -> GPU-seconds already decayed to `now`, running jobs' usage included;
    `limits` maps a user to their limits (a user left out has none), `use` a user to
    what their jobs hold now (a user left out holds nothing).

    Jobs are taken in `queue_order`. A job with a partition (`spec.partition`) sees
    only the nodes in it (`NodeView.partitions`), and a job with a constraint
    (`spec.constraint`) only those whose `NodeView.features` satisfy it: every "node"
    below means such a node; a job without a partition (queued before partitions) sees
    every node. A job with a GPU type (`spec.gpu_type`) counts only the GPUs of that
    type (`NodeView.gpu_types`): "GPUs" below means those, and it gets only those; a job
    without one takes any GPUs, of any types. Each job either gets an Assignment or a
    reason:

    - "JobHeldUser": held; skipped.
    - "BadConstraints": asks more GPUs than any node (up or down) has in total, or no
      node satisfies its constraint.
    - "QOSMaxJobsPerUserLimit": its user's jobs on nodes (those held now plus those this
      plan starts) are at their max_running_jobs; "QOSMaxGRESPerUser": its GPUs (on all
      its nodes: `spec.total_gpus`) would take its user's past max_gpus. Skipped, like a
      held job: it takes no reservation and holds back no other user's job (nor a
      smaller job of its own user that fits).
    - "NodeDown": no available node is big enough for it (or none is available). A job
      with an image counts only nodes whose docker engine answers (`runs_containers`).
    - A job of one node that fits is placed on ONE node, never spread: the node with the
      fewest free GPUs left after placing it (best fit, so big blocks stay whole; ties
      by node name), on that node's lowest free GPU ids. A 0-GPU job goes to the first
      available node by name and gets no GPU ids. GPUs handed out leave the free set
      for the rest of the plan.
    - "Resources": cannot fit anywhere now. The first such job whose wait has an end
      gets a reservation: the earliest time T at which some available node will have
      enough GPUs, counting the GPUs free now and those released by time limits
      (`NodeView.releases`, plus the jobs this plan starts; inf never releases). Ties
      go to the node with the fewest GPUs to spare at T, then to name. Only that one
      job reserves, whatever its partition: one reservation keeps the plan cheap and
      protects the job that has waited longest at the top; a job whose wait has no end
      (its GPUs are held by jobs without time limits) gets "Resources" but no
      reservation, and the next blocked job may reserve instead.
    - "Priority": cannot start now and a higher-ordered job holds the reservation.

    `Plan.starts` holds the reserved job's expected start T (squeue --start); no other
    job gets an estimate.

    Preemption (`running`, the jobs on nodes, and `rules`): after the pass, `preemptions`
    picks the running jobs to stop for waiting jobs that may preempt them
    (`Plan.preemptions`); those and the jobs waiting on GPUs coming free from earlier
    victims get reason "Preemption".

    Jobs placed by node: a job across nodes (`spec.nodes` N > 1; `spec.gpus`, its CPUs
    and memory are per node), or one that names nodes (`spec.nodelist`, -w: all of them
    among its nodes; `spec.exclude`, -x: none of them) or wants them whole
    (`spec.exclusive`). Its "nodes" are the nodes of its pool, less -x's, whose GPUs
    (of its type), CPUs and memory in total could hold its per-node share.

    - "BadConstraints": fewer than N such nodes (up or down), or -w names a node that
      is not one, or more nodes than N.
    - "NodeDown": fewer than N of them are available (with an answering engine, for
      an image), or one of -w's is not.
    - It starts on N DISTINCT available nodes at once, or on none: never a part of
      them held while the rest come free. Each must have its GPUs free now, and its
      CPUs and memory; -w's nodes are among them, the others chosen best fit (the
      fewest GPUs free, ties by name; a 0-GPU job's by name). On a reserved node it
      must pass the backfill tests below, there. Its Assignment names the first node
      by name (where the batch script runs) and its GPUs; `peers` the others, each
      with its GPUs (the lowest free ids, as a one-node job's).
    - `spec.exclusive`: a node qualifies only with every GPU free and no job on it
      (`NodeView.busy`; nor one this plan placed there), and the job takes all of its
      GPUs (all of them count against its user's max_gpus); nothing else is placed
      there for the rest of the plan, nor while it runs (`NodeView.whole`).
    - "Resources" and "Priority" as for any job. The first such job that cannot start
      reserves across the nodes it will use: each candidate node's earliest time (now,
      for one it could start on now; else when its releases give it its GPUs, all of
      them for --exclusive), the N earliest (-w's among them; ties to the fewest GPUs
      to spare then, then to name), T the latest of theirs. The backfill tests hold on
      EACH reserved node, with that node's spare at T: a later job may start there only
      if it ends by T or takes no more than that spare. So no later job delays it.
    - A share of one GPU (`spec.gpu_mem_mb`) never spans nodes: across nodes, whole
      nodes or -w of several, "BadConstraints"; -w/-x of one node restrict where it
      goes.

    Backfill: once a reservation exists, later jobs still start anywhere they fit on
    other nodes. On the reserved node a job may start only if it cannot delay the
    reservation, by either of two tests: it ends by T (now + time_limit <= T; a job
    without a time limit never does), or the node will still have enough GPUs at T
    without the GPUs it takes (its GPU count is at most the spare at T, which it then
    uses up). Both tests are the same promise: the reserved job's GPUs are there at T.

    A reservation for a typed job counts only the GPUs of its type, at T and in `spare`:
    a job that takes none of them on the reserved node never delays it.

    Shares (`spec.gpu_mem_mb`, gbatch/core/shares.py): a shared job goes onto one
    shareable GPU with room for its share (`NodeView.share_room`; of its type, if it
    names one): the GPU with the least room that holds it (best fit, so whole GPUs stay
    whole; ties by node name, then GPU index), a whole free one leaving the free set.
    "BadConstraints": no shareable GPU of its pool (up or down) could ever hold it;
    "NodeDown": none of an available node; "Resources": none has the room now. A shared
    job never reserves; on the reserved node it may take a GPU the reservation counts
    at T (a free one, or one whose shares end by then) only if it ends by T, or within
    the spare, which it then uses up.

    Cost: one sort, then O(max GPUs per node) per job (O(nodes) per job placed by
    node): nodes sit in buckets by free count, and once no GPU is free a job costs a
    few comparisons (its reason only). The first job of a GPU type builds that type's
    buckets (O(nodes)); from then on each placement updates them too.
    """
    result = _Pass(nodes, now, limits, use)
    for job in queue_order(pending, usage):
        result.consider(job)
    made = result.plan()
    if not running or rules is None:
        return made
    found = preemptions(pending, made.reasons, made.assignments, nodes, running, now, rules)
    return with_preemptions(made, found)


class _Pass:
    """One plan() pass: the free GPUs, CPUs and memory, the reservation and the limits'
    counts as the jobs are taken in queue order. `consider` takes the next job; `plan`
    gives the result. The incremental planner drives the same pass (`Planner.plan`)."""

    # Slots: `consider` reads a dozen of these per job.
    __slots__ = (
        "assignments",
        "buckets",
        "caps",
        "free",
        "free_total",
        "groups",
        "holding",
        "moved",
        "nodes",
        "now",
        "placed",
        "pools",
        "reasons",
        "releases",
        "reservation",
        "room",
        "shares",
        "slices",
        "started",
        "starts",
        "taken",
        "totals",
        "typed",
        "types",
        "up",
    )

    def __init__(
        self,
        nodes: Sequence[NodeView],
        now: float,
        limits: Mapping[str, UserLimits] | None,
        use: Mapping[str, Use] | None,
    ) -> None:
        self.nodes = nodes
        self.now = now
        up = sorted((node for node in nodes if node.available), key=lambda node: node.name)
        self.up = up
        # One pool per partition the queue names (None: jobs queued before partitions,
        # the whole fleet), built when first needed: O(nodes) per partition, not per job.
        self.pools: dict[_PoolKey, _Pool] = {}
        self.free = [sorted(node.free_gpus) for node in up]
        self.totals = [node.gpus_total for node in up]
        self.releases = [[(t, n) for t, n in node.releases if t < math.inf] for node in up]
        # buckets[c]: indices (= name order) of the available nodes with exactly c GPUs
        # free.
        self.buckets: list[list[int]] = [[] for _ in range(max(map(len, self.free), default=0) + 1)]
        for index, ids in enumerate(self.free):
            self.buckets[len(ids)].append(index)
        self.free_total = sum(map(len, self.free))
        # CPUs and memory: counted only on nodes that report them (inf: unknown,
        # anything fits), and not at all, at no cost, when no node reports them.
        counted = any(n.cpus_total is not None or n.mem_total_mb is not None for n in nodes)
        self.room: _Room | None = _Room.of(up, nodes) if counted else None
        # The available nodes this pass placed a job on (an --exclusive job wants none).
        self.placed: set[int] = set()
        for index, node in enumerate(up):
            if node.whole:  # held by an --exclusive job: nothing else starts there
                self.close(index)
        # What a job placed by node (across nodes, -w, -x, --exclusive) may use, by
        # what it asks (_Pass.group).
        self.groups: dict[tuple[object, ...], _Group] = {}
        self.assignments: list[Assignment] = []
        self.reasons: dict[int, str] = {}
        self.reservation: _Reservation | None = None
        self.starts: dict[int, float] = {}
        self.caps = limits or {}
        self.holding = use or {}
        self.taken: dict[str, list[int]] = {}
        # GPU type -> its free GPUs and buckets, built at the first job of that type.
        self.typed: dict[str, _Typed] = {}
        # Per available node, GPU index -> type, read when the first typed job comes.
        self.types: list[dict[int, str]] | None = None
        # Per available node, its MIG slices free (NodeView.free_slices) as the pass
        # hands them out: read with `types` (only a typed job takes a slice).
        self.slices: list[list[int]] | None = None
        # (node, end, GPU ids) of the jobs this pass started that have a time limit: the
        # releases of a type whose buckets are built later.
        self.started: list[tuple[int, float, tuple[int, ...]]] = []
        # Shared GPUs (gbatch/core/shares.py) and their room, built at the first shared
        # job; and the releases of shared cards whose shares this pass put off, for the
        # typed buckets built later: (node, GPU index, old time, new time).
        self.shares: _Shares | None = None
        self.moved: list[tuple[int, int, float, float]] = []

    def plan(self) -> Plan:
        return Plan(assignments=tuple(self.assignments), reasons=self.reasons, starts=self.starts)

    def pool(self, key: _PoolKey) -> _Pool:
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = _pool(key, self.nodes, self.up)
        return pool

    def most_free(self, gpu_type: str | None = None) -> int:
        """The most GPUs (of `gpu_type`, None: any) free on one available node now.

        No job asking more can start for the rest of the pass (placements only take GPUs).
        """
        buckets = self.buckets if gpu_type is None else self.of_type(gpu_type).buckets
        for count in range(len(buckets) - 1, 0, -1):
            if buckets[count]:
                return count
        return 0

    def of_type(self, gpu_type: str) -> _Typed:
        """The free GPUs of `gpu_type` on each available node, as they are now in the pass."""
        typed = self.typed.get(gpu_type)
        if typed is None:
            if self.types is None:
                self.types = [dict(node.gpu_types) for node in self.up]
                self.slices = [list(node.free_slices) for node in self.up]
            assert self.slices is not None
            typed = self.typed[gpu_type] = _Typed.of(
                gpu_type,
                self.up,
                self.types,
                self.slices if profile_of(gpu_type) else self.free,
                self.started,
            )
            for node, index, old, new in self.moved:
                if self.types[node].get(index) == gpu_type:
                    _move(typed.releases[node], old, new)
        return typed

    def of_shares(self) -> _Shares:
        """The shared GPUs that may take a share, as they are now in the pass."""
        shares = self.shares
        if shares is None:
            shares = self.shares = _Shares.of(self.up, self.free)
        return shares

    def most_room(self, gpu_type: str | None = None) -> int:
        """The largest share any GPU (of `gpu_type`, None: any) may take now; 0: none.

        No shared job asking more can start for the rest of the pass (placements only
        take room)."""
        return self.of_shares().most(gpu_type)

    def take(self, target: int, ids: Sequence[int], end: float | None) -> None:
        """Hand out GPUs `ids` of available node `target` to a job ending at `end`."""
        slices = self.slices
        if slices is not None and slices[target] and ids and ids[0] in slices[target]:
            # MIG slices (a job's GPUs are all of one type): no whole card's count moves.
            slices[target] = [i for i in slices[target] if i not in ids]
            if end is not None:
                self.started.append((target, end, tuple(ids)))
            self.take_typed(target, ids, end)
            return
        free = self.free[target]
        left = (
            free[len(ids) :] if free[: len(ids)] == list(ids) else [i for i in free if i not in ids]
        )
        buckets = self.buckets
        buckets[len(free)].remove(target)
        bisect.insort(buckets[len(left)], target)
        self.free[target] = left
        self.free_total -= len(ids)
        if end is not None:
            self.releases[target].append((end, len(ids)))
            self.started.append((target, end, tuple(ids)))
        self.take_typed(target, ids, end)

    def take_typed(self, target: int, ids: Sequence[int], end: float | None) -> None:
        """`take`'s share in the typed buckets built so far: each takes the `ids` it serves.

        A MIG slice serves its type's pool and its profile's."""
        if self.typed:
            types = self.types
            assert types is not None
            of = types[target]
            by_type: dict[str, list[int]] = {}
            for gpu in ids:
                kind = of.get(gpu)
                if kind is not None:
                    by_type.setdefault(kind, []).append(gpu)
            for kind, taken in by_type.items():
                for name in types_served(kind):
                    typed = self.typed.get(name)
                    if typed is not None:
                        typed.take(target, taken, end)

    def reserved_cost(
        self, reservation: _Reservation, node: int, gpus: int, gpu_type: str | None
    ) -> int:
        """How many of the reservation's GPUs a job would take on reserved node `node`.

        A job of `gpus` GPUs of `gpu_type`: all it takes, unless the reservation is for a
        type, and then those of that type (a MIG profile's counts the slices of it); a
        job of MIG slices takes none of a reservation for whole cards."""
        kind = reservation.gpu_type
        if kind is None:
            return 0 if gpu_type is not None and profile_of(gpu_type) else gpus
        if kind == gpu_type:
            return gpus
        if gpu_type is None:
            ids = self.free[node][:gpus]
        elif profile_of(gpu_type) == kind or profile_of(kind) == gpu_type:
            ids = self.of_type(gpu_type).free[node][:gpus]  # one serves the other's slices
        else:
            return 0
        types = self.types
        assert types is not None  # a typed reservation built them
        return sum(type_matches(types[node].get(i, ""), kind) for i in ids)

    def settled_reason(self, job: Job) -> str:
        """The reason `consider` gives `job` once it has settled (see Planner).

        Settled: a reservation exists, its user has no limits and it asks more GPUs than
        `most_free`, so it cannot start, take a reservation or change anything, whatever
        comes between.
        """
        if job.held:
            return HELD
        spec = job.spec
        gpus = spec.gpus
        pool = self.pool(
            spec.partition
            if spec.gpu_type is None and spec.constraint is None
            else (spec.partition, spec.constraint, spec.gpu_type)
        )
        if (gpus > pool.largest_any or not pool.satisfiable) and self.nodes:
            return BAD_CONSTRAINTS
        room = self.room
        if room is not None and (
            job.spec.cpus_reserved > room.largest_cpus
            or (job.spec.memory_mb or 0) > room.largest_mem
        ):
            return BAD_CONSTRAINTS
        share = spec.gpu_mem_mb
        if share is not None:
            if pool.share_any is None:
                _pool_shares(pool, _pool_key(spec), self.nodes, self.up)
            assert pool.share_any is not None
            if (share > pool.share_any and self.nodes) or _share_across(spec):
                return BAD_CONSTRAINTS
            if share > (pool.share_with_containers if spec.image is not None else pool.share_up):
                return NODE_DOWN
            return RESOURCES  # a shared job never reserves, nor waits behind one
        if spec.nodes != 1 or spec.exclusive or spec.nodelist or spec.exclude:
            return self.group(spec).reason or PRIORITY
        if gpus > (pool.largest_with_containers if job.spec.image is not None else pool.largest_up):
            return NODE_DOWN
        return PRIORITY

    def consider(self, job: Job) -> None:
        """Start `job` or give it its reason (see plan()); jobs come in queue order."""
        reasons = self.reasons
        if job.held:
            reasons[job.id] = HELD
            return
        spec = job.spec
        gpus = spec.gpus
        needs_containers = spec.image is not None
        gpu_type = spec.gpu_type
        key: _PoolKey = (
            spec.partition
            if gpu_type is None and spec.constraint is None
            else (spec.partition, spec.constraint, gpu_type)
        )
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pool(key)
        if (gpus > pool.largest_any or not pool.satisfiable) and self.nodes:
            reasons[job.id] = BAD_CONSTRAINTS
            return
        room = self.room
        cpus, mem = 0, 0  # not looked at without room: the queue's cost stays as it was
        if room is not None:
            cpus, mem = job.spec.cpus_reserved, job.spec.memory_mb or 0
            if cpus > room.largest_cpus or mem > room.largest_mem:
                reasons[job.id] = BAD_CONSTRAINTS
                return
        # [jobs on nodes, GPUs] of a limited user, counting this plan's starts.
        held_by_user: list[int] | None = None
        cap = self.caps.get(job.user)
        if cap is not None:
            held_by_user = self.taken.get(job.user)
            if held_by_user is None:
                now_held = self.holding.get(job.user, Use())
                held_by_user = self.taken[job.user] = [now_held.running_jobs, now_held.gpus]
            if cap.max_running_jobs is not None and held_by_user[0] >= cap.max_running_jobs:
                reasons[job.id] = MAX_JOBS_PER_USER
                return
            if cap.max_gpus is not None and held_by_user[1] + spec.total_gpus > cap.max_gpus:
                reasons[job.id] = MAX_GPUS_PER_USER
                return
        if spec.gpu_mem_mb is not None:
            self.consider_share(job, pool, cpus, mem, held_by_user)
            return
        if spec.nodes != 1 or spec.exclusive or spec.nodelist or spec.exclude:
            self.consider_group(job, pool, cpus, mem, held_by_user)
            return
        if gpus > (pool.largest_with_containers if needs_containers else pool.largest_up):
            reasons[job.id] = NODE_DOWN
            return
        usable = pool.with_containers if needs_containers else pool.members
        up = self.up
        reservation = self.reservation
        if gpus <= 0:
            first = next(
                (
                    i
                    for i in range(len(up))
                    if (usable is None or usable[i]) and (room is None or room.fits(i, cpus, mem))
                ),
                None,
            )
            if first is None:  # no node has the CPUs or memory now; reservations are by GPUs
                reasons[job.id] = PRIORITY if reservation is not None else RESOURCES
                return
            if room is not None:
                room.take(first, cpus, mem)
            self.placed.add(first)
            self.assignments.append(Assignment(job.id, up[first].name, ()))
            if held_by_user is not None:
                held_by_user[0] += 1
            return
        now = self.now
        typed = None if gpu_type is None else self.of_type(gpu_type)
        if gpus <= (self.free_total if typed is None else typed.free_total):
            # The reservation's GPUs it would take on each reserved node.
            cost: int | dict[int, int] = (
                gpus
                if reservation is None or (reservation.gpu_type is None and typed is None)
                else {
                    node: self.reserved_cost(reservation, node, gpus, gpu_type)
                    for node in reservation.spares
                }
            )
            target = _best_fit(
                gpus,
                job,
                self.buckets if typed is None else typed.buckets,
                reservation,
                now,
                usable,
                room,
                cpus,
                mem,
                cost,
            )
            if target is not None:
                if room is not None:
                    room.take(target, cpus, mem)
                ids = (self.free if typed is None else typed.free)[target][:gpus]
                end = None if job.time_limit is None else now + job.time_limit
                if typed is None:  # the lowest free ids, as before types
                    free = self.free[target]
                    buckets = self.buckets
                    buckets[len(free)].remove(target)
                    bisect.insort(buckets[len(free) - gpus], target)
                    self.free[target] = free[gpus:]
                    self.free_total -= gpus
                    if end is not None:
                        self.releases[target].append((end, gpus))
                        self.started.append((target, end, tuple(ids)))
                    if self.typed:
                        self.take_typed(target, ids, end)
                else:
                    self.take(target, ids, end)
                if self.shares is not None:  # whole GPUs taken take no shares
                    self.shares.drop(target, ids)
                if (
                    reservation is not None
                    and target in reservation.spares
                    and not _ends_by(job, now, reservation.start)
                ):
                    reservation.spares[target] -= cost if isinstance(cost, int) else cost[target]
                self.placed.add(target)
                self.assignments.append(Assignment(job.id, up[target].name, tuple(ids)))
                if held_by_user is not None:
                    held_by_user[0] += 1
                    held_by_user[1] += gpus
                return
        if reservation is not None:
            reasons[job.id] = PRIORITY
            return
        # An image job reserves only while every engine answers: the reserved node must
        # be able to run it when its GPUs come free.
        if gpus < pool.unreservable and (not needs_containers or pool.all_run_containers):
            if typed is None:
                reservation = _reserve(
                    gpus, self.free, self.totals, self.releases, pool.members, room, cpus, mem
                )
            else:
                reservation = _reserve(
                    gpus, typed.free, typed.totals, typed.releases, pool.members, room, cpus, mem
                )
            if reservation is None:
                pool.unreservable = gpus
            else:
                reservation.gpu_type = gpu_type
                self.reservation = reservation
                self.starts[job.id] = reservation.start
        reasons[job.id] = RESOURCES

    def close(self, index: int) -> None:
        """Nothing more starts on available node `index` (an --exclusive job holds it)."""
        room = self.room
        if room is None:  # no node reports CPUs or memory: every other one fits anything
            room = self.room = _Room.of(self.up, self.nodes)
        room.cpus[index] = room.mem[index] = -math.inf

    def group(self, spec: JobSpec) -> _Group:
        """What a job placed by node (across nodes, -w, -x, --exclusive) may use.

        With the reason it may never start (BadConstraints) or not now (NodeDown)."""
        key = (
            spec.partition,
            spec.constraint,
            spec.gpu_type,
            spec.gpus,
            spec.nodes,
            spec.cpus_reserved,
            spec.memory_mb or 0,
            spec.image is not None,
            spec.nodelist,
            spec.exclude,
        )
        found = self.groups.get(key)
        if found is None:
            found = self.groups[key] = _Group.of(spec, self.nodes, self.up)
        return found

    def consider_group(
        self, job: Job, pool: _Pool, cpus: int, mem: int, held_by_user: list[int] | None
    ) -> None:
        """Start `job`, placed by node, or give it its reason (see plan()).

        A job across nodes (`spec.nodes`), or one that names nodes (-w, -x) or wants
        them whole (--exclusive). `consider`'s part, past the checks of its constraint,
        CPUs, memory and limits."""
        spec = job.spec
        group = self.group(spec)
        if group.reason is not None:
            self.reasons[job.id] = group.reason
            return
        gpus, exclusive, gpu_type = spec.gpus, spec.exclusive, spec.gpu_type
        typed = None if gpu_type is None else self.of_type(gpu_type)
        free = self.free if typed is None else typed.free
        whole, totals, up, room = self.free, self.totals, self.up, self.room
        now = self.now
        reservation = self.reservation
        spares = (
            None
            if reservation is None or _ends_by(job, now, reservation.start)
            else reservation.spares
        )
        # The nodes it could start on now, each with what it takes of the reservation.
        fits: list[int] = []
        costs: dict[int, int] = {}
        for index in group.nodes:
            if room is not None and not room.fits(index, cpus, mem):
                continue
            if len(free[index]) < gpus:
                continue
            if exclusive and (
                len(whole[index]) < totals[index] or up[index].busy or index in self.placed
            ):
                continue
            if spares is not None and index in spares:
                assert reservation is not None
                cost = (
                    self.reserved_cost(reservation, index, len(whole[index]), None)
                    if exclusive
                    else self.reserved_cost(reservation, index, gpus, gpu_type)
                )
                if cost > spares[index]:
                    continue
                costs[index] = cost
            fits.append(index)
        count = spec.nodes
        required = group.required
        chosen: list[int] | None = None
        if len(fits) >= count and set(required) <= set(fits):
            rest = [index for index in fits if index not in required]
            if gpus or exclusive:  # best fit: the fewest GPUs free (then by name)
                rest.sort(key=lambda index: (len(free[index]), index))
            chosen = sorted((*required, *rest[: count - len(required)]))
        if chosen is None:
            self.wait_group(job, pool, group, fits, cpus, mem)
            return
        # Whole nodes: every GPU of them counts against its user's max_gpus.
        cap = self.caps.get(job.user)
        if (
            exclusive
            and held_by_user is not None
            and cap is not None
            and cap.max_gpus is not None
            and held_by_user[1] + sum(len(whole[index]) for index in chosen) > cap.max_gpus
        ):
            self.reasons[job.id] = MAX_GPUS_PER_USER
            return
        end = None if job.time_limit is None else now + job.time_limit
        placements = []
        for index in chosen:
            if room is not None:
                room.take(index, cpus, mem)
            ids = list(whole[index]) if exclusive else free[index][:gpus]
            if ids:
                self.take(index, ids, end)
                if self.shares is not None:
                    self.shares.drop(index, ids)
            if index in costs:
                assert reservation is not None
                reservation.spares[index] -= costs[index]
            self.placed.add(index)
            if exclusive:
                self.close(index)
            placements.append((up[index].name, tuple(ids)))
        (node, first), *peers = placements
        self.assignments.append(Assignment(job.id, node, first, tuple(peers)))
        if held_by_user is not None:
            held_by_user[0] += 1
            held_by_user[1] += sum(len(taken) for _, taken in placements)

    def wait_group(
        self, job: Job, pool: _Pool, group: _Group, ready: Sequence[int], cpus: int, mem: int
    ) -> None:
        """`consider_group`'s reason for a job that cannot start now, and its reservation.

        It reserves across the nodes it will use when it is the first such job.
        `ready`: the nodes it could start on now."""
        if self.reservation is not None:
            self.reasons[job.id] = PRIORITY
            return
        spec = job.spec
        # An image job reserves only while every engine answers (see consider).
        if spec.image is None or pool.all_run_containers:
            usable = [False] * len(self.up)
            for index in group.nodes:
                usable[index] = True
            typed = None if spec.exclusive or spec.gpu_type is None else self.of_type(spec.gpu_type)
            reservation = _reserve(
                spec.gpus,
                self.free if typed is None else typed.free,
                self.totals if typed is None else typed.totals,
                self.releases if typed is None else typed.releases,
                usable,
                self.room,
                cpus,
                mem,
                count=spec.nodes,
                required=group.required,
                whole=spec.exclusive,
                ready=ready,
                now=self.now,
            )
            if reservation is not None:
                reservation.gpu_type = None if typed is None else typed.name
                self.reservation = reservation
                self.starts[job.id] = reservation.start
        self.reasons[job.id] = RESOURCES

    def consider_share(
        self, job: Job, pool: _Pool, cpus: int, mem: int, held_by_user: list[int] | None
    ) -> None:
        """Start shared job `job` (`spec.gpu_mem_mb`) or give it its reason (see plan()).

        `consider`'s part, past the checks of its constraint, CPUs, memory and limits."""
        spec = job.spec
        share = spec.gpu_mem_mb
        assert share is not None
        needs_containers = spec.image is not None
        if pool.share_any is None:
            _pool_shares(pool, _pool_key(spec), self.nodes, self.up)
        assert pool.share_any is not None
        if (share > pool.share_any and self.nodes) or _share_across(spec):
            self.reasons[job.id] = BAD_CONSTRAINTS
            return
        if share > (pool.share_with_containers if needs_containers else pool.share_up):
            self.reasons[job.id] = NODE_DOWN
            return
        shares = self.of_shares()
        now = self.now
        end = None if job.time_limit is None else now + job.time_limit
        reservation = self.reservation
        # A share that ends by the reservation's start never delays it; else on the
        # reserved node it costs the reservation a GPU it counted at its start.
        bound = (
            reservation.start
            if reservation is not None and not _ends_by(job, now, reservation.start)
            else None
        )
        usable = pool.with_containers if needs_containers else pool.members
        if spec.nodelist or spec.exclude:  # -w names one node at most here
            usable = [
                (usable is None or usable[index])
                and node.name not in spec.exclude
                and (not spec.nodelist or node.name in spec.nodelist)
                for index, node in enumerate(self.up)
            ]
        found = shares.best_fit(
            share,
            spec.gpu_type,
            usable,
            self.room,
            cpus,
            mem,
            None if bound is None or reservation is None else reservation.spares,
            math.inf if bound is None else bound,
            None if reservation is None else reservation.gpu_type,
        )
        if found is None:
            self.reasons[job.id] = RESOURCES
            return
        target, index, release, costs = found
        if self.room is not None:
            self.room.take(target, cpus, mem)
        if release == -math.inf:  # a whole free GPU: it leaves the free ones
            self.take(target, (index,), end)
        else:
            later = max(release, math.inf if end is None else end)
            if later != release:
                _move(self.releases[target], release, later)
                kind = self.types[target].get(index) if self.types is not None else None
                if kind is not None and kind in self.typed:
                    _move(self.typed[kind].releases[target], release, later)
                self.moved.append((target, index, release, later))
        shares.take(target, index, share, math.inf if end is None else end)
        if costs and reservation is not None:
            reservation.spares[target] -= 1
        self.placed.add(target)
        self.assignments.append(Assignment(job.id, self.up[target].name, (index,)))
        if held_by_user is not None:
            held_by_user[0] += 1
            held_by_user[1] += 1


def _move(releases: list[tuple[float, int]], old: float, new: float) -> None:
    """A shared GPU's release moved from `old` to `new` (inf: none) in `releases`."""
    if old < math.inf:
        releases.remove((old, 1))
    if new < math.inf:
        releases.append((new, 1))


@dataclass(slots=True)
class _Card:
    """A shared GPU as a pass hands out room on it."""

    room: int  # MiB a share may take
    # When its shares end: -inf for a whole free GPU (no shares); inf for never, or for
    # a GPU no reservation counts (held by what gbatch did not start).
    release: float
    type: str  # its GPU type, "" for none


@dataclass(slots=True)
class _Shares:
    """The shared GPUs of the available nodes that may take a share, as a pass hands
    out room on them: by (node index, GPU index), and those with room sorted by (room,
    node, GPU), so the best fit is the first that holds a share."""

    cards: dict[tuple[int, int], _Card]
    order: list[tuple[int, int, int]]

    @classmethod
    def of(cls, up: Sequence[NodeView], free: Sequence[Sequence[int]]) -> _Shares:
        cards: dict[tuple[int, int], _Card] = {}
        order = []
        for node_index, node in enumerate(up):
            if not node.share_room:
                continue
            types = dict(node.gpu_types)
            free_now = free[node_index]
            for index, room, release in node.share_room:
                if release == -math.inf and index not in free_now:
                    if index in node.free_gpus:
                        continue  # taken whole by a job this pass started
                    release = math.inf  # held by what gbatch did not start: never free
                cards[(node_index, index)] = _Card(room, release, types.get(index, ""))
                order.append((room, node_index, index))
        order.sort()
        return cls(cards, order)

    def most(self, gpu_type: str | None) -> int:
        """The most room on one GPU (of `gpu_type`; None: any); 0: none."""
        order = self.order
        if gpu_type is None:
            return order[-1][0] if order else 0
        cards = self.cards
        for position in range(len(order) - 1, -1, -1):
            room, node, index = order[position]
            if cards[(node, index)].type == gpu_type:
                return room
        return 0

    def best_fit(
        self,
        share: int,
        gpu_type: str | None,
        usable: Sequence[bool] | None,
        room: _Room | None,
        cpus: int,
        mem: int,
        spares: Mapping[int, int] | None,
        start: float,
        reserved_type: str | None,
    ) -> tuple[int, int, float, bool] | None:
        """The GPU with the least room that holds `share` MiB (ties by node, then GPU).

        As (node, GPU, its release, whether it costs the reservation a GPU); None when
        none may take it. `spares` (None: no cost anywhere), `start`: the reserved
        nodes with what each spares, and their start, for a share that does not end by
        then; on a reserved node it may not take a GPU that the reservation counts at
        its start (of `reserved_type`, None: any) past that node's spare."""
        order = self.order
        cards = self.cards
        for position in range(bisect.bisect_left(order, (share, -1, -1)), len(order)):
            _, node, index = order[position]
            card = cards[(node, index)]
            if gpu_type is not None and card.type != gpu_type:
                continue
            if usable is not None and not usable[node]:
                continue
            if room is not None and not room.fits(node, cpus, mem):
                continue
            costs = (
                spares is not None
                and node in spares
                and card.release <= start
                and (reserved_type is None or card.type == reserved_type)
            )
            if costs and spares is not None and spares[node] < 1:
                continue
            return node, index, card.release, costs
        return None

    def take(self, node: int, index: int, share: int, end: float) -> None:
        """A share of `share` MiB on GPU `index` of `node`, ending at `end` (inf: never)."""
        card = self.cards[(node, index)]
        self.order.remove((card.room, node, index))
        card.room -= share
        card.release = max(card.release, end)
        if card.room > 0:
            bisect.insort(self.order, (card.room, node, index))

    def drop(self, node: int, ids: Iterable[int]) -> None:
        """GPUs of `node` taken whole by a job of whole GPUs: they take no share."""
        for index in ids:
            card = self.cards.pop((node, index), None)
            if card is not None and card.room > 0:
                self.order.remove((card.room, node, index))


# What a job's pool is keyed by: its partition alone (the common case, no type and no
# constraint), else (partition, constraint, GPU type).
_PoolKey = str | None | tuple[str | None, str | None, str | None]


def _pool_key(spec: JobSpec) -> _PoolKey:
    if spec.gpu_type is None and spec.constraint is None:
        return spec.partition
    return (spec.partition, spec.constraint, spec.gpu_type)


@dataclass(slots=True)
class _Pool:
    """The nodes a partition, a constraint and a GPU type offer a plan (indices into the
    available nodes); its GPU counts are of that type."""

    members: list[bool] | None  # None: every available node
    with_containers: list[bool]  # members whose docker engine answers
    all_run_containers: bool  # every available member's engine answers
    largest_any: int  # GPUs of its largest node, up or down
    largest_up: int  # of its largest available node; -1 with none available
    largest_with_containers: int
    # Placements only ever shrink what a node can reach in finite time, so once a
    # reservation for g GPUs proves impossible, so does every later one for >= g.
    unreservable: float = math.inf
    # Some node (up or down) satisfies its constraint; always, without one.
    satisfiable: bool = True
    # The largest share one shareable GPU (of its type) could take, on any node (up or
    # down), on an available one, on one whose engine answers; 0: none (-1 with no
    # node available). None until its first shared job (_pool_shares).
    share_any: int | None = None
    share_up: int = -1
    share_with_containers: int = -1


def _pool(key: _PoolKey, nodes: Sequence[NodeView], up: Sequence[NodeView]) -> _Pool:
    if isinstance(key, tuple):
        partition, constraint, gpu_type = key
    else:
        partition, constraint, gpu_type = key, None, None
    expr = None if constraint is None else parse_constraint(constraint)

    def inside(node: NodeView) -> bool:
        return (partition is None or partition in node.partitions) and (
            expr is None or satisfied(expr, node.features)
        )

    if gpu_type is None:

        def size(node: NodeView) -> int:
            return node.gpus_total

    else:

        def size(node: NodeView) -> int:
            return _type_counts(node.gpu_types).get(gpu_type, 0)

    members = [inside(node) for node in up]
    with_containers = []
    all_run_containers = True
    # With no node up at all even a 0-GPU job fails the `gpus > largest_up` test.
    largest_up = largest_with_containers = -1
    for node, member in zip(up, members, strict=True):
        with_containers.append(member and node.runs_containers)
        if member:
            count = size(node)
            largest_up = max(largest_up, count)
            if node.runs_containers:
                largest_with_containers = max(largest_with_containers, count)
            else:
                all_run_containers = False
    largest_any, satisfiable = 0, expr is None
    for node in nodes:
        if inside(node):
            largest_any, satisfiable = max(largest_any, size(node)), True
    return _Pool(
        members=None if partition is None and expr is None else members,
        with_containers=with_containers,
        all_run_containers=all_run_containers,
        largest_any=largest_any,
        largest_up=largest_up,
        largest_with_containers=largest_with_containers,
        satisfiable=satisfiable,
    )


def _pool_shares(
    pool: _Pool, key: _PoolKey, nodes: Sequence[NodeView], up: Sequence[NodeView]
) -> None:
    """Fill in `pool`'s largest shares (its share_* fields), at its first shared job: a
    queue without shares never pays for them."""
    gpu_type = key[2] if isinstance(key, tuple) else None
    members = pool.members
    share_any = 0
    if any(node.shareable for node in nodes):
        partition = key[0] if isinstance(key, tuple) else key
        constraint = key[1] if isinstance(key, tuple) else None
        expr = None if constraint is None else parse_constraint(constraint)
        for node in nodes:
            if (
                node.shareable
                and (partition is None or partition in node.partitions)
                and (expr is None or satisfied(expr, node.features))
            ):
                share_any = max(share_any, _largest_share(node, gpu_type))
    share_up = share_with_containers = -1
    for index, node in enumerate(up):
        if members is None or members[index]:
            largest = _largest_share(node, gpu_type) if node.shareable else 0
            share_up = max(share_up, largest)
            if node.runs_containers:
                share_with_containers = max(share_with_containers, largest)
    pool.share_any = share_any
    pool.share_up = share_up
    pool.share_with_containers = share_with_containers


def _largest_share(node: NodeView, gpu_type: str | None) -> int:
    """The largest share one of `node`'s shareable GPUs (of `gpu_type`) could take."""
    if gpu_type is None:
        return max((mib for _, mib in node.shareable), default=0)
    types = dict(node.gpu_types)
    return max((mib for i, mib in node.shareable if types.get(i) == gpu_type), default=0)


@lru_cache(maxsize=1024)
def _type_counts(gpu_types: tuple[tuple[int, str], ...]) -> dict[str, int]:
    """A node's GPUs by the type asked (NodeView.gpu_types): the same tuple every pass,
    counted once. A MIG slice counts for its type and for its profile alone.

    Not to be changed by the caller: it is shared."""
    counts: dict[str, int] = {}
    for _, kind in gpu_types:
        for name in types_served(kind):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _serves_profile(profile: str, kind: str | None) -> bool:
    return kind is not None and type_matches(kind, profile)


@dataclass(slots=True)
class _Typed:
    """The GPUs of one type on each available node (by index), as a pass hands them out:
    what `_Pass.free`, `buckets`, `totals` and `releases` are for every GPU."""

    name: str
    free: list[list[int]]
    buckets: list[list[int]]
    totals: list[int]
    releases: list[list[tuple[float, int]]]
    free_total: int

    @classmethod
    def of(
        cls,
        name: str,
        up: Sequence[NodeView],
        types: Sequence[Mapping[int, str]],
        free: Sequence[Sequence[int]],
        started: Iterable[tuple[int, float, tuple[int, ...]]],
    ) -> _Typed:
        """The pool of type `name` from `free`, as the pass stands.

        `free`: each node's whole cards free, or its MIG slices free for a slice's type or
        a profile."""
        # Only a profile alone serves several types; any other name, its own alone.
        if profile_of(name) == name:
            serves: Callable[[str | None], bool] = partial(_serves_profile, name)
        else:
            serves = partial(operator.eq, name)
        mine = [[i for i in ids if serves(types[n].get(i))] for n, ids in enumerate(free)]
        releases = [
            [(t, count) for t, kind, count in node.typed_releases if serves(kind) and t < math.inf]
            for node in up
        ]
        for index, end, ids in started:
            count = sum(serves(types[index].get(i)) for i in ids)
            if count:
                releases[index].append((end, count))
        totals = [_type_counts(node.gpu_types).get(name, 0) for node in up]
        buckets: list[list[int]] = [[] for _ in range(max(totals, default=0) + 1)]
        for index, held in enumerate(mine):
            buckets[len(held)].append(index)
        return cls(name, mine, buckets, totals, releases, sum(map(len, mine)))

    def take(self, target: int, ids: Sequence[int], end: float | None) -> None:
        if not ids:
            return
        free = self.free[target]
        left = [i for i in free if i not in ids]
        self.buckets[len(free)].remove(target)
        bisect.insort(self.buckets[len(left)], target)
        self.free[target] = left
        self.free_total -= len(ids)
        if end is not None:
            self.releases[target].append((end, len(ids)))


def _share_across(spec: JobSpec) -> bool:
    """A share of one GPU asked across nodes or of whole nodes: never placed."""
    return spec.nodes != 1 or spec.exclusive or len(spec.nodelist) > 1


@dataclass(slots=True)
class _Group:
    """What a job placed by node may use (`_Pass.group`), and why it may not start.

    The available nodes that could ever hold it (its partition's, constraint's, with an
    engine for an image, not -x's, of GPUs enough, of CPUs and memory enough in total;
    indices in name order), -w's among them, and its reason: BadConstraints, NodeDown,
    None."""

    nodes: list[int]
    required: tuple[int, ...]
    reason: str | None

    @classmethod
    def of(cls, spec: JobSpec, nodes: Sequence[NodeView], up: Sequence[NodeView]) -> _Group:
        expr = None if spec.constraint is None else parse_constraint(spec.constraint)
        cpus, mem = spec.cpus_reserved, spec.memory_mb or 0
        gpus, gpu_type = spec.gpus, spec.gpu_type
        excluded = frozenset(spec.exclude)

        def holds(node: NodeView) -> bool:
            size = (
                node.gpus_total
                if gpu_type is None
                else _type_counts(node.gpu_types).get(gpu_type, 0)
            )
            return (
                (spec.partition is None or spec.partition in node.partitions)
                and (expr is None or satisfied(expr, node.features))
                and node.name not in excluded
                and size >= gpus
                and (node.cpus_total is None or node.cpus_total >= cpus)
                and (node.mem_total_mb is None or node.mem_total_mb >= mem)
            )

        wanted = frozenset(spec.nodelist)
        ever = {node.name for node in nodes if holds(node)}
        reason = None
        if len(wanted) > spec.nodes or len(ever) < spec.nodes or not wanted <= ever:
            reason = BAD_CONSTRAINTS
        image = spec.image is not None
        usable = [
            index
            for index, node in enumerate(up)
            if holds(node) and (node.runs_containers or not image)
        ]
        required = tuple(index for index in usable if up[index].name in wanted)
        if reason is None and (len(usable) < spec.nodes or len(required) < len(wanted)):
            reason = NODE_DOWN
        return cls(usable, required, reason)


@dataclass(slots=True)
class _Room:
    """CPUs and memory (MiB) free on each available node (by index), inf where the node
    does not report them, and the most any node (up or down) has in total."""

    cpus: list[float]
    mem: list[float]
    cpus_total: list[float]
    mem_total: list[float]
    largest_cpus: float
    largest_mem: float

    @classmethod
    def of(cls, up: Sequence[NodeView], nodes: Sequence[NodeView]) -> _Room:
        inf = math.inf

        def total(value: int | None) -> float:
            return inf if value is None else value

        return cls(
            cpus=[inf if n.cpus_total is None else n.free_cpus for n in up],
            mem=[inf if n.mem_total_mb is None else n.free_mem_mb for n in up],
            cpus_total=[total(n.cpus_total) for n in up],
            mem_total=[total(n.mem_total_mb) for n in up],
            # Over every node, up or down: a node that has not reported is unknown
            # (inf), so it never makes a job BadConstraints.
            largest_cpus=max((total(n.cpus_total) for n in nodes), default=inf),
            largest_mem=max((total(n.mem_total_mb) for n in nodes), default=inf),
        )

    def fits(self, index: int, cpus: int, mem: int) -> bool:
        return self.cpus[index] >= cpus and self.mem[index] >= mem

    def take(self, index: int, cpus: int, mem: int) -> None:
        self.cpus[index] -= cpus
        self.mem[index] -= mem


@dataclass(frozen=True)
class NodeSize:
    """A node's size as its last report gave it (None: not reported by its agent).

    With its GPUs by type (type, count: those that have one) and its features."""

    name: str
    gpus: int
    cpus: int | None
    mem_mb: int | None
    gpu_types: tuple[tuple[str, int], ...] = ()
    features: frozenset[str] = frozenset()
    # Its shareable GPUs: (type, "" for none; the largest share each could take).
    shares: tuple[tuple[str, int], ...] = ()

    def largest_share(self, gpu_type: str | None) -> int:
        """The largest share one of its GPUs (of `gpu_type`; None: any) could take.

        0: none is shareable."""
        return max(
            (mib for kind, mib in self.shares if gpu_type is None or kind == gpu_type), default=0
        )

    def gpus_of(self, gpu_type: str | None) -> int:
        """Its GPUs of `gpu_type` (a MIG profile alone: its slices of it; None: whole cards)."""
        if gpu_type is None:
            return self.gpus
        return sum(count for kind, count in self.gpu_types if type_matches(kind, gpu_type))

    def satisfies(self, constraint: str | None) -> bool:
        return constraint is None or satisfied(parse_constraint(constraint), self.features)

    def holds(
        self,
        gpus: int,
        cpus: int,
        mem_mb: int,
        gpu_type: str | None = None,
        constraint: str | None = None,
        gpu_mem: int | None = None,
    ) -> bool:
        """Whether a job of this size fits the node when nothing else runs there.

        `gpu_mem`: a share of one GPU of that many MiB (gbatch/core/shares.py)."""
        return (
            (
                gpus <= self.gpus_of(gpu_type)
                if gpu_mem is None
                else gpu_mem <= self.largest_share(gpu_type)
            )
            and (self.cpus is None or cpus <= self.cpus)
            and (self.mem_mb is None or mem_mb <= self.mem_mb)
            and self.satisfies(constraint)
        )


def _ends_by(job: Job, now: float, start: float) -> bool:
    return job.time_limit is not None and now + job.time_limit <= start


def _best_fit(
    gpus: int,
    job: Job,
    buckets: list[list[int]],
    reservation: _Reservation | None,
    now: float,
    usable: Sequence[bool] | None = None,
    room: _Room | None = None,
    cpus: int = 1,
    mem: int = 0,
    cost: int | Mapping[int, int] | None = None,
) -> int | None:
    """Index of the node with the fewest free GPUs >= `gpus` that `job` may use, or None.
    `usable`, when given, rules out the nodes it marks False; `room`, those without
    `cpus` CPUs and `mem` MiB free. `cost`: the reservation's GPUs it would take on a
    reserved node (default `gpus`), or on each reserved node."""
    if cost is None:
        cost = gpus
    spares = (
        None if reservation is None or _ends_by(job, now, reservation.start) else reservation.spares
    )
    for count in range(gpus, len(buckets)):
        for index in buckets[count]:
            if usable is not None and not usable[index]:
                continue
            if room is not None and not room.fits(index, cpus, mem):
                continue
            if (
                spares is None
                or index not in spares
                or (cost if isinstance(cost, int) else cost[index]) <= spares[index]
            ):
                return index
    return None


def _reserve(
    gpus: int,
    free: Sequence[Sequence[int]],
    totals: Sequence[int],
    releases: Sequence[Iterable[tuple[float, int]]],
    usable: Sequence[bool] | None = None,
    room: _Room | None = None,
    cpus: int = 1,
    mem: int = 0,
    count: int = 1,
    required: Collection[int] = (),
    whole: bool = False,
    ready: Collection[int] = (),
    now: float = -math.inf,
) -> _Reservation | None:
    """The earliest time at which `count` nodes will each have `gpus` GPUs free, if any.

    And those nodes: each node's own earliest time, the `count` earliest (ties to the
    fewest GPUs to spare then, then to name), the reservation's start the latest of
    theirs. `required` nodes (-w) are among them. `whole`: each node needs all its GPUs
    free (--exclusive). `ready`: nodes on which the job could start `now` (a job across
    nodes waiting for the others); any other node's time is that of a release.

    `usable`, when given, rules out the nodes it marks False. With `room`, only nodes
    whose total CPUs and memory could hold the job count; the time is the GPUs' (CPUs
    and memory have no release times: they only gate starts)."""
    candidates: list[tuple[float, int, int]] = []  # (start, spare then, index)
    timelines: dict[int, list[tuple[float, int]]] = {}
    for index, ids in enumerate(free):
        if totals[index] < gpus or (usable is not None and not usable[index]):
            continue
        if room is not None and (room.cpus_total[index] < cpus or room.mem_total[index] < mem):
            continue
        need = totals[index] if whole else gpus
        have = len(ids)
        timeline = timelines[index] = sorted(releases[index])
        start = now if index in ready else math.inf
        if start == math.inf:
            for when, freed in timeline:
                have += freed
                if have >= need:
                    start = when
                    break
            if start == math.inf:
                continue
        # GPUs released at the same instant as `start` are there too.
        at_start = len(ids) + sum(freed for when, freed in timeline if when <= start)
        candidates.append((start, at_start - need, index))
    chosen = [c for c in candidates if c[2] in required]
    if len(chosen) < len(required):
        return None
    if count - len(chosen) == 1:
        rest = [min((c for c in candidates if c[2] not in required), default=None)]
        chosen += [c for c in rest if c is not None]
    elif count > len(chosen):
        chosen += sorted(c for c in candidates if c[2] not in required)[: count - len(chosen)]
    if len(chosen) < count or not chosen:
        return None
    start = max(c[0] for c in chosen)
    spares = {}
    for own, spare, index in chosen:
        if own != start:  # GPUs released by the later start are there too
            need = len(free[index]) + sum(n for when, n in timelines[index] if when <= start)
            spare = need - (totals[index] if whole else gpus)
        spares[index] = spare
    return _Reservation(start=start, spares=spares)


# A job's place among its user's jobs: plan()'s order after the fair-share factor.
_Key = tuple[int, float, int]
# A user's jobs that ask as many GPUs of one type (None: any), or shares of one budget
# (MiB; None: whole GPUs): (user, GPUs, type, share).
_Stream = tuple[str, int, str | None, int | None]


def _key(job: Job) -> _Key:
    return (-job.spec.effective_priority, job.submit_time, job.id)


def _stream(job: Job) -> _Stream:
    spec = job.spec
    return (job.user, spec.gpus, spec.gpu_type, spec.gpu_mem_mb)


class Planner:
    """plan() kept across passes: plan()'s Plan, at the cost of what changed in the queue.

    The same Plan means the same starts, the same reservation and the same reason for every
    job, for a queue that changes a little between passes; the cost is of what changed
    rather than of the whole queue.

    The caller tells it the queue's changes (`put` a new or changed job, `discard` one
    that left the queue or started) and asks for a pass with the nodes, usage, clock and
    limits of the moment, as plan() takes them. `reasons` then holds every queued job's
    reason as plan() would give it; `Plan.reasons` of a pass holds only those that
    changed since the pass before (a job gone from the queue is simply gone), or, for a
    job put with the reason it is known to show, since that one. A queue put whole
    between two passes (a restart's) may be looked ahead at as it comes (`presettle`).

    How: a user's jobs are kept sorted per GPU count and type (a stream), so plan()'s
    queue order is the merge of the streams by fair-share factor, then the key within a
    stream. A pass takes jobs in that order through the same `_Pass` as plan(), until a
    job can settle: a reservation exists, its user has no limits, and it asks more GPUs
    than any node has free (`_Pass.most_free`; of its type, for a typed stream). Then it
    cannot start, reserve or change anything,
    nor can any later job of its stream (the free GPUs only shrink), so the whole rest
    of the stream gets `_Pass.settled_reason` without being taken: BadConstraints,
    NodeDown or Priority, which depend on the job and on what the nodes are (not on
    what is free). Those reasons are what the stream got the pass before wherever it
    settled then too, unless the nodes changed (then every job is taken again) or the
    job is new; so only the jobs between the two settling points, and new ones, are
    looked at. On a full cluster a pass costs a few jobs per stream. What never settles
    is taken every pass, as plan() takes it: the jobs of users with limits (their
    reasons hang on what the pass starts for them), 0-GPU jobs, and a whole pass in
    which no reservation can be made (every busy GPU held without a time limit).

    A stream of shared jobs (one budget, one type) settles, reservation or not, once no
    GPU anywhere has room for its share (`_Pass.most_room`): a shared job neither
    reserves nor waits behind one, and room only shrinks within a pass. One that no GPU
    has room for as the pass starts settles before it, kept out of the merge.
    """

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        # (user, GPUs, GPU type) -> the keys of that user's unheld jobs asking that many
        # GPUs of that type (None: any), sorted.
        self._streams: dict[_Stream, list[_Key]] = {}
        self._users: dict[str, int] = {}  # user -> queued jobs (held ones too)
        self.reasons: dict[int, str] = {}
        # The jobs whose reported reason is Preemption (`preempt`), over their pass's.
        self._preempting: frozenset[int] = frozenset()
        # stream -> the key from which the last pass settled its jobs
        self._settled: dict[_Stream, _Key] = {}
        # Put since the last pass: by stream (id -> Job), and the held ones.
        self._fresh: dict[_Stream, dict[int, Job]] = {}
        self._fresh_held: set[int] = set()
        # Looked ahead at (presettle) with a settled reason other than the one known:
        # id -> that reason, the one its stream gives it at the next pass should it
        # settle there (over the same nodes).
        self._ahead: dict[int, str] = {}
        # The streams presettle settled since the last pass (every job in them looked
        # ahead at, over the nodes seen): the jobs put in them since are looked at too.
        self._presettled: set[_Stream] = set()
        self._nodes_seen: object = None
        # The queued jobs of a reservation (spec.reservation): in no stream, planned
        # whole each pass (plan_reserved's step 1: a window's few jobs).
        self._reserving: dict[int, Job] = {}
        # The outsiders' reasons as their pass (plan() over the nodes less the windows)
        # gives them, before a window's reason replaces Resources or Priority
        # (plan_reserved's step 4); `reasons` holds what is reported.
        self._raw: dict[int, str] = {}
        # Put since the last pass: their reported reason is reckoned again.
        self._recheck: set[int] = set()
        # What the windows' reasons hung on at the last pass.
        self._window_key: object = ()
        # For each window to come: the backfill before it, kept across passes.
        self._before: dict[str, _Before] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def put(self, job: Job, reason: str | None = None) -> None:
        """Queue `job` (PENDING), or take its new version (held, priority, spec...).

        `reason`: the reason it is known to have (the one its row shows): a pass then
        reports its reason only if it differs, as for a job whose reason was reported
        (a restarted daemon's planner, given the reasons the last one wrote, reports
        none of those that stay)."""
        self.discard(job.id)
        self._jobs[job.id] = job
        if reason is not None:
            self.reasons[job.id] = reason
        if job.spec.reservation is not None:
            self._reserving[job.id] = job
            return
        self._users[job.user] = self._users.get(job.user, 0) + 1
        if reason is not None:
            self._raw[job.id] = reason
        self._recheck.add(job.id)
        for backfill in self._before.values():
            backfill.put(job)
        if job.held:
            self._fresh_held.add(job.id)
            return
        name = _stream(job)
        self._fresh.setdefault(name, {})[job.id] = job
        bisect.insort(self._streams.setdefault(name, []), _key(job))

    def presettle(self, nodes: Sequence[NodeView]) -> None:
        """Reckon ahead the settled reasons of streams queued whole since the last pass.

        This is for a next pass over these `nodes`. Such streams are a restarted daemon's,
        put over a few passes with the reasons their rows show; a stream over several, read
        by read. Where a job's reason is the one it would settle with, that pass need not
        look at it again should its stream settle. Costs what the jobs put since the last
        call do; with different nodes at the pass, it looks at every job, as without this.

        So a restart's first pass over a long queue plans at the cost of what it takes
        and of the jobs whose reasons must change, not of the whole queue; and those
        (a fresh store's every job) cost it a dict's copy: their settled reasons are
        reckoned here, as the reads come.
        """
        seen = _what_nodes_are(nodes)
        if seen != self._nodes_seen:
            self._nodes_seen = seen
            self._settled.clear()
            self._ahead.clear()
            self._presettled.clear()
        probe = _Pass(nodes, 0.0, None, None)  # settled reasons read neither clock nor use
        before, ahead = self._raw, self._ahead
        presettled = self._presettled
        for name, fresh in list(self._fresh.items()):
            stream = self._streams[name]
            if name not in presettled and (name in self._settled or len(fresh) != len(stream)):
                continue  # a stream the last pass saw: its next pass looks as ever
            by_spec: dict[int, str] = {}
            for job_id, job in list(fresh.items()):
                reason = by_spec.get(id(job.spec))
                if reason is None:
                    reason = by_spec[id(job.spec)] = probe.settled_reason(job)
                if before.get(job_id) != reason:
                    ahead[job_id] = reason  # told at the next pass, should it settle
                del fresh[job_id]
            if not fresh:
                del self._fresh[name]
            # As if a pass had settled it whole: what is not fresh has its reason (a
            # stream put over several reads, a user's window read over passes, is
            # looked at read by read).
            self._settled[name] = stream[0]
            presettled.add(name)

    def discard(self, job_id: int) -> None:
        """Forget job `job_id` (it started, ended or was cancelled); no-op if unknown."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        self.reasons.pop(job_id, None)
        if self._reserving.pop(job_id, None) is not None:
            return
        self._raw.pop(job_id, None)
        self._ahead.pop(job_id, None)
        self._recheck.discard(job_id)
        for backfill in self._before.values():
            backfill.discard(job)
        left = self._users[job.user] - 1
        if left:
            self._users[job.user] = left
        else:
            del self._users[job.user]
        if job.held:
            self._fresh_held.discard(job_id)
            return
        name = _stream(job)
        fresh = self._fresh.get(name)
        if fresh is not None and fresh.pop(job_id, None) is not None and not fresh:
            del self._fresh[name]
        stream = self._streams[name]
        del stream[bisect.bisect_left(stream, _key(job))]
        if not stream:
            del self._streams[name]
            self._settled.pop(name, None)
            self._presettled.discard(name)

    def plan(
        self,
        nodes: Sequence[NodeView],
        usage: Mapping[str, float],
        now: float,
        limits: Mapping[str, UserLimits] | None = None,
        use: Mapping[str, Use] | None = None,
        windows: Sequence[Window] = (),
    ) -> Plan:
        """A pass over the queue as it is now: plan_reserved(queue, ..., windows).

        That is plan(queue, nodes, usage, now, limits, use) without a window on or to
        come. Its reasons only where they changed (see the class). plan_reserved's steps: the
        jobs of a window on now (few) planned whole; everyone else through the pass
        kept across passes (`_pass`), over the nodes less the windows' GPUs; the backfill
        before each window to come by a Planner of its own (`_Before`) over the jobs
        that fit before it; a window's reason in place of Resources or Priority reckoned
        for the jobs whose reason changed, and for all of them only when what it hangs
        on (the windows, the GPUs free on their nodes) changed.
        """
        live = sorted((w for w in windows if w.end > now), key=lambda w: (w.start, w.name))
        jobs = self._jobs
        held: dict[str, Use] = dict(use or {})
        assignments: list[Assignment] = []
        finals: dict[int, str] = {}
        held_for: dict[int, str] = {}
        started: set[int] = set()

        def took(result: Plan) -> None:
            for each in result.assignments:
                assignments.append(each)
                started.add(each.job_id)
                job = jobs[each.job_id]
                was = held.get(job.user, Use())
                held[job.user] = Use(was.running_jobs + 1, was.gpus + job.spec.total_gpus)

        if self._reserving:
            by_name = {w.name: w for w in live}
            members: dict[str, list[Job]] = {}
            for job_id in sorted(self._reserving):
                job = self._reserving[job_id]
                name = job.spec.reservation or ""
                if job.held:
                    finals[job_id] = HELD
                elif name in by_name and by_name[name].start <= now:
                    # On the reservation's nodes, whatever partition it was queued in.
                    members.setdefault(name, []).append(
                        replace(job, spec=replace(job.spec, partition=None))
                    )
                else:
                    finals[job_id] = RESERVATION_REASON
                    held_for[job_id] = name
            for name, mine in sorted(members.items()):
                window = by_name[name]
                besides = [w for w in live if w is not window and w.start < window.end]
                view = _members_view(nodes, window, besides)
                result = plan(mine, view, usage, now, limits, held)
                took(result)
                finals.update(result.reasons)
        main = self._pass(_outsiders_view(nodes, live) if live else nodes, usage, now, limits, held)
        took(main)
        coming = {w.name for w in live if w.start > now}
        for name in [name for name in self._before if name not in coming]:
            del self._before[name]
        for index, window in enumerate(live):
            if window.start <= now:
                continue
            earlier = [w for w in live[:index] if w.start < window.start]
            view = _members_view(nodes, window, earlier)
            if not any(n.free_gpus or n.free_slices or n.share_room for n in view) and not any(
                name[1] == 0 for name in self._streams
            ):
                # Nothing free there and no job that asks no GPU: nothing starts (and its
                # own Planner, over GPUs that no release frees, would take every job).
                continue
            backfill = self._before.get(window.name)
            if backfill is None or backfill.start != window.start:
                backfill = self._before[window.name] = _Before(window.start, jobs.values())
            result = backfill.plan(view, usage, now, limits, held, started, jobs)
            took(result)
            for each in result.assignments:  # looked at again, should it stay queued
                job = jobs[each.job_id]
                self._raw.pop(job.id, None)
                self._fresh.setdefault(_stream(job), {})[job.id] = job
        # plan_reserved's step 4: Resources or Priority where a window's node has the
        # GPUs free becomes the window's reason.
        free = {node.name: len(node.free_gpus) for node in nodes if node.available}
        key = tuple(
            (
                w.name,
                w.maint,
                max((free.get(n, -1) for n in (w.nodes or {n for n, _ in w.gpus})), default=-1),
            )
            for w in live
        )
        raw = self._raw
        if key != self._window_key:
            self._window_key = key
            recheck: Iterable[int] = raw
        else:
            recheck = self._recheck.union(main.reasons)
        for job_id in recheck:
            reason = raw.get(job_id)
            if reason is None or job_id in started:
                continue
            if reason in (RESOURCES, PRIORITY):
                gpus = jobs[job_id].spec.gpus
                for window, (_, maint, most) in zip(live, key, strict=True):
                    if most >= gpus:
                        reason = MAINT_REASON if maint else RESERVATION_REASON
                        held_for[job_id] = window.name
                        break
            finals[job_id] = reason
        self._recheck = set()
        before = self.reasons
        changed: dict[int, str] = {}
        for job_id, reason in finals.items():
            if job_id not in started and before.get(job_id) != reason:
                changed[job_id] = reason
        for job_id in started:
            before.pop(job_id, None)
        before.update(changed)
        return Plan(
            assignments=tuple(assignments),
            reasons=changed,
            starts=main.starts,
            held_for={job_id: name for job_id, name in held_for.items() if job_id in changed},
        )

    def _pass(
        self,
        nodes: Sequence[NodeView],
        usage: Mapping[str, float],
        now: float,
        limits: Mapping[str, UserLimits] | None,
        use: Mapping[str, Use] | None,
    ) -> Plan:
        """plan() over the jobs of no reservation, kept across passes: their reasons
        (`_raw`) where they changed."""
        seen = _what_nodes_are(nodes)
        if seen != self._nodes_seen:
            self._nodes_seen = seen
            self._settled.clear()  # settled reasons depend on the nodes: take every job
            self._ahead.clear()
        caps = limits or {}
        share = factors(usage, self._users)
        jobs = self._jobs
        result = _Pass(nodes, now, limits, use)
        consider = result.consider
        heap: list[tuple[float, _Key, int, _Stream]] = []
        settled: dict[_Stream, _Key] = {}
        last_settled = self._settled
        changed: dict[int, str] = {}
        before = self._raw
        # The new jobs by stream: a stream settled where it was keeps its old jobs'
        # reasons, but its new ones get theirs.
        fresh = self._fresh
        # A stream of shares whose budget no GPU has room for now settles here, from its
        # first job: room only shrinks in a pass, so it would settle at its turn anyway,
        # and its reasons hang on no other job's. Kept out of the heap, it costs a pass
        # nothing (on a full fleet, every stream of shares).
        room_at_start: dict[str | None, int] = {}
        for name, stream in self._streams.items():
            budget = name[3]
            if budget is not None and name[0] not in caps:
                room = room_at_start.get(name[2])
                if room is None:
                    room = room_at_start[name[2]] = result.most_room(name[2])
                if budget > room:
                    key = settled[name] = stream[0]
                    if last_settled.get(name) != key or name in fresh:
                        self._settle(name, key, 0, fresh.get(name), result, changed)
                    continue
            heap.append((-share[name[0]], stream[0], 0, name))
        heapq.heapify(heap)
        for job_id in self._fresh_held:
            result.reasons[job_id] = HELD  # in no stream: always this reason
        # The pass's most_free(type) and most_room(type), kept until a job is taken
        # (only that changes them).
        most: dict[str | None, int] = {}
        most_room: dict[str | None, int] = {}
        while heap:
            order, key, position, name = heap[0]
            user, gpus, gpu_type, budget = name
            if budget is not None:
                # A shared job never reserves, so its stream settles once no GPU has
                # room for its share, reservation or not.
                if user in caps:
                    settles = False
                else:
                    room = most_room.get(gpu_type)
                    if room is None:
                        room = most_room[gpu_type] = result.most_room(gpu_type)
                    settles = budget > room
            elif result.reservation is not None and user not in caps:
                # MIG slices are no whole cards: most_free() bounds a slice job's none.
                sliced = gpu_type is not None and profile_of(gpu_type) != ""
                free = 0 if sliced else most.get(None)
                if free is None:
                    free = most[None] = result.most_free()
                if (gpus <= free or sliced) and gpu_type is not None:
                    free = most.get(gpu_type)
                    if free is None:
                        free = most[gpu_type] = result.most_free(gpu_type)
                settles = gpus > free
            else:
                settles = False
            if settles:
                heapq.heappop(heap)
                settled[name] = key
                if last_settled.get(name) != key or name in fresh:
                    self._settle(name, key, position, fresh.get(name), result, changed)
                # else: settled where it did the pass before, nothing new in it: its
                # jobs have the reasons they had.
                continue
            consider(jobs[key[2]])
            if most:
                most.clear()
            if most_room:
                most_room.clear()
            stream = self._streams[name]
            if position + 1 < len(stream):
                heapq.heapreplace(heap, (order, stream[position + 1], position + 1, name))
            else:
                heapq.heappop(heap)
        # Those looked ahead at have the reasons presettle found, where their streams
        # settled (from the first job on, as presettle took them, or later); the others
        # were taken, and the pass gave theirs.
        changed.update(self._ahead)
        for job_id, reason in result.reasons.items():
            if before.get(job_id) != reason:
                changed[job_id] = reason
            else:
                changed.pop(job_id, None)
        for assignment in result.assignments:
            before.pop(assignment.job_id, None)
            changed.pop(assignment.job_id, None)
        before.update(changed)
        self._settled = settled
        self._ahead = {}
        self._presettled = set()
        # A job started is normally discarded before the next pass; one still queued
        # then (its start failed) is taken as new, so it gets its reason again.
        self._fresh, self._fresh_held = {}, set()
        for assignment in result.assignments:
            job = jobs[assignment.job_id]
            self._fresh.setdefault(_stream(job), {})[job.id] = job
        return Plan(assignments=tuple(result.assignments), reasons=changed, starts=result.starts)

    def preempt(
        self,
        result: Plan,
        nodes: Sequence[NodeView],
        running: Sequence[Running],
        now: float,
        rules: PreemptRules,
        windows: Sequence[Window] = (),
    ) -> Plan:
        """`result` (this pass's `plan`) with its preemptions, as plan() gives them.

        Reason Preemption is reported where it begins and where it ends (then the reason
        the pass gave). With reservations' `windows`, as plan_reserved: no job of a
        reservation preempts, and no victim is taken on a node of a window."""
        queue, nodes, running = _preemptable(self._jobs.values(), nodes, windows, now, running)
        found = preemptions(queue, self.reasons, result.assignments, nodes, running, now, rules)
        changed = dict(result.reasons)
        old, new = self._preempting, found.waiting
        for job_id in new:
            if job_id in old:
                changed.pop(job_id, None)
            else:
                changed[job_id] = PREEMPTION
        for job_id in old - new:
            if job_id in self._jobs and job_id in self.reasons:
                changed[job_id] = self.reasons[job_id]
        self._preempting = new
        return replace(result, reasons=changed, preemptions=found.victims)

    def _settle(
        self,
        name: _Stream,
        key: _Key,
        position: int,
        fresh: Mapping[int, Job] | None,
        result: _Pass,
        changed: dict[int, str],
    ) -> None:
        """Give the jobs of stream `name` from `position` (key `key`) on their settled
        reasons in `changed`, looking only at those that may not have them already."""
        stream = self._streams[name]
        jobs = self._jobs
        before = self._raw
        last = self._settled.get(name)
        # Those the last pass took (or that it never saw) get theirs now; those it
        # settled too have it, unless new since.
        end = len(stream) if last is None else max(position, bisect.bisect_left(stream, last))
        # A settled reason hangs on the job's spec alone (its user has no limits, and
        # no job here is held), and the jobs that ask the same share one spec (the
        # loop's planning specs): reckoned once per spec.
        by_spec: dict[int, str] = {}
        settled_reason = result.settled_reason
        for index in range(position, end):
            job_id = stream[index][2]
            job = jobs[job_id]
            reason = by_spec.get(id(job.spec))
            if reason is None:
                reason = by_spec[id(job.spec)] = settled_reason(job)
            if before.get(job_id) != reason:
                changed[job_id] = reason
        if fresh and end < len(stream):  # the new ones past `end`, if any
            for job in fresh.values():
                if _key(job) >= key:
                    reason = settled_reason(job)
                    if before.get(job.id) != reason:
                        changed[job.id] = reason


class _Before:
    """plan_reserved's step 3 for one window to come, kept across passes: the jobs of no
    reservation, not held, whose time limit ends by the window's start, planned over its
    GPUs (a Planner of their own). Those whose limit no longer ends by it leave; they
    come back only if the clock goes back (then it starts over)."""

    def __init__(self, start: float, jobs: Iterable[Job]) -> None:
        self.start = start
        self.now = -math.inf
        self._fill(jobs)

    def _fill(self, jobs: Iterable[Job]) -> None:
        self.planner = Planner()
        # (time limit, id) of the jobs in `planner`, sorted: the longest leave first.
        self.limits: list[tuple[int, int]] = []
        for job in jobs:
            self.put(job)

    def put(self, job: Job) -> None:
        """Take `job` (new or changed; discarded first) if it may fit before the window."""
        limit = job.time_limit
        if job.spec.reservation is None and not job.held and limit is not None:
            self.planner.put(job)
            bisect.insort(self.limits, (limit, job.id))

    def discard(self, job: Job) -> None:
        limit = job.time_limit
        if job.id in self.planner._jobs and limit is not None:
            self.planner.discard(job.id)
            del self.limits[bisect.bisect_left(self.limits, (limit, job.id))]

    def plan(
        self,
        view: Sequence[NodeView],
        usage: Mapping[str, float],
        now: float,
        limits: Mapping[str, UserLimits] | None,
        held: Mapping[str, Use],
        started: Collection[int],
        jobs: Mapping[int, Job],
    ) -> Plan:
        """plan(the jobs that fit now, not `started` this pass, view, ...)'s Plan."""
        if now < self.now:  # the clock set back: some that left may fit again
            self._fill(jobs.values())
        self.now = now
        fits = self.limits
        while fits and now + fits[-1][0] > self.start:
            _, job_id = fits.pop()
            self.planner.discard(job_id)
        taken = [jobs[job_id] for job_id in started if job_id in self.planner._jobs]
        for job in taken:  # started this pass: not in this plan (put back after it)
            self.discard(job)
        result = self.planner.plan(view, usage, now, limits, held)
        for job in taken:
            self.put(job)
        return result


def _what_nodes_are(nodes: Sequence[NodeView]) -> object:
    """What settled reasons depend on: the nodes, less what is free on them."""
    return tuple(
        (
            node.name,
            node.available,
            node.gpus_total,
            node.runs_containers,
            node.partitions,
            node.cpus_total,
            node.mem_total_mb,
            node.gpu_types,
            node.features,
            node.shareable,
        )
        for node in nodes
    )


# -- preemption (docs/priorities.md) ------------------------------------------------------

PREEMPTION = "Preemption"
# The reasons of a job that is otherwise runnable: nothing but busy GPUs keep it waiting.
_PREEMPTOR_REASONS = frozenset({RESOURCES, PRIORITY, PREEMPTION})
# Victims looked at per node (per job, for a job across nodes): the search for the
# fewest is over their subsets.
_MOST_VICTIMS = 16


@dataclass(frozen=True, slots=True)
class Running:
    """A job on nodes as preemption sees it.

    `node` its first node and `gpus` how many GPUs it holds there; `placed` every node's
    GPU ids, when known ((node, ids), first node first; empty: `gpus` GPUs on `node`,
    ids unknown). `share`: it holds a share of each of its GPUs (--gpu-mem), which comes
    free only once every job sharing it is gone. `whole`: --exclusive, its nodes are
    its alone.
    `preempting`: told to go already (in its grace time): its GPUs are coming free. A
    `job_id` below 0 is no job: GPUs a run left, not yet reported clean (preempting).
    `exempt_until`: not preempted before then (its QOS's preempt_exempt_time)."""

    job_id: int
    node: str
    gpus: int
    start_time: float
    partition: str | None
    qos: str | None
    preempting: bool = False
    exempt_until: float = 0.0
    placed: tuple[tuple[str, tuple[int, ...]], ...] = ()
    share: bool = False
    whole: bool = False

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.placed) if self.placed else (self.node,)

    @property
    def total_gpus(self) -> int:
        return sum(len(ids) for _, ids in self.placed) if self.placed else self.gpus


@dataclass(frozen=True)
class PreemptRules:
    """Who may preempt whom: partitions' tiers and modes, and the QOS table.

    A job may preempt a running one when its partition's priority_tier is higher and
    the victim's partition's preempt_mode is not off, or when its QOS's `preempt` names
    the victim's QOS and that QOS's preempt_mode is not off."""

    # partition -> (priority_tier, preempt_mode, grace_time)
    tiers: Mapping[str, tuple[int, str, int]]
    qos: QosTable

    def can_preempt(self, job: Job) -> bool:
        """Whether `job` could preempt anything at all (cheap: most jobs cannot)."""
        if self.qos.get(job.spec.qos).preempt:
            return True
        tier = self.tiers.get(job.spec.partition or "")
        return tier is not None and any(
            other[0] < tier[0] and other[1] != "off" for other in self.tiers.values()
        )

    def how(self, job: Job, victim: Running) -> tuple[str, int] | None:
        """(preempt mode, grace seconds) of `victim` if `job` may preempt it, else None.

        The QOS's rule first (its mode and grace), then the partitions'."""
        mine, theirs = self.qos.get(job.spec.qos), self.qos.get(victim.qos)
        if mine.may_preempt(theirs.name) and theirs.preempt_mode != "off":
            return theirs.preempt_mode, theirs.grace_time
        tier = self.tiers.get(job.spec.partition or "")
        other = self.tiers.get(victim.partition or "")
        if tier is not None and other is not None and other[0] < tier[0] and other[1] != "off":
            return other[1], other[2]
        return None


@dataclass(frozen=True)
class Preemptions:
    """What preemption decides in a pass: victim -> preemptor, and the jobs that wait.

    `waiting`: the preemptors, and the jobs waiting on GPUs that victims told earlier
    are freeing; their reason is Preemption."""

    victims: Mapping[int, int]
    waiting: frozenset[int]


def preemptions(
    queue: Iterable[Job],
    reasons: Mapping[int, str],
    assignments: Iterable[Assignment],
    nodes: Sequence[NodeView],
    running: Sequence[Running],
    now: float,
    rules: PreemptRules,
) -> Preemptions:
    """Which running jobs to stop so that waiting jobs that may preempt them start.

    Pure. `queue`: the pending jobs; `reasons`: the plan's reason of each (one not
    started); `assignments`: the plan's starts. Taken by priority (effective_priority,
    then submit time, then id), a job is a preemptor when it is not held, its reason
    says only busy GPUs keep it (Resources, Priority, or Preemption from before), it
    asks whole GPUs (of any type, or of one) or --exclusive nodes, not a share, and
    `rules.can_preempt` it. Its nodes are the available ones of its partition (and -w,
    -x, -C, an engine for an image) with enough GPUs of its type.

    A node holds it once the GPUs of its type there that are free after the plan, or
    held only by jobs gone (told already: `Running.preempting`, or chosen), number its
    GPUs per node and no earlier preemptor claimed them; an --exclusive job's node
    must have no job left on it and nothing placed there, its every GPU so. A GPU held
    by shares comes free once every job sharing it is gone; a job across nodes goes
    from all its nodes. The job needs `spec.nodes` such nodes (-w's among them).

    If the jobs told already free enough: it waits for them (`waiting`), no new victim.
    Else the fewest victims it may preempt (not exempt, not told already, not chosen for
    an earlier preemptor) that let it start, least GPU-time lost then youngest breaking
    ties: for a job of one node, looked for on each node (the victims there, a job
    across nodes among them) and taken where that set is smallest (then least lost,
    then name); for a job across nodes, among the victims on all its nodes. None frees
    enough: it preempts nothing (it would not start after them either). Either way it
    claims the GPUs (or nodes) it will get, so a later preemptor takes others. CPUs
    and memory are not looked at.
    """
    if not running:
        return Preemptions({}, frozenset())
    candidates = sorted(
        (
            job
            for job in queue
            if not job.held
            and reasons.get(job.id) in _PREEMPTOR_REASONS
            and (job.spec.gpus > 0 or job.spec.exclusive)
            and job.spec.gpu_mem_mb is None
            and rules.can_preempt(job)
        ),
        key=_priority_order,
    )
    if not candidates:
        return Preemptions({}, frozenset())
    field = _Field(nodes, assignments, running)
    victims: dict[int, int] = {}
    waiting: set[int] = set()
    for job in candidates:
        where = [node for node in field.by_name if _may_hold(job, node, field.types[node.name])]
        if len(where) < job.spec.nodes:
            continue
        names = [node.name for node in where]
        chosen = field.fits(job, names, ())
        if chosen is not None:
            field.claim(job, chosen, ())
            waiting.add(job.id)
            continue
        may = [
            each
            for each in field.on_nodes(names)
            if not each.preempting
            and each.job_id not in victims
            and each.exempt_until <= now
            and rules.how(job, each) is not None
        ]
        best = None
        if job.spec.nodes == 1:
            by_node: dict[str, list[Running]] = {}
            for each in may:
                for name in each.nodes:
                    by_node.setdefault(name, []).append(each)
            for name in names:
                here = by_node.get(name, [])[:_MOST_VICTIMS]
                at_most: int | None = None if best is None else best[0][0]
                found = _fewest(field, job, [name], here, now, at_most)
                if found is not None and (best is None or found[0] < best[0]):
                    best = found
        else:
            found = _fewest(field, job, names, _by_least_lost(may, now)[:_MOST_VICTIMS], now)
            best = found
        if best is None:
            continue
        _, taken, chosen = best
        for each in taken:
            victims[each.job_id] = job.id
        field.claim(job, chosen, taken)
        waiting.add(job.id)
    return Preemptions(victims, frozenset(waiting))


# A GPU as preemption counts it: (node, index), or (node, (job id, k)) for one of the
# GPUs of a job whose ids are unknown (Running.placed empty).
_Unit = tuple[str, object]


class _Field:
    """The nodes, the GPUs free after the plan, and who holds the others, for one pass
    of preemptions(); what earlier preemptors claimed."""

    def __init__(
        self,
        nodes: Sequence[NodeView],
        assignments: Iterable[Assignment],
        running: Sequence[Running],
    ) -> None:
        self.by_name = sorted((node for node in nodes if node.available), key=lambda n: n.name)
        self.views = {node.name: node for node in self.by_name}
        self.types = {node.name: dict(node.gpu_types) for node in self.by_name}
        self.free: dict[str, set[object]] = {n.name: set(n.free_gpus) for n in self.by_name}
        self.placed_here: set[str] = set()  # nodes the plan starts a job on
        for assignment in assignments:
            for name, ids in ((assignment.node, assignment.gpus), *assignment.peers):
                if name in self.free:
                    self.free[name].difference_update(ids)
                    self.placed_here.add(name)
        # node -> its GPUs held by running jobs -> those jobs
        self.holders: dict[str, dict[object, set[int]]] = {}
        self.on_node: dict[str, list[Running]] = {}
        self.gone: set[int] = set()  # told already: coming free
        for each in running:
            units: list[_Unit] = []
            if each.placed:
                units = [(name, i) for name, ids in each.placed for i in ids]
            else:
                units = [(each.node, (each.job_id, k)) for k in range(each.gpus)]
            for name, gpu in units:
                self.holders.setdefault(name, {}).setdefault(gpu, set()).add(each.job_id)
            for name in each.nodes:
                if name in self.free:
                    self.on_node.setdefault(name, []).append(each)
            if each.preempting:
                self.gone.add(each.job_id)
        self.claimed: dict[str, set[object]] = {}
        self.claimed_whole: set[str] = set()

    def on_nodes(self, names: Sequence[str]) -> list[Running]:
        """The running jobs on any of `names`, each once, by job id."""
        seen: dict[int, Running] = {}
        for name in names:
            for each in self.on_node.get(name, ()):
                seen.setdefault(each.job_id, each)
        return [seen[key] for key in sorted(seen)]

    def _open(self, name: str, gone: set[int]) -> list[object]:
        """The GPUs of `name` free once `gone` (and the jobs told) have left, unclaimed:
        those free now first, by index."""
        taken = self.claimed.get(name, set())
        now_free = sorted((i for i in self.free[name] if i not in taken), key=_unit_order)
        freed = [
            gpu
            for gpu, jobs in self.holders.get(name, {}).items()
            if gpu not in taken and gpu not in self.free[name] and jobs <= gone
        ]
        return now_free + sorted(freed, key=_unit_order)

    def _holds(self, job: Job, name: str, gone: set[int]) -> list[object] | None:
        """The GPUs `job` would take on `name` once `gone` left, or None if it cannot."""
        if name in self.claimed_whole:
            return None
        open_ = self._open(name, gone)
        spec = job.spec
        if spec.exclusive:
            view = self.views[name]
            left = [e for e in self.on_node.get(name, ()) if e.job_id not in gone]
            if left or name in self.placed_here or (view.whole and not self.on_node.get(name)):
                return None
            if self.claimed.get(name) or len(open_) < view.gpus_total:
                return None
            return open_
        types = self.types[name]
        if spec.gpu_type is not None:
            open_ = [i for i in open_ if types.get(i) == spec.gpu_type]  # type: ignore[call-overload]
        elif self.views[name].whole and any(
            e.whole and e.job_id not in gone for e in self.on_node.get(name, ())
        ):
            return None
        return open_[: spec.gpus] if len(open_) >= spec.gpus else None

    def fits(
        self, job: Job, names: Sequence[str], taken: Iterable[Running]
    ) -> dict[str, list[object]] | None:
        """The nodes (of `names`) and GPUs `job` gets once `taken` have left, or None.

        The jobs told already count as gone too; -w's nodes first, then by name."""
        gone = self.gone | {each.job_id for each in taken}
        want = job.spec.nodes
        got: dict[str, list[object]] = {}
        for name in job.spec.nodelist:
            if name not in names:
                return None
            ids = self._holds(job, name, gone)
            if ids is None:
                return None
            got[name] = ids
        for name in names:
            if len(got) >= want:
                break
            if name in got:
                continue
            ids = self._holds(job, name, gone)
            if ids is not None:
                got[name] = ids
        return got if len(got) >= want else None

    def claim(self, job: Job, chosen: Mapping[str, list[object]], taken: Iterable[Running]) -> None:
        """Keep `chosen` for `job`: later preemptors do not count them."""
        for name, ids in chosen.items():
            self.claimed.setdefault(name, set()).update(ids)
            if job.spec.exclusive:
                self.claimed_whole.add(name)
        for each in taken:
            self.gone.add(each.job_id)


def _unit_order(unit: object) -> tuple[int, str]:
    return (unit, "") if isinstance(unit, int) else (1 << 30, repr(unit))


def _may_hold(job: Job, node: NodeView, types: Mapping[int, str]) -> bool:
    """Whether `node` is one of `job`'s (partition, -w, -x, -C, engine, size)."""
    spec = job.spec
    if spec.nodes == 1 and spec.nodelist and node.name not in spec.nodelist:
        return False
    if (
        (spec.partition is not None and spec.partition not in node.partitions)
        or node.name in spec.exclude
        or (spec.image is not None and not node.runs_containers)
        or (
            spec.constraint is not None
            and not satisfied(parse_constraint(spec.constraint), node.features)
        )
    ):
        return False
    if spec.gpu_type is not None:
        return sum(1 for t in types.values() if t == spec.gpu_type) >= spec.gpus
    return node.gpus_total >= spec.gpus


def _lost(chosen: Iterable[Running], now: float) -> float:
    return sum(each.total_gpus * max(0.0, now - each.start_time) for each in chosen)


def _by_least_lost(may: Sequence[Running], now: float) -> list[Running]:
    return sorted(may, key=lambda each: (_lost((each,), now), -each.start_time, each.job_id))


def _fewest(
    field: _Field,
    job: Job,
    names: Sequence[str],
    may: Sequence[Running],
    now: float,
    at_most: int | None = None,
) -> (
    tuple[
        tuple[int, float, tuple[float, ...], tuple[str, ...]],
        tuple[Running, ...],
        dict[str, list[object]],
    ]
    | None
):
    """The fewest of `may` whose going lets `job` start on `names`: (its sort key, the
    set, the nodes and GPUs it gets), or None (also when it takes more than `at_most`).

    Among sets of that size: the least GPU-time lost (GPUs times time run), then the
    youngest (latest starts first), then the nodes' names. Sets smaller than a bound are
    not tried: on one node, fewer than the most GPUs there that many could free; where
    each of its GPUs has one holder (no shares), only sets of that size are tried, by
    the GPUs each frees, one fits() for the set chosen."""
    import itertools

    if not may:
        return None
    start, short, frees = 1, 0, None
    if len(names) == 1 and not job.spec.exclusive:
        start, short, frees = _bound(field, job, names[0], may)
    last = len(may) if at_most is None else min(len(may), at_most)
    if start > last or field.fits(job, names, may) is None:
        return None
    lost = {each.job_id: _lost((each,), now) for each in may}
    for size in range(start, last + 1):
        best = None
        for chosen in itertools.combinations(may, size):
            if frees is not None:
                if sum(frees[each.job_id] for each in chosen) < short:
                    continue
                got: dict[str, list[object]] | None = {}
            else:
                got = field.fits(job, names, chosen)
            if got is None:
                continue
            key = (
                size,
                sum(lost[each.job_id] for each in chosen),
                tuple(sorted(-each.start_time for each in chosen)),
                tuple(names) if frees is not None else tuple(sorted(got)),
            )
            if best is None or key < best[0]:
                best = (key, tuple(sorted(chosen, key=lambda each: each.job_id)), got)
        if best is not None:
            key, taken, got = best
            if frees is not None:  # the GPUs counted are those fits() gives
                got = field.fits(job, names, taken)
            return None if got is None else (key, taken, got)
    return None


def _bound(
    field: _Field, job: Job, name: str, may: Sequence[Running]
) -> tuple[int, int, dict[int, int] | None]:
    """(the fewest of `may` that could free enough GPUs of `job`'s type on node `name`,
    how many it is short, and what each frees where every such GPU there has one
    holder, else None)."""
    taken = field.claimed.get(name, set())
    types = field.types[name]
    kind = job.spec.gpu_type
    open_now = 0
    for gpu in field.free[name]:
        if gpu not in taken and (kind is None or types.get(gpu) == kind):  # type: ignore[call-overload]
            open_now += 1
    frees: dict[int, int] = dict.fromkeys((each.job_id for each in may), 0)
    alone = True
    for gpu, jobs in field.holders.get(name, {}).items():
        if gpu in taken or gpu in field.free[name]:
            continue
        if kind is not None and types.get(gpu) != kind:  # type: ignore[call-overload]
            continue
        left = jobs - field.gone
        if not left:
            open_now += 1
            continue
        if len(left) > 1:
            alone = False
        for holder in left:
            if holder in frees:
                frees[holder] += 1
    short = job.spec.gpus - open_now
    most, count = 0, 0
    for freed in sorted(frees.values(), reverse=True):
        if most >= short:
            break
        most += freed
        count += 1
    start = max(1, count)
    if not alone or field.views[name].whole:
        return start, short, None
    return start, short, frees


def _priority_order(job: Job) -> tuple[int, float, int]:
    return (-job.spec.effective_priority, job.submit_time, job.id)


def with_preemptions(result: Plan, found: Preemptions) -> Plan:
    """`result` with the preemptions `found`: victims, and reason Preemption for waiters."""
    if not found.victims and not found.waiting:
        return result
    reasons = dict(result.reasons)
    for job_id in found.waiting:
        reasons[job_id] = PREEMPTION
    return replace(result, reasons=reasons, preemptions=found.victims)


# ------------------------------------------------------------------- reservations


@dataclass(frozen=True, slots=True)
class Window:
    """A reservation's window as the planner sees it (gbatch/core/reservations.py).

    The one on now or the next to come. `nodes`: whole nodes; `gpus`: (node, GPU ids)."""

    name: str
    start: float
    end: float
    maint: bool = False
    nodes: frozenset[str] = frozenset()
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()


def plan_reserved(
    pending: Sequence[Job],
    nodes: Sequence[NodeView],
    usage: Mapping[str, float],
    now: float,
    limits: Mapping[str, UserLimits] | None = None,
    use: Mapping[str, Use] | None = None,
    windows: Sequence[Window] = (),
    outsiders: Callable[[Sequence[Job], Sequence[NodeView]], Plan] | None = None,
    running: Sequence[Running] = (),
    rules: PreemptRules | None = None,
) -> Plan:
    """plan() with reservations: what a window keeps goes to its jobs only.

    Without a window on now or to come, nor a job of a reservation, exactly plan().
    Else, in this order:

    1. Each window on now plans its own jobs (`spec.reservation` its name) over its
       nodes and GPUs alone (`_members_view`), whatever their partition; those of a
       window still to come, or of no window (one deleted or over), wait with reason
       "Reservation".
    2. Every other job plans over the nodes less the GPUs (and whole nodes) of every
       window on now or to come (`_outsiders_view`): none of them starts there.
       `outsiders(jobs, views)` runs this pass (the incremental Planner's; default plan()).
    3. Backfill before a window: for each window to come, by start, the jobs step 2 left
       waiting whose time limit ends by its start (a job without one never does) plan
       over its GPUs (less those of windows starting earlier).
    4. A job left waiting that asks no more GPUs than a window's node has free now gets
       that window's reason: "ReqNodeNotAvail, Reserved for maintenance" (MAINT) or
       "Reservation".

    5. Preemption (`running`, `rules`, as plan()'s): only by jobs of no reservation, and
       never of a job on a node that holds a GPU of a window on now or to come
       (`_preemptable`): a victim's GPUs there may be the window's (Running does not
       say which GPUs a job holds), which its preemptor could not take.

    Windows do not overlap on a GPU (the daemon refuses such a reservation). A user's
    limits count the starts of the steps before. Only the outsiders' pass reserves (its
    blocked job's expected start). Jobs across nodes are placed by the same passes, each
    over its view: a job of no window gets no GPU (and no whole node) of a window, a
    job of a window only its GPUs and nodes."""
    live = sorted((w for w in windows if w.end > now), key=lambda w: (w.start, w.name))
    if not live and not any(job.spec.reservation is not None for job in pending):
        if outsiders is not None:
            made = outsiders(pending, nodes)
            if not running or rules is None:
                return made
            found = preemptions(pending, made.reasons, made.assignments, nodes, running, now, rules)
            return with_preemptions(made, found)
        return plan(pending, nodes, usage, now, limits, use, running, rules)
    assignments: list[Assignment] = []
    reasons: dict[int, str] = {}
    held_for: dict[int, str] = {}
    held: dict[str, Use] = dict(use or {})
    by_name = {w.name: w for w in live}
    members: dict[str, list[Job]] = {}
    others: list[Job] = []
    for job in pending:
        name = job.spec.reservation
        if name is None:
            others.append(job)
        elif job.held:
            reasons[job.id] = HELD
        elif name in by_name and by_name[name].start <= now:
            # On the reservation's nodes, whatever partition it was queued in.
            members.setdefault(name, []).append(
                replace(job, spec=replace(job.spec, partition=None))
            )
        else:
            reasons[job.id] = RESERVATION_REASON
            held_for[job.id] = name
    jobs_by_id = {job.id: job for job in pending}

    def took(result: Plan) -> None:
        for each in result.assignments:
            assignments.append(each)
            job = jobs_by_id[each.job_id]
            was = held.get(job.user, Use())
            held[job.user] = Use(was.running_jobs + 1, was.gpus + job.spec.total_gpus)

    for name, jobs in sorted(members.items()):
        mine = by_name[name]
        # Less the GPUs of the windows that begin before this one ends.
        besides = [w for w in live if w is not mine and w.start < mine.end]
        result = plan(jobs, _members_view(nodes, mine, besides), usage, now, limits, held)
        took(result)
        reasons.update(result.reasons)
    views = _outsiders_view(nodes, live)
    if outsiders is not None:
        main = outsiders(others, views)
    else:
        main = plan(others, views, usage, now, limits, held)
    took(main)
    waiting = {job_id: reason for job_id, reason in main.reasons.items()}
    started = {each.job_id for each in assignments}
    for index, window in enumerate(live):
        if window.start <= now:
            continue
        fits = [
            job
            for job in others
            if job.id not in started
            and not job.held
            and job.time_limit is not None
            and now + job.time_limit <= window.start
        ]
        if not fits:
            continue
        earlier = [w for w in live[:index] if w.start < window.start]
        result = plan(fits, _members_view(nodes, window, earlier), usage, now, limits, held)
        took(result)
        for each in result.assignments:
            started.add(each.job_id)
            waiting.pop(each.job_id, None)
    free_by_node = {node.name: len(node.free_gpus) for node in nodes if node.available}
    for job_id, reason in waiting.items():
        if reason in (RESOURCES, PRIORITY) and job_id not in started:
            gpus = jobs_by_id[job_id].spec.gpus
            for window in live:
                names = window.nodes or {node for node, _ in window.gpus}
                if any(free_by_node.get(node, -1) >= gpus for node in names):
                    reason = MAINT_REASON if window.maint else RESERVATION_REASON
                    held_for[job_id] = window.name
                    break
        reasons[job_id] = reason
    for job_id in started:
        reasons.pop(job_id, None)
    made = Plan(
        assignments=tuple(assignments), reasons=reasons, starts=main.starts, held_for=held_for
    )
    if not running or rules is None:
        return made
    queue, open_nodes, victims = _preemptable(pending, nodes, live, now, running)
    found = preemptions(queue, reasons, assignments, open_nodes, victims, now, rules)
    return with_preemptions(made, found)


def _preemptable(
    pending: Iterable[Job],
    nodes: Sequence[NodeView],
    windows: Sequence[Window],
    now: float,
    running: Sequence[Running],
) -> tuple[list[Job], list[NodeView], list[Running]]:
    """The jobs that may preempt, the nodes victims may be taken on, and the victims
    that may be taken, with `windows`.

    The simplest rule that keeps a window's GPUs to its jobs: a job of a reservation
    preempts nothing, and no job is preempted that runs on a node holding a GPU (or the
    whole node) of a window on now or to come, a job across nodes on any of its nodes
    (its preemptor would take its GPUs on an open node, and free the window's beside
    them: found by the property test). Without such a window: all of them."""
    kept: set[str] = set()
    for window in windows:
        if window.end > now:
            kept.update(window.nodes)
            kept.update(name for name, _ in window.gpus)
    queue = [job for job in pending if job.spec.reservation is None]
    if not kept:
        return queue, list(nodes), list(running)
    victims = [
        each
        for each in running
        if each.node not in kept and not any(name in kept for name, _ in each.placed)
    ]
    return queue, [node for node in nodes if node.name not in kept], victims


def _outsiders_view(nodes: Sequence[NodeView], windows: Sequence[Window]) -> list[NodeView]:
    """The nodes as a job of no window sees them: each window's whole nodes closed (none
    of their GPUs free, nothing else starts there, their GPUs free at the window's
    end), each window's GPUs not free. Sizes unchanged: what a job could ever get
    (BadConstraints) stays as it was."""
    whole: dict[str, float] = {}
    hidden: dict[str, set[int]] = {}
    for window in windows:
        for name in window.nodes:
            whole[name] = max(whole.get(name, 0.0), window.end)
        for name, ids in window.gpus:
            hidden.setdefault(name, set()).update(ids)
    views: list[NodeView] = []
    for node in nodes:
        if node.name in whole:
            views.append(
                replace(
                    node,
                    free_gpus=(),
                    free_slices=(),
                    share_room=(),
                    whole=True,
                    releases=((whole[node.name], node.gpus_total),),
                    typed_releases=(),
                )
            )
        elif node.name in hidden:
            gone = hidden[node.name]
            views.append(
                replace(
                    node,
                    free_gpus=tuple(i for i in node.free_gpus if i not in gone),
                    share_room=tuple(r for r in node.share_room if r[0] not in gone),
                )
            )
        else:
            views.append(node)
    return views


def _members_view(
    nodes: Sequence[NodeView], window: Window, besides: Sequence[Window]
) -> list[NodeView]:
    """The nodes as a job of `window` sees them: its whole nodes as they are, or on each
    node of its GPUs those GPUs alone; less what the windows `besides` hold."""
    reserved = dict(window.gpus)
    views = [
        node
        for node in _outsiders_view(nodes, besides)
        if node.name in window.nodes or node.name in reserved
    ]
    out: list[NodeView] = []
    for node in views:
        ids = reserved.get(node.name)
        if ids is None:
            out.append(node)
            continue
        mine = set(ids)
        room = tuple(r for r in node.share_room if r[0] in mine)
        types = {i: t for i, t in node.gpu_types if i in mine}
        # Which of the node's busy GPUs each release frees is not known, so none is kept,
        # but those of its shared GPUs: the end of their shares (share_room), which a
        # share placed there moves (the planner's invariant).
        ends = [(i, end) for i, _, end in room if -math.inf < end < math.inf]
        out.append(
            replace(
                node,
                gpus_total=len(mine),
                free_gpus=tuple(i for i in node.free_gpus if i in mine),
                gpu_types=tuple(types.items()),
                free_slices=(),
                releases=tuple((end, 1) for _, end in ends),
                typed_releases=tuple((end, types[i], 1) for i, end in ends if i in types),
                shareable=tuple(s for s in node.shareable if s[0] in mine),
                share_room=room,
                busy=False,
                whole=False,
            )
        )
    return out
