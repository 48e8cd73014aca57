"""One meaning of a free GPU: what the planner may hand out (Fleet.node_view) is what
sinfo, the TUI, the web page and /metrics count as free (NodeInfo.free_gpus), whatever
foreign processes, foreign memory, allocations and settling releases the node's GPUs
show (issue 30: sinfo said `FREE 2` while a 2-GPU job waited `(Resources)`)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from test_node_loss_rules import Clocks, FakeNode

from gbatch.core.model import Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.head.fleet import Fleet
from gbatch.nodes.report import NodeReport
from gbatch.protocol.codec import node_from_wire, node_to_wire
from gbatch.render.sinfo import format_sinfo_json
from gbatch.site.config import Config

THRESHOLD = 512


class GpuNode(FakeNode):
    """A fake node whose GPUs the test sets."""

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        super().__init__("gpu01", Clocks())
        self.gpu_list = tuple(gpus)

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return self.gpu_list

    def poke(self) -> None:
        pass


class Allocations:
    """The store's read side Fleet.node_infos uses: these running jobs, no drains."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)

    def jobs_in(self, states: object) -> list[Job]:
        return self.jobs

    def drained_nodes(self) -> dict[str, str]:
        return {}

    def drain_times(self) -> dict[str, float]:
        return {}


def _running(job_id: int, gpus: tuple[int, ...]) -> Job:
    spec = JobSpec(name="x", command=("true",), gpus=len(gpus))
    return Job(job_id, 0, "root", spec, JobState.RUNNING, 0.0, node="gpu01", gpus=gpus)


def _fleet(gpus: Sequence[Gpu], jobs: Sequence[Job]) -> tuple[Fleet, GpuNode]:
    node = GpuNode(gpus)
    config = Config(gpu_memory_threshold_mib=THRESHOLD)
    clocks = node.clocks
    fleet = Fleet(
        [node],
        config,
        Allocations(jobs),
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,  # type: ignore[arg-type]
    )
    return fleet, node


gpu_states = st.lists(
    st.tuples(
        st.integers(0, 2),  # foreign compute processes
        st.sampled_from([0, 100, THRESHOLD - 1, THRESHOLD, 4000, 81000]),  # MiB in use
        st.booleans(),  # held by a gbatch job
        st.booleans(),  # released at the latest report (its memory may still be held)
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(gpu_states)
def test_sinfo_counts_free_exactly_the_gpus_the_planner_may_hand_out(states: list) -> None:
    gpus = [
        Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", 81920, used, foreign_processes=foreign)
        for i, (foreign, used, _, _) in enumerate(states)
    ]
    held = tuple(i for i, (_, _, h, _) in enumerate(states) if h)
    jobs = [_running(1, held)] if held else []
    fleet, node = _fleet(gpus, jobs)
    fleet.release_gpus(node, [i for i, (_, _, h, r) in enumerate(states) if r and not h])
    planner = fleet.node_view(node, jobs, {})
    (info,) = fleet.node_infos()
    assert info.free_indices == frozenset(planner.free_gpus)
    assert info.gpus_free == len(planner.free_gpus)
    assert info.gpus_allocated + info.gpus_free + info.gpus_busy_outside == len(gpus)
    # The client reads the same from the wire, and sinfo's JSON marks the same GPUs.
    again = node_from_wire(node_to_wire(info))
    assert again.free_indices == info.free_indices
    assert again.gpus_free == info.gpus_free


def test_memory_of_a_process_gbatch_cannot_see_makes_a_gpu_busy_in_sinfo_too() -> None:
    """The defect: 4,000 MiB used, no process listed; the planner would not use it."""
    gpus = [
        Gpu(0, "GPU-0", "NVIDIA A100-SXM4-80GB", 81920, 4000),
        Gpu(1, "GPU-1", "NVIDIA A100-SXM4-80GB", 81920, 0),
    ]
    fleet, node = _fleet(gpus, [])
    assert fleet.node_view(node, [], {}).free_gpus == (1,)
    (info,) = fleet.node_infos()
    assert (info.gpus_free, info.gpus_busy_outside) == (1, 1)
    assert '"free": false' in format_sinfo_json([info])


def test_a_head_that_sends_no_free_list_is_read_as_before() -> None:
    """An older head's node (no free_gpus): free means no foreign process, as it was."""
    gpus = (Gpu(0, "GPU-0", "x", 100, 0, foreign_processes=1), Gpu(1, "GPU-1", "x", 100, 0))
    old = NodeInfo("n", NodeState.IDLE, gpus=gpus)
    assert (old.gpus_free, old.gpus_busy_outside) == (1, 1)


def test_the_web_pages_gpu_table_says_alloc_free_or_busy_as_the_planner_would() -> None:
    from gbatch.api.web import Web

    gpus = [
        Gpu(0, "GPU-0", "NVIDIA A100-SXM4-80GB", 81920, 30000),  # held by job 7
        Gpu(1, "GPU-1", "NVIDIA A100-SXM4-80GB", 81920, 4000),  # memory gbatch did not start
        Gpu(2, "GPU-2", "NVIDIA A100-SXM4-80GB", 81920, 0),
    ]
    fleet, _ = _fleet(gpus, [_running(7, (0,))])
    (info,) = fleet.node_infos()
    templates = Web(api=None).templates
    html = templates.get_template("nodes.html").render(
        csrf="", signed_in=True, nodes=[node_to_wire(info)], partitions=[]
    )
    table = html[html.index('<table id="gpus">') :]
    uses = [row.split("<td>")[3].split("</td>")[0] for row in table.split("<tr>")[2:]]
    assert uses == ["alloc", "busy", "free"]


def test_gpus_released_and_not_yet_reported_clean_are_settling_until_a_later_report() -> None:
    """Preemption counts them as coming free (gbatch/head/loop/preempt.py running): a
    preemptor whose victims just left waits for them rather than preempting others."""
    gpus = [Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", 81920, 0) for i in range(4)]
    fleet, node = _fleet(gpus, [])
    assert fleet.settling_gpus() == {}
    fleet.release_gpus(node, [2, 0])
    assert fleet.settling_gpus() == {"gpu01": (0, 2)}
    assert fleet.node_view(node, [], {}).free_gpus == (1, 3)
    node.seq += 1
    assert fleet.settling_gpus() == {}
