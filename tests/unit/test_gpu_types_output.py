"""GPU types and features as every output shows them, in Slurm's spellings (issue 30):
sinfo's GRES (%G) and features (%f, %b), scontrol show node's Gres/GresUsed and
AvailableFeatures, scontrol show job's Gres/TresPerNode/Features, squeue's %b and %f,
sacct's AllocTRES; and the model's type in sinfo --gpus, the TUI and the web page."""

from __future__ import annotations

from dataclasses import replace

from gbatch.core.gputypes import gpu_type
from gbatch.core.model import Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.protocol.codec import node_from_wire, node_to_wire
from gbatch.render.sacct import format_sacct
from gbatch.render.scontrol import format_job_details, format_node_details
from gbatch.render.sinfo import format_sinfo, format_sinfo_gpus, sinfo_rows
from gbatch.render.squeue import format_squeue
from gbatch.tui.rows import node_rows

NOW = 1_700_000_000.0
A100 = "NVIDIA A100-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"


def _gpu(index: int, name: str) -> Gpu:
    return Gpu(index, f"GPU-{index}", name, 81920, 0, type=gpu_type(name))


WORKSTATION = NodeInfo(
    "ws",
    NodeState.MIXED,
    gpus=(_gpu(0, A100), _gpu(1, A100), _gpu(2, RTX4090)),
    allocations={1: 7},
    partitions=("gpu",),
    features=("nvlink", "ib"),
)
PLAIN = NodeInfo("plain", NodeState.IDLE, gpus=(_gpu(0, "Simulated GPU"),), partitions=("gpu",))


def _job(state: JobState = JobState.RUNNING, **spec: object) -> Job:
    base = JobSpec(name="t", command=("true",), gpus=2, gpu_type="a100", partition="gpu")
    return Job(
        7,
        1000,
        "alice",
        replace(base, **spec),  # type: ignore[arg-type]
        state,
        NOW - 100,
        start_time=None if state is JobState.PENDING else NOW - 60,
        node=None if state is JobState.PENDING else "ws",
        gpus=() if state is JobState.PENDING else (0, 1),
        attempt=0 if state is JobState.PENDING else 1,
    )


def test_sinfo_gres_and_features_read_as_slurms() -> None:
    rows = sinfo_rows([WORKSTATION, PLAIN])
    out = format_sinfo(rows, fmt="%N|%G|%f|%b", node_oriented=True)
    assert out.splitlines() == [
        "NODELIST|GRES|AVAIL_FEATURES|ACTIVE_FEATURES",
        "ws|gpu:a100:2,gpu:rtx4090:1|nvlink,ib,a100,rtx4090|nvlink,ib,a100,rtx4090",
        "plain|gpu:1|(null)|(null)",
    ]


def test_scontrol_show_node_has_gres_by_type_and_its_features() -> None:
    lines = format_node_details(WORKSTATION).splitlines()
    assert "   AvailableFeatures=nvlink,ib,a100,rtx4090" in lines
    assert "   ActiveFeatures=nvlink,ib,a100,rtx4090" in lines
    assert "   Gres=gpu:a100:2,gpu:rtx4090:1 GresUsed=gpu:a100:1,gpu:rtx4090:0" in lines
    assert "   Gres=gpu:1 GresUsed=gpu:0" in format_node_details(PLAIN).splitlines()


def test_a_typed_jobs_gres_tres_and_features_in_squeue_scontrol_and_sacct() -> None:
    job = _job(constraint="nvlink&ib")
    assert format_squeue([job], NOW, fmt="%b|%f", header=False) == "gres/gpu:a100:2|nvlink&ib\n"
    plain = _job(gpu_type=None)
    assert format_squeue([plain], NOW, fmt="%b|%f", header=False) == "gres/gpu:2|(null)\n"
    details = format_job_details(job, (), NOW).splitlines()
    assert "   NodeList=ws Gres=gpu:a100:2 GPUs=0,1 Attempt=1 Retries=0 Requeue=1" in details
    assert "   Features=nvlink&ib" in details
    assert "   TresPerNode=gres/gpu:a100:2" in details
    assert not any(
        line.startswith("   Features=") for line in format_job_details(plain, (), NOW).splitlines()
    )
    sacct = format_sacct([job], NOW, fields=["AllocTRES"], header=False, parsable=True)
    assert sacct == "billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,node=1\n"
    assert "gres/gpu:" not in format_sacct([plain], NOW, fields=["AllocTRES"], parsable=True)


def test_sinfo_gpus_tui_and_web_show_each_gpus_type() -> None:
    table = format_sinfo_gpus([WORKSTATION], header=False)
    assert f"2x {A100}, 1x {RTX4090}" in table
    rows = node_rows([WORKSTATION], {7: "alice"})
    assert [r.cells[0] for r in rows[1:]] == [
        "  gpu0 a100: A100-SXM4-80GB",
        "  gpu1 a100: A100-SXM4-80GB",
        "  gpu2 rtx4090: GeForce RTX 4090",
    ]
    wire = node_to_wire(WORKSTATION)
    assert node_from_wire(wire) == WORKSTATION  # types and features travel
    from gbatch.api.web import Web

    html = (
        Web(api=None)
        .templates.get_template("nodes.html")
        .render(csrf="", signed_in=True, nodes=[wire], partitions=[])
    )
    assert "<td>nvlink,ib,a100,rtx4090</td>" in html
    gpus = html[html.index('<table id="gpus">') :].split("<tr>")[2:]
    assert [row.split("<td>")[4].split("</td>")[0] for row in gpus] == ["a100", "a100", "rtx4090"]


def test_listings_carry_a_jobs_gpu_type_and_constraint_only_when_it_has_them() -> None:
    """squeue reads listings' brief specs: without these, %b and %f read as untyped."""
    from gbatch.protocol.codec import job_to_wire
    from gbatch.protocol.listings import jobs_from_columns, jobs_to_columns

    typed = _job(JobState.PENDING, constraint="ib")
    (back,) = jobs_from_columns(jobs_to_columns([typed]))
    assert (back.spec.gpu_type, back.spec.constraint) == ("a100", "ib")
    plain = job_to_wire(_job(JobState.PENDING, gpu_type=None), brief=True)["spec"]
    assert "gpu_type" not in plain and "constraint" not in plain


def test_the_tuis_queue_shows_a_typed_jobs_gpus_as_type_and_count() -> None:
    from gbatch.tui.rows import job_cells

    plain = replace(_job(JobState.PENDING, gpu_type=None), id=8)
    cells = job_cells([_job(JobState.PENDING), plain], NOW)
    assert (cells[7][4], cells[8][4]) == ("a100:2", "2")
