"""Shares of a GPU by memory (issue 30): `--gpu-mem=SIZE` (gbatch's) and Slurm's
`--gres=shard:N` ask for part of one card's memory instead of whole GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_node_loss_rules import Clocks, FakeNode

from gbatch.api.metrics import _nodes_text
from gbatch.core.model import Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.core.shares import CardShares, Sharing
from gbatch.head.accounting import usage_by
from gbatch.head.daemon import Daemon
from gbatch.head.fleet import Fleet
from gbatch.head.handlers import Caller, handle
from gbatch.head.jobupdate import UpdateRefused, plan_update
from gbatch.head.loop.runs import gpu_seconds
from gbatch.head.store.window import planning_spec
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.submit import request_for_text
from gbatch.mcp.tools import submit_words
from gbatch.nodes.base import job_env
from gbatch.nodes.docker import docker_run_argv
from gbatch.nodes.inventory import Partition
from gbatch.nodes.report import GpuReport, NodeReport, ProcessReport, to_gpus
from gbatch.protocol.codec import job_from_wire, job_to_wire, node_from_wire, node_to_wire
from gbatch.render.scontrol import format_job_details, format_node_details
from gbatch.render.sinfo import format_sinfo_gpus, sinfo_gres
from gbatch.render.squeue import _tres_per_node
from gbatch.site.config import Config

ROOT = Caller(uid=0, user="root", pid=1)

WRAP = ("--wrap", "true")


def spec_of(text: str | None, *options: str, name: str = "job.yaml") -> dict[str, Any]:
    return request_for_text(text, name, options).spec


# -- the spec ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "mib"),
    [
        (("--gpu-mem=20G",), 20480),
        (("--gpu-mem", "512"), 512),
        (("--gpu-mem=1.5G",), None),
    ],
)
def test_gpu_mem_is_a_memory_size_in_slurms_spelling(
    options: tuple[str, ...], mib: int | None
) -> None:
    if mib is None:
        with pytest.raises(BadSubmit, match=r"^--gpu-mem: "):
            spec_of(None, *options, *WRAP)
        return
    spec = spec_of(None, *options, *WRAP)
    assert (spec["gpu_mem"], spec["gpus"]) == (mib, 1)


def test_a_share_with_a_type_is_one_gpu_of_that_model() -> None:
    spec = spec_of(None, "--gpus=a100:1", "--gpu-mem=20G", *WRAP)
    assert (spec["gpus"], spec["gpu_type"], spec["gpu_mem"]) == (1, "a100", 20480)
    spec = spec_of(None, "--gres=gpu:h100:1", "--gpu-mem=10G", *WRAP)
    assert (spec["gpus"], spec["gpu_type"], spec["gpu_mem"]) == (1, "h100", 10240)


@pytest.mark.parametrize(
    "options", [("--gpus=2",), ("--gpus=a100:2",), ("--gres=gpu:3",), ("--gpus=0",)]
)
def test_a_share_of_more_or_fewer_than_one_gpu_is_refused_in_one_line(
    options: tuple[str, ...],
) -> None:
    with pytest.raises(BadSubmit) as caught:
        spec_of(None, *options, "--gpu-mem=20G", *WRAP)
    message = caught.value.message
    assert message.startswith("--gpu-mem: a share of one GPU's memory"), message
    assert "\n" not in message


def test_sbatch_lines_and_job_files_ask_for_a_share() -> None:
    script = "#!/bin/bash\n#SBATCH --gpu-mem=16G\ntrue\n"
    assert spec_of(script, name="job.sh")["gpu_mem"] == 16384
    assert spec_of("command: 'true'\ngpu_mem: 20G\n")["gpu_mem"] == 20480
    typed = spec_of("command: 'true'\ngpus: a100:1\ngpu_mem: 20G\n")
    assert (typed["gpus"], typed["gpu_type"], typed["gpu_mem"]) == (1, "a100", 20480)
    with pytest.raises(BadSubmit, match=r"^gpu_mem: a share of one GPU's memory, but gpus"):
        spec_of("command: 'true'\ngpus: 2\ngpu_mem: 20G\n")


def test_cpus_per_gpu_counts_a_share_as_one_gpu() -> None:
    assert spec_of(None, "--gpu-mem=8G", "--cpus-per-gpu=4", *WRAP)["cpus"] == 4


def test_the_share_goes_through_store_wire_and_planning_window() -> None:
    spec = JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20480)
    data = spec.to_dict()
    assert data["gpu_mem"] == 20480
    assert JobSpec.from_dict(data) == spec
    assert spec.to_wire()["gpu_mem"] == 20480
    assert planning_spec(data).gpu_mem_mb == 20480
    assert "gpu_mem" not in JobSpec(name="j", command=("true",), gpus=1).to_dict()


def test_mcp_submit_asks_for_a_share_as_sbatch_does() -> None:
    words = submit_words({"wrap": "true", "gpu_mem": "20G", "gpu_type": "a100"})
    spec = request_for_text(None, "mcp", words).spec
    assert (spec["gpus"], spec["gpu_type"], spec["gpu_mem"]) == (1, "a100", 20480)


def _pending(spec: JobSpec) -> Job:
    return Job(id=1, uid=1000, user="u", spec=spec, state=JobState.PENDING, submit_time=0.0)


def test_scontrol_update_keeps_a_share_on_one_gpu_or_replaces_it_with_gres() -> None:
    job = _pending(JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20480))
    with pytest.raises(UpdateRefused, match="NumGPUs: the job asks for a share of one GPU"):
        plan_update(job, {"NumGPUs": "2"}, admin=False, partitions={})
    whole = plan_update(job, {"Gres": "gpu:2"}, admin=False, partitions={}).spec
    assert (whole.gpus, whole.gpu_mem_mb) == (2, None)


# -- Slurm's shards --------------------------------------------------------------------


def test_gres_shard_asks_shards_of_one_gpu_and_a_type_is_kept() -> None:
    spec = spec_of(None, "--gres=shard:2", *WRAP)
    assert (spec["gpus"], spec["gpu_shards"], spec.get("gpu_type")) == (1, 2, None)
    typed = spec_of(None, "--gres=shard:a100:3", *WRAP)
    assert (typed["gpu_shards"], typed["gpu_type"]) == (3, "a100")
    assert spec_of(None, "--gres=shard", *WRAP)["gpu_shards"] == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--gres=shard:0",), '--gres: "shard:0" is not a shard request'),
        (("--gres=shard:a100:x",), '--gres: "shard:a100:x" is not a shard request'),
        (("--gres=shard:2", "--gpu-mem=10G"), "--gpu-mem: --gres asks for shards too"),
        (("--gres=shard:2", "--gpus=2"), "--gpus and --gres both given"),
    ],
)
def test_bad_shard_requests_are_one_line_naming_the_option(
    options: tuple[str, ...], message: str
) -> None:
    with pytest.raises(BadSubmit) as caught:
        spec_of(None, *options, *WRAP)
    assert caught.value.message.startswith(message), caught.value.message


# -- refused at submit what no shareable GPU could hold ---------------------------------


class ShareNode(FakeNode):
    """A reporting node of 80 GB A100s (and an RTX 4090 when `rtx`)."""

    runs_bare_processes = True

    def __init__(self, name: str, gpus: int, rtx: bool = False) -> None:
        super().__init__(name, Clocks())
        self.count, self.rtx = gpus, rtx

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        cards = [
            Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", 81920, 0, type="a100")
            for i in range(self.count)
        ]
        if self.rtx:
            cards.append(
                Gpu(self.count, "GPU-r", "NVIDIA GeForce RTX 4090", 24564, 0, type="rtx4090")
            )
        return tuple(cards)


def _shared_fleet(daemon: Daemon, sharing: dict[str, Sharing]) -> None:
    fleet = daemon.fleet
    fleet.nodes = {"big": ShareNode("big", 2, rtx=True), "small": ShareNode("small", 1)}
    fleet.partitions = {
        "gpu": Partition("gpu", ("big", "small"), default=True),
        "whole": Partition("whole", ("small",)),
    }
    fleet.sharing = dict(sharing)


def _submit(daemon: Daemon, **spec: Any) -> dict[str, Any]:
    fields = JobSpec(name="j", command=("true",), **spec).to_dict()
    return handle(daemon, ROOT, {"op": "submit", "spec": fields})


def test_a_share_a_shareable_gpu_holds_is_queued(daemon: Daemon) -> None:
    _shared_fleet(daemon, {"big": Sharing((0, 2), headroom_mib=1024)})
    assert _submit(daemon, gpus=1, gpu_mem_mb=80 * 1024 - 1024, partition="gpu")["ok"]
    assert _submit(daemon, gpus=1, gpu_mem_mb=20 * 1024, gpu_type="rtx4090")["ok"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"gpu_mem_mb": 80 * 1024, "partition": "gpu"},
            "--gpu-mem: 80G of one GPU requested but the largest share a GPU of partition gpu "
            "takes is 79G (its memory less the admin's headroom). Ask for at most 79G",
        ),
        (
            {"gpu_mem_mb": 10 * 1024, "partition": "whole"},
            "--gpu-mem: 10G of one GPU requested but no GPU of partition whole takes shares; "
            "no GPU there is shareable",
        ),
        (
            {"gpu_mem_mb": 24 * 1024, "gpu_type": "rtx4090"},
            "--gpu-mem: 24G of one rtx4090 GPU requested but the largest share a rtx4090 GPU "
            "of partition gpu takes is 23540M",
        ),
    ],
)
def test_a_share_no_shareable_gpu_could_hold_is_refused_in_one_line(
    daemon: Daemon, spec: dict[str, Any], message: str
) -> None:
    _shared_fleet(daemon, {"big": Sharing((0, 2), headroom_mib=1024)})
    reply = _submit(daemon, gpus=1, **spec)
    assert reply["ok"] is False and reply["kind"] == "invalid"
    assert reply["error"].startswith(message), reply["error"]
    assert "\n" not in reply["error"]
    assert daemon.store.count() == 0


def test_shards_are_the_admins_size_or_refused_without_one(daemon: Daemon) -> None:
    _shared_fleet(daemon, {"big": Sharing(True)})
    reply = _submit(daemon, gpus=1, gpu_shards=2)
    assert reply["ok"] is False
    assert reply["error"].startswith("--gres: shard:2 asks for shards, but this cluster's admin")
    daemon.config = replace(daemon.config, shard_mib=10 * 1024)
    assert _submit(daemon, gpus=1, gpu_shards=2)["ok"]
    (job,) = daemon.store.jobs()
    assert (job.spec.gpu_mem_mb, job.spec.gpu_shards) == (20 * 1024, 2)
    too_many = _submit(daemon, gpus=1, gpu_shards=9)
    assert too_many["error"].startswith("--gres: shard:9 (90G) of one GPU requested")


# -- what the job sees -------------------------------------------------------------------


def test_a_shared_job_sees_its_card_and_budget_and_under_mps_its_limit() -> None:
    spec = JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20480, image="img")
    shared = Job(2, 1000, "u", spec, JobState.CONFIGURING, 0.0, node="n", gpus=(3,))
    env = job_env(shared, 1, (3,), "n")
    assert (env["GBATCH_GPU_MEM_MIB"], env["GBATCH_GPUS"]) == ("20480", "3")
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
    # NVIDIA's form: the job's one visible device, ordinal 0, and a size with its unit.
    assert job_env(shared, 1, (3,), "n", mps=True)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == (
        "0=20480M"
    )
    whole = Job(3, 1000, "u", spec.replace(gpu_mem_mb=None), JobState.CONFIGURING, 0.0)
    assert "GBATCH_GPU_MEM_MIB" not in job_env(whole, 1, (3,), "n", mps=True)
    argv = docker_run_argv(job_id=2, attempt=1, user="u", spec=spec, gpus=(3,), env_file=None)
    assert argv[argv.index("--gpus") + 1] == '"device=3"'


# -- one reckoning of room: the planner's view and every display -----------------------


class CardsNode(FakeNode):
    """A fake node whose GPUs the test sets."""

    def __init__(self, gpus: tuple[Gpu, ...]) -> None:
        super().__init__("gpu01", Clocks())
        self.gpu_list = gpus

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return self.gpu_list

    def poke(self) -> None:
        pass


class Allocations:
    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs

    def jobs_in(self, states: object) -> list[Job]:
        return self.jobs

    def drained_nodes(self) -> dict[str, str]:
        return {}

    def drain_times(self) -> dict[str, float]:
        return {}


card_states = st.lists(
    st.tuples(
        st.sampled_from([0, 300, 4000, 30 * 1024, 81920]),  # MiB used by foreign processes
        st.integers(0, 2),  # foreign processes
        st.sampled_from(["none", "whole", "shares"]),  # what gbatch runs on it
        st.booleans(),  # a run on it just ended (its memory may still be held)
        st.booleans(),  # shareable
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(card_states, st.sampled_from([0, 1024]))
def test_views_show_exactly_the_room_the_planner_places_shares_by(
    states: list[tuple[int, int, str, bool, bool]], headroom: int
) -> None:
    """sinfo, the TUI, the web page and /metrics read NodeInfo.shares; the planner reads
    NodeView.share_room: both from Fleet.card_shares, whatever the foreign memory."""
    jobs: list[Job] = []
    gpus = []
    for i, (foreign, processes, held, _, _) in enumerate(states):
        budgets = 0
        if held == "whole":
            spec = JobSpec(name="w", command=("true",), gpus=1, time_limit=600)
            jobs.append(Job(100 + i, 0, "u", spec, JobState.RUNNING, 0.0, node="gpu01", gpus=(i,)))
        elif held == "shares":
            for k, budget in enumerate((20480, 10240)):
                spec = JobSpec(name="s", command=("true",), gpus=1, gpu_mem_mb=budget)
                jobs.append(
                    Job(
                        200 + 10 * i + k,
                        0,
                        "u",
                        spec,
                        JobState.RUNNING,
                        0.0,
                        node="gpu01",
                        gpus=(i,),
                    )
                )
                budgets += budget
        gpus.append(
            Gpu(
                i,
                f"GPU-{i}",
                "NVIDIA A100-SXM4-80GB",
                81920,
                min(81920, foreign + budgets // 2),
                foreign_processes=processes,
                foreign_memory_mib=foreign,
                type="a100",
            )
        )
    node = CardsNode(tuple(gpus))
    shareable = tuple(i for i, state in enumerate(states) if state[4])
    config = Config(share_gpus=shareable, share_headroom_mib=headroom)
    clocks = node.clocks
    fleet = Fleet(
        [node],
        config,
        Allocations(jobs),  # type: ignore[arg-type]
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,  # type: ignore[arg-type]
    )
    fleet.release_gpus(node, [i for i, s in enumerate(states) if s[3] and s[2] == "none"])
    view = fleet.node_view(node, jobs, {})
    (info,) = fleet.node_infos()
    room = {c.index: c.room_mib for c in info.shares if c.room_mib > 0}
    assert room == {index: mib for index, mib, _ in view.share_room}
    assert [c.index for c in info.shares] == [i for i, _ in view.shareable] == list(shareable)
    for index, (foreign, _, held, ended, _) in enumerate(states):
        if index not in shareable:
            continue
        budgets = 30720 if held == "shares" else 0
        settling = ended and held == "none"
        expected = (
            0 if held == "whole" or settling else max(0, 81920 - headroom - foreign - budgets)
        )
        assert room.get(index, 0) == expected
        # A card holding shares is never free for a job of whole GPUs.
        if held == "shares":
            assert index not in view.free_gpus
    again = node_from_wire(node_to_wire(info))
    assert again.shares == info.shares


def test_a_gbatch_process_memory_is_not_foreign_but_the_rest_of_the_card_is() -> None:
    card = GpuReport(
        0,
        "GPU-0",
        "NVIDIA A100-SXM4-80GB",
        81920,
        30000,
        0,
        True,
        (ProcessReport(10, 77, 18000, None), ProcessReport(11, 5, 2000, None)),
    )
    report = NodeReport(1, 0.0, "h", "simulation", "", (card,), None)
    (gpu,) = to_gpus(report, gbatch_sessions={77}, gbatch_containers=())
    # 30000 in use, 18000 of it gbatch's job's: 12000 is foreign (2000 listed, the rest
    # held by what NVML cannot list).
    assert (gpu.foreign_processes, gpu.foreign_memory_mib) == (1, 12000)


# -- the views ------------------------------------------------------------------------


def _shared_node() -> NodeInfo:
    gpus = tuple(
        Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", 81920, 0, type="a100") for i in range(2)
    )
    return NodeInfo(
        "gpu01",
        NodeState.MIXED,
        gpus=gpus,
        allocations={1: 7},
        free_gpus=(0,),
        shares=(
            CardShares(0, 81920, 0, (), 0, 81920),
            CardShares(1, 81920, 4096, (7, 8), 40960, 36864),
        ),
    )


def test_sinfo_shows_the_shareable_cards_their_shares_and_room() -> None:
    node = _shared_node()
    assert sinfo_gres(node) == "gpu:a100:2(S:2)"
    table = format_sinfo_gpus([node])
    assert table.splitlines()[0].split() == [
        "NODELIST", "PARTITION", "STATE", "GPUS", "ALLOC", "FREE", "BUSY", "GPU_TYPE",
        "SHARES", "REASON",
    ]  # fmt: skip
    assert "0: 0 jobs 0G, room 80G; 1: 2 jobs 40G, room 36G" in table
    plain = replace(node, shares=())
    assert "SHARES" not in format_sinfo_gpus([plain])
    assert sinfo_gres(plain) == "gpu:a100:2"
    shown = format_node_details(node)
    assert "   Shares=0: 0 jobs 0G, room 80G; 1: 2 jobs 40G, room 36G\n" in shown
    assert "Shares=" not in format_node_details(plain)


def test_squeue_and_scontrol_show_a_share_as_asked() -> None:
    spec = JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20480)
    job = Job(7, 1000, "u", spec, JobState.RUNNING, 0.0, node="gpu01", gpus=(1,))
    assert _tres_per_node(job) == "gres/gpumem:20G"
    shard = replace(job, spec=spec.replace(gpu_shards=2, gpu_type="a100"))
    assert _tres_per_node(shard) == "gres/shard:a100:2"
    shown = format_job_details(job, (), 0.0)
    assert " Gres=gpumem:20G " in shown and "   TresPerNode=gres/gpumem:20G\n" in shown


def test_metrics_have_per_card_share_gauges() -> None:
    text = _nodes_text([node_to_wire(_shared_node())], {})
    assert 'gbatch_gpu_share_jobs{gpu="1",node="gpu01"} 2.0' in text
    assert 'gbatch_gpu_share_room_mib{gpu="1",node="gpu01"} 36864.0' in text
    assert 'gbatch_gpu_share_budget_mib{gpu="0",node="gpu01"} 0.0' in text


def test_a_listings_brief_spec_keeps_the_share_for_squeue() -> None:
    spec = JobSpec(name="j", command=("x",), gpus=1, gpu_mem_mb=20480, gpu_shards=2)
    job = Job(7, 1000, "u", spec, JobState.PENDING, 0.0)
    brief = job_from_wire(job_to_wire(job, brief=True))
    assert (brief.spec.gpu_mem_mb, brief.spec.gpu_shards) == (20480, 2)


# -- fair share charges the share ---------------------------------------------------------


def test_fair_share_and_sreport_charge_a_share_its_part_of_the_card(daemon: Daemon) -> None:
    """20 GB of an 80 GB card for an hour is 0.25 GPU-hours."""
    _shared_fleet(daemon, {"big": Sharing(True)})
    spec = JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20 * 1024)
    shared = Job(
        1,
        0,
        "u",
        spec,
        JobState.COMPLETED,
        0.0,
        start_time=0.0,
        end_time=3600.0,
        node="big",
        gpus=(1,),
    )
    whole = replace(shared, id=2, spec=spec.replace(gpu_mem_mb=None, gpus=2), gpus=(0, 1))
    assert daemon.fleet.charged_gpus(shared) == 0.25
    assert daemon.fleet.charged_gpus(whole) == 2.0
    assert gpu_seconds(shared, 3600.0, daemon.fleet.charged_gpus(shared)) == 900.0
    (row,) = usage_by([shared], 0.0, 7200.0, 7200.0, lambda j: j.user, daemon.fleet.charged_gpus)
    assert row.gpu_seconds == 900.0
    gone = replace(shared, node="elsewhere")  # its card no longer known: a whole GPU
    assert daemon.fleet.charged_gpus(gone) == 1.0


def test_the_web_pages_gpu_table_shows_each_shareable_cards_shares_and_room() -> None:
    from gbatch.api.web import Web

    templates = Web(api=None).templates
    html = templates.get_template("nodes.html").render(
        csrf="", signed_in=True, nodes=[node_to_wire(_shared_node())], partitions=[]
    )
    table = html[html.index('<table id="gpus">') :]
    # The SHARES cell: the last but the GPU's chart of its last hour.
    cells = [row.split("<td>")[-2].split("</td>")[0] for row in table.split("<tr>")[2:]]
    assert cells == ["0, 0/81920", "2, 40960/36864"]
