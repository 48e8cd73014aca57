"""The nodes the head places jobs on, and what it knows of each beyond their reports.

That is whether each is up (gbatch/head/liveness.py), which released GPUs still wait for a
clean report, what the planner may use on each (NodeView) and how sinfo shows them
(NodeInfo).

The daemon's loop asks the fleet; request handlers (sinfo, submit checks, node
operations) read it. Neither writes a node's state here: the nodes' report threads do.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from gbatch.core.model import ALLOCATED_STATES, Gpu, Job, NodeInfo, NodeState, on_node
from gbatch.core.multinode import runs_everywhere
from gbatch.core.plan import NodeView
from gbatch.core.shares import CardShares, Sharing
from gbatch.core.shares import capacity as share_capacity
from gbatch.core.shares import room as share_room
from gbatch.head.liveness import Liveness, node_liveness
from gbatch.head.scheduler import NodeSize
from gbatch.head.store import Store
from gbatch.nodes.base import STARTING, Node
from gbatch.nodes.inventory import Inventory, Partition
from gbatch.nodes.joblog import NodeJoins
from gbatch.nodes.local import LocalNode
from gbatch.site.config import Config, Paths


def make_nodes(
    paths: Paths,
    config: Config,
    inventory: Inventory | None,
    on_change: Callable[[], None],
    joins: NodeJoins | None = None,
) -> list[Node]:
    """No inventory: the embedded default, this machine alone. Else the listed hosts.

    The hosts share `joins` (the output of jobs run on every node)."""
    if inventory is None or not inventory.nodes:  # none, or partitions of the embedded node
        return [LocalNode(paths, config, on_change=on_change)]
    # Deferred: paramiko is for fleets, not for a laptop's embedded node.
    from gbatch.nodes.remote import RemoteNode

    return [RemoteNode(node, paths, config, on_change, joins) for node in inventory.nodes]


class Fleet:
    def __init__(
        self,
        nodes: Iterable[Node],
        config: Config,
        store: Store,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        partitions: Sequence[Partition] = (),
        features: Mapping[str, Sequence[str]] | None = None,
        sharing: Mapping[str, Sharing] | None = None,
    ) -> None:
        self.nodes: dict[str, Node] = {node.name: node for node in nodes}
        # node name -> its sharing settings (the inventory's); a node left out (the
        # embedded one, without an inventory) has config.yaml's.
        self._default_sharing = Sharing(config.share_gpus, config.share_headroom_mib, config.mps)
        self.sharing: dict[str, Sharing] = dict(sharing or {})
        # node name -> its inventory features (-C/--constraint), in the file's order.
        self.features: dict[str, tuple[str, ...]] = {
            name: tuple(listed) for name, listed in (features or {}).items()
        }
        # name -> partition, in the inventory's order; the default one is marked.
        self.partitions: dict[str, Partition] = {p.name: p for p in partitions}
        self._partitions_of: dict[str, tuple[str, ...]] = {
            name: tuple(p.name for p in partitions if name in p.nodes) for name in self.nodes
        }
        self.config = config
        self.store = store  # read only: allocations and drains, for node_infos
        self.clock = clock
        self.monotonic = monotonic
        self._watching_since = monotonic()
        # node name -> whether it was up when came_up() last looked.
        self._was_up: dict[str, bool] = {}
        # (node, GPU index) -> number of the node's report at the GPU's release: it is
        # handed out again only after a later report shows its memory released.
        self._released_at_report: dict[tuple[str, int], int] = {}

    # -- life cycle -----------------------------------------------------------------

    def start(self, first_report_timeout: float = 10.0) -> None:
        """Start every node's reports; wait (bounded) until each has reported once or failed to.

        The wait lets the first plans and submit checks see the fleet.
        """
        for node in self.nodes.values():
            node.start()
        deadline = self.monotonic() + first_report_timeout
        while self.monotonic() < deadline and any(
            node.report() == (None, STARTING) for node in self.nodes.values()
        ):
            time.sleep(0.02)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    # -- what the loop asks -------------------------------------------------------------

    def liveness(self, node: Node) -> Liveness:
        report, _ = node.report()
        return node_liveness(
            last_heard=node.last_heard(),
            watching_since=self._watching_since,
            reporting=report is not None,
            now=self.monotonic(),
            report_interval=self.config.report_interval,
            down_after=self.config.node_down_seconds,
            lease=self.config.node_lease_seconds,
            fences_runs=node.fences_runs,
        )

    def came_up(self, liveness: Mapping[str, Liveness]) -> list[Node]:
        """The nodes up in `liveness` that were not up when this was last asked.

        At the first call: every node up. The daemon then reaps their stale runs.
        """
        back = []
        for name, node in self.nodes.items():
            up = liveness[name].state == "up"
            if up and not self._was_up.get(name, False):
                back.append(node)
            self._was_up[name] = up
        return back

    def run_nodes(self, job: Job) -> list[tuple[str, Node | None]]:
        """The nodes where `job` has (or had) a run, first node first, each with its Node.

        None for a node gone from the inventory. Its first node always; the others of a
        job across nodes when its command runs on every node (multinode.runs_everywhere),
        else they only hold their GPUs."""
        names = job.node_names if runs_everywhere(job.spec) else job.node_names[:1]
        return [(name, self.nodes.get(name)) for name in names]

    def release_gpus(self, node: Node, gpus: Sequence[int]) -> None:
        """A run on `gpus` ended: hand them out only once a later report shows them clean.

        It asks the node for that report now.
        """
        for gpu in gpus:
            self._released_at_report[(node.name, gpu)] = node.report_seq
        node.poke()

    def settling_gpus(self) -> dict[str, tuple[int, ...]]:
        """Each node's GPUs released by a run and waiting for a later report (not free yet).

        Preemption counts them as coming free: a preemptor whose victims just left waits
        for those, and preempts no one else meanwhile."""
        out: dict[str, list[int]] = {}
        for (name, gpu), seq in self._released_at_report.items():
            node = self.nodes.get(name)
            if node is not None and node.report_seq <= seq:
                out.setdefault(name, []).append(gpu)
        return {name: tuple(sorted(ids)) for name, ids in out.items()}

    def free_gpus(self, node: Node, gpus: Sequence[Gpu], held: Collection[int]) -> tuple[int, ...]:
        """The indices of `node`'s GPUs a job may be given now: the one meaning of free.

        The planner places jobs on these, and sinfo, the TUI, the web page and /metrics
        count them (NodeInfo.free_gpus), so a view never calls free a GPU a job would
        wait for. Free: not `held` by a gbatch job, no compute process gbatch did not
        start, less memory in use than `gpu_memory_threshold_mib` (a process NVML
        cannot list, in another namespace, still holds memory), and, after a run on it
        ended, a later report seen (the ended run's memory may not be released yet).
        A card in MIG mode is never free; each of its slices is by its own processes
        and memory.
        """
        seq = node.report_seq
        threshold = self.config.gpu_memory_threshold_mib
        return tuple(
            g.index
            for g in gpus
            if not g.mig
            and g.index not in held
            and g.foreign_processes == 0
            and g.memory_used_mib < threshold
            and seq > self._released_at_report.get((node.name, g.index), -1)
        )

    def sharing_of(self, name: str) -> Sharing:
        """Node `name`'s sharing settings: its inventory entry's, else config.yaml's."""
        return self.sharing.get(name, self._default_sharing)

    def card_shares(
        self, node: Node, gpus: Sequence[Gpu], mine: Sequence[Job]
    ) -> tuple[CardShares, ...]:
        """`node`'s shareable GPUs, their shared jobs and room: the one reckoning of room.

        The planner places shared jobs by it (NodeView.share_room) and sinfo, the TUI,
        the web page and /metrics show it (NodeInfo.shares), so a view never offers room
        the planner would not use. `mine`: the jobs allocated on the node. A card's room
        (gbatch/core/shares.py room) is its memory less the headroom, the memory of
        processes gbatch did not start and the budgets of its shared jobs; none while a
        job of whole GPUs holds it, or, after a run on it ended, until a later report
        (as free_gpus: the ended run's memory may not be released yet).
        """
        sharing = self.sharing_of(node.name)
        if not sharing.any:
            return ()
        seq = node.report_seq
        cards = []
        for g in gpus:
            # A card in MIG mode is handed out only as its slices, and a slice whole.
            if not sharing.shareable(g.index) or g.mig or g.parent is not None:
                continue
            shared = [j for j in mine if g.index in j.gpus and j.spec.gpu_mem_mb is not None]
            exclusive = any(g.index in j.gpus and j.spec.gpu_mem_mb is None for j in mine)
            budgets = sum(j.spec.gpu_mem_mb or 0 for j in shared)
            settled = seq > self._released_at_report.get((node.name, g.index), -1)
            room = (
                max(
                    0,
                    share_room(
                        g.memory_total_mib, g.foreign_memory_mib, budgets, sharing.headroom_mib
                    ),
                )
                if settled and not exclusive
                else 0
            )
            cards.append(
                CardShares(
                    index=g.index,
                    total_mib=g.memory_total_mib,
                    foreign_mib=g.foreign_memory_mib,
                    jobs=tuple(j.id for j in shared),
                    budgets_mib=budgets,
                    room_mib=room,
                    exclusive=exclusive,
                )
            )
        return tuple(cards)

    def charged_gpus(self, job: Job) -> float:
        """The GPUs fair share (sshare) and sreport charge `job`.

        Its count, or for a share of one GPU (--gpu-mem) its budget over the card's
        memory (20G of an 80G card: 0.25), from its node's latest report; 1 where that
        card is not known (its node gone)."""
        if job.spec.gpu_mem_mb is None:
            return float(job.gpu_count)
        node = self.nodes.get(job.node or "")
        report = node.report()[0] if node is not None else None
        if node is not None and report is not None and job.gpus:
            for gpu in node.gpus(report):
                if gpu.index == job.gpus[0] and gpu.memory_total_mib > 0:
                    return min(1.0, job.spec.gpu_mem_mb / gpu.memory_total_mib)
        return 1.0

    @staticmethod
    def uuids(node: Node, gpus: Sequence[int]) -> tuple[str, ...]:
        """The UUIDs of `node`'s GPUs `gpus` (a MIG slice's: `MIG-...`), "" for one unknown."""
        report, _ = node.report()
        by_index = {g.index: g.uuid for g in node.gpus(report)} if report else {}
        return tuple(by_index.get(g, "") for g in gpus)

    def node_view(
        self,
        node: Node,
        allocated: Sequence[Job],
        drained: Mapping[str, str],
        *,
        check_engine: bool = False,
        now: float = 0.0,
    ) -> NodeView:
        """What the planner may use on `node` now (see NodeView).

        Without `check_engine` the node's docker engine is taken to answer.
        """
        report, problem = node.report()
        partitions = frozenset(self._partitions_of.get(node.name, ()))
        liveness = self.liveness(node)
        if report is None or liveness.state != "up":
            why = f"{liveness.state}: {liveness.describe(problem if report is None else '')}"
            return NodeView(
                node.name,
                0,
                (),
                available=False,
                unavailable_reason=why,
                partitions=partitions,
                features=frozenset(self.features.get(node.name, ())),
            )
        gpus = node.gpus(report)
        mine = on_node(allocated, node.name)
        free = self.free_gpus(node, gpus, {g for job in mine for g in job.gpus})
        # A job asking no type gets whole cards only: the planner's counts, free GPUs
        # and releases are of those; MIG slices are typed GPUs (gpu_types, free_slices).
        slices = {g.index for g in gpus if g.parent is not None}
        whole = sum(g.schedulable for g in gpus) - len(slices)
        free_slices: tuple[int, ...] = ()
        if slices:
            free_slices = tuple(i for i in free if i in slices)
            free = tuple(i for i in free if i not in slices)
        ends = self._ends(mine)
        releases = tuple(
            (when, len(ids)) for when, ids in ends if not slices or not slices.issuperset(ids)
        )
        gpu_types = tuple((g.index, g.type) for g in gpus if g.type and g.schedulable)
        typed = _typed_releases(ends, dict(gpu_types)) if gpu_types else ()
        cards = self.card_shares(node, gpus, mine)
        headroom = self.sharing_of(node.name).headroom_mib
        shareable = tuple((c.index, share_capacity(c.total_mib, headroom)) for c in cards)
        features = frozenset(self.features.get(node.name, ())) | {g.type for g in gpus if g.type}
        closed = None
        if node.name in drained:
            closed = f"drained: {drained[node.name]}"
        elif report.lease_problem:  # a run started there could be fenced: none is
            closed = f"suspect: {_lease_reason(report.lease_problem)}"
        if closed is not None:
            return NodeView(
                node.name,
                whole,
                (),
                available=False,
                unavailable_reason=closed,
                releases=releases,
                partitions=partitions,
                cpus_total=report.cpus,
                mem_total_mb=report.memory_mb,
                gpu_types=gpu_types,
                features=features,
                typed_releases=typed,
                shareable=shareable,
            )
        runs_containers = not check_engine or node.docker_problem(now) is None
        card_ends = dict(self._card_ends(mine))
        return NodeView(
            node.name,
            whole,
            free,
            releases=releases,
            runs_containers=runs_containers,
            partitions=partitions,
            cpus_total=report.cpus,
            free_cpus=(report.cpus or 0) - sum(job.spec.cpus_reserved for job in mine),
            mem_total_mb=report.memory_mb,
            free_mem_mb=(report.memory_mb or 0) - sum(job.spec.memory_mb or 0 for job in mine),
            gpu_types=gpu_types,
            features=features,
            typed_releases=typed,
            free_slices=free_slices,
            shareable=shareable,
            share_room=tuple(
                (c.index, c.room_mib, card_ends.get(c.index, -math.inf))
                for c in cards
                if c.room_mib > 0
            ),
            busy=bool(mine),
            whole=any(job.spec.exclusive for job in mine),
        )

    def _ends(self, mine: Sequence[Job]) -> list[tuple[float, tuple[int, ...]]]:
        """When the GPUs of the jobs on a node come free: (time, indices); inf: never.

        A job of whole GPUs frees its own at its end; a shared card comes free when the
        last of its shared jobs ends."""
        ends = [
            (self._end(job), job.gpus) for job in mine if job.gpus and job.spec.gpu_mem_mb is None
        ]
        ends.extend((when, (index,)) for index, when in self._card_ends(mine))
        return ends

    def _card_ends(self, mine: Sequence[Job]) -> Iterable[tuple[int, float]]:
        """(index, when its last shared job ends) for each card with shared jobs."""
        last: dict[int, float] = {}
        for job in mine:
            if job.spec.gpu_mem_mb is not None:
                for index in job.gpus:
                    last[index] = max(last.get(index, -math.inf), self._end(job))
        return last.items()

    def _end(self, job: Job) -> float:
        if not job.spec.time_limit:
            return math.inf
        return (job.start_time or self.clock()) + job.spec.time_limit

    # -- what requests ask ------------------------------------------------------------

    def default_partition(self) -> Partition | None:
        """Where a job without -p goes; None for a fleet built without partitions."""
        return next((p for p in self.partitions.values() if p.default), None)

    def node_infos(self) -> list[NodeInfo]:
        """Every node as sinfo shows it."""
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        drained = self.store.drained_nodes()
        drain_times = self.store.drain_times()
        return [
            self._node_info(node, allocated, drained, drain_times) for node in self.nodes.values()
        ]

    def _node_info(
        self,
        node: Node,
        allocated: Sequence[Job],
        drained: Mapping[str, str],
        drain_times: Mapping[str, float],
    ) -> NodeInfo:
        report, problem = node.report()
        allocations = {g: job.id for job in on_node(allocated, node.name) for g in job.gpus}
        liveness = self.liveness(node)
        if report is None or liveness.state != "up":
            silent = NodeState.DOWN if liveness.state == "down" else NodeState.SUSPECT
            # The last report's GPUs while it is kept, so allocations show on them.
            kept = node.gpus(report) if report is not None else ()
            return NodeInfo(
                node.name,
                silent,
                reason=liveness.describe(problem if report is None else ""),
                gpus=kept,
                allocations=allocations,
                free_gpus=self.free_gpus(node, kept, allocations),
                address=node.address,
                partitions=self._partitions_of.get(node.name, ()),
                cpus_total=report.cpus if report is not None else None,
                mem_total_mb=report.memory_mb if report is not None else None,
                # Silent since its last report: the head itself set this reason.
                reason_time=self.clock() - liveness.silent_seconds,
                reason_user=_head_user(),
                features=self.features.get(node.name, ()),
                shares=self.card_shares(node, kept, on_node(allocated, node.name)),
            )
        gpus = node.gpus(report)
        if node.name in drained:
            state, reason = NodeState.DRAINED, drained[node.name]
        elif report.lease_problem:
            state, reason = NodeState.SUSPECT, _lease_reason(report.lease_problem)
        elif not allocations:
            state, reason = NodeState.IDLE, ""
        elif len(allocations) >= sum(g.schedulable for g in gpus):
            state, reason = NodeState.ALLOCATED, ""
        else:
            state, reason = NodeState.MIXED, ""
        if not gpus and not reason:
            reason = report.note
        mine = on_node(allocated, node.name)
        free = self.free_gpus(node, gpus, allocations)
        reason_time, reason_user = None, ""
        if state is NodeState.DRAINED:
            reason_time = drain_times.get(node.name)
            # handlers' on_node_drain writes "<reason> [<admin>]": the admin is sinfo -R's USER.
            by = _DRAINED_BY.search(reason)
            reason_user = by.group(1) if by else ""
        elif state is NodeState.SUSPECT:
            reason_user = _head_user()
        return NodeInfo(
            node.name,
            state,
            reason=reason,
            gpus=gpus,
            allocations=allocations,
            free_gpus=free,
            address=node.address,
            partitions=self._partitions_of.get(node.name, ()),
            cpus_total=report.cpus,
            mem_total_mb=report.memory_mb,
            cpus_allocated=sum(job.spec.cpus_reserved for job in mine),
            mem_allocated_mb=sum(job.spec.memory_mb or 0 for job in mine),
            reason_time=reason_time,
            reason_user=reason_user,
            features=self.features.get(node.name, ()),
            shares=self.card_shares(node, gpus, mine),
        )

    def all_reported(self) -> bool:
        """Whether every node's size is known (none is down)."""
        return all(node.report()[0] is not None for node in self.nodes.values())

    def sizes_for(self, partition: str | None) -> list[NodeSize] | None:
        """The sizes of the nodes a job of `partition` may run on, from their reports.

        The partition's nodes, or every node when the fleet has no partitions or none is
        named. None while one of them has not reported: its size is unknown, and a job
        it might hold is not refused for it.
        """
        chosen = self.partitions.get(partition) if partition is not None else None
        names = chosen.nodes if chosen is not None else tuple(self.nodes)
        sizes = []
        for name in names:
            node = self.nodes.get(name)
            if node is None:
                continue
            report, _ = node.report()
            if report is None:
                return None
            gpus = node.gpus(report)
            # As node_view: GPUs of no type asked are whole cards; slices only by type.
            whole = sum(g.schedulable and g.parent is None for g in gpus)
            types = tuple(sorted(Counter(g.type for g in gpus if g.type and g.schedulable).items()))
            features = frozenset(self.features.get(name, ())) | {g.type for g in gpus if g.type}
            sharing = self.sharing_of(name)
            shares = tuple(
                (g.type, share_capacity(g.memory_total_mib, sharing.headroom_mib))
                for g in gpus
                if sharing.shareable(g.index)
            )
            sizes.append(
                NodeSize(name, whole, report.cpus, report.memory_mb, types, features, shares)
            )
        return sizes

    def max_gpus_per_node(self) -> tuple[int, str]:
        """The most GPUs any node reports, and (with none) why.

        MIG slices count, their cards in MIG mode not."""
        best, why = 0, "no node has reported"
        for node in self.nodes.values():
            report, problem = node.report()
            if report is None:
                why = problem
                continue
            count = sum(g.schedulable for g in node.gpus(report))
            if count > best or best == 0:
                best, why = count, report.note
        return best, why


def _typed_releases(
    ends: Sequence[tuple[float, tuple[int, ...]]], types: Mapping[int, str]
) -> tuple[tuple[float, str, int], ...]:
    """(time, type, GPUs of that type freed) for each release and each of its GPUs' types."""
    typed: list[tuple[float, str, int]] = []
    for when, ids in ends:
        counts = Counter(types[g] for g in ids if g in types)
        typed.extend((when, kind, count) for kind, count in sorted(counts.items()))
    return tuple(typed)


_DRAINED_BY = re.compile(r" \[([^\[\]]+)\]$")


def _head_user() -> str:
    """The account the daemon runs as: who set the reasons the head gives itself (as
    Slurm's sinfo -R names SlurmUser)."""
    import pwd  # deferred: only sinfo's node rows need it

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _lease_reason(problem: str) -> str:
    """sinfo's REASON for a host that reports but cannot write its renewed lease."""
    return f"lease not renewed ({problem}): no new jobs until the host can write it"
