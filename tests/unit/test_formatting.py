"""The CLI's output formats: squeue, sacct, sinfo and scontrol show job, text and JSON.

Timestamps are local time, so expected timestamps are built with format_timestamp;
everything else is compared with literal text.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace

import pytest

from gbatch.core.model import Event, Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.core.timefmt import format_timestamp
from gbatch.render.cells import FormatError
from gbatch.render.sacct import format_sacct, format_sacct_json
from gbatch.render.scontrol import format_job_details, format_job_details_json
from gbatch.render.sinfo import format_sinfo_gpus, format_sinfo_json
from gbatch.render.squeue import format_squeue, format_squeue_json

NOW = 1_800_000_000.0

TRAIN = JobSpec(
    name="train-resnet50",
    command=("python", "train.py", "--lr", "0.1"),
    gpus=2,
    time_limit=3600,
    retries=3,
    env=(("WANDB_API_KEY", "s3cret-value"), ("MODE", "fast-and-loose")),
    image="pytorch:24.01",
    workdir="/data/alice",
    mounts=("/data:/data:ro", "/scratch:/scratch"),
    shm_size="8g",
    priority=10,
    nice=3,
)


def running_job(**changes: object) -> Job:
    job = Job(
        id=5,
        uid=1000,
        user="alice",
        spec=TRAIN,
        state=JobState.RUNNING,
        submit_time=NOW - 100,
        start_time=NOW - 65,
        node="local",
        gpus=(0, 1),
        attempt=1,
    )
    return replace(job, **changes)  # type: ignore[arg-type]


def pending_job(**changes: object) -> Job:
    job = Job(
        id=6,
        uid=1001,
        user="bob",
        spec=JobSpec(name="sweep", command=("/bin/sh", "-c", "echo hi")),
        state=JobState.PENDING,
        submit_time=NOW - 10,
        reason="Resources",
    )
    return replace(job, **changes)  # type: ignore[arg-type]


def finished_job(**changes: object) -> Job:
    job = Job(
        id=7,
        uid=1000,
        user="alice",
        spec=TRAIN,
        state=JobState.COMPLETED,
        submit_time=NOW - 5000,
        start_time=NOW - 4000,
        end_time=NOW - 4000 + 3723,
        node="gpu01",
        gpus=(3,),
        attempt=1,
        exit_code=0,
    )
    return replace(job, **changes)  # type: ignore[arg-type]


def gpu(index: int, *, simulated: bool = False, foreign: int = 0) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index:04d}",
        name="NVIDIA H100 80GB HBM3",
        memory_total_mib=81559,
        memory_used_mib=512,
        utilization_pct=37,
        foreign_processes=foreign,
        simulated=simulated,
    )


# --- squeue -------------------------------------------------------------------


def test_squeue_default_output_matches_slurms_default_format() -> None:
    out = format_squeue([running_job(), pending_job()], NOW)
    assert out == (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "                 5       gpu train-re    alice  R       1:05      1 local\n"
        "                 6       gpu    sweep      bob PD       0:00      1 (Resources)\n"
    )


def test_squeue_without_header_prints_only_job_lines() -> None:
    out = format_squeue([running_job()], NOW, header=False)
    assert out.splitlines() == [
        "                 5       gpu train-re    alice  R       1:05      1 local"
    ]


def test_squeue_with_no_jobs_prints_header_only_or_nothing() -> None:
    assert format_squeue([], NOW).count("\n") == 1
    assert format_squeue([], NOW, header=False) == ""


@pytest.mark.parametrize(
    ("reason", "held", "shown"),
    [
        ("Resources", False, "(Resources)"),
        ("Priority", False, "(Priority)"),
        ("", False, "(None)"),
        ("Priority", True, "(JobHeldUser)"),
        ("JobHeldAdmin", True, "(JobHeldAdmin)"),
    ],
)
def test_squeue_pending_job_shows_reason_in_parentheses(
    reason: str, held: bool, shown: str
) -> None:
    out = format_squeue([pending_job(reason=reason, held=held)], NOW, fmt="%R", header=False)
    assert out == shown + "\n"


def test_squeue_allocated_jobs_show_node_name() -> None:
    jobs = [
        running_job(),
        running_job(state=JobState.CONFIGURING),
        running_job(state=JobState.COMPLETING),
    ]
    out = format_squeue(jobs, NOW, fmt="%R", header=False)
    assert out == "local\nlocal\nlocal\n"


def test_squeue_timed_out_and_failed_jobs_show_reason_like_slurm() -> None:
    jobs = [
        finished_job(state=JobState.TIMEOUT, reason="TimeLimit"),
        finished_job(state=JobState.FAILED, reason="NonZeroExitCode"),
        finished_job(state=JobState.COMPLETED),
    ]
    out = format_squeue(jobs, NOW, fmt="%R", header=False)
    assert out == "(TimeLimit)\n(NonZeroExitCode)\ngpu01\n"


def test_squeue_time_counts_from_start_and_is_zero_while_pending() -> None:
    jobs = [
        running_job(start_time=NOW - 5),
        running_job(start_time=NOW - 307),
        running_job(start_time=NOW - 3723),
        running_job(start_time=NOW - 93784),
        pending_job(),
        pending_job(start_time=NOW - 500),  # requeued: an old run's start is not its time
        finished_job(),  # ended: start..end, not start..now
    ]
    out = format_squeue(jobs, NOW, fmt="%M", header=False)
    assert out.splitlines() == ["0:05", "5:07", "1:02:03", "1-02:03:04", "0:00", "0:00", "1:02:03"]


def test_squeue_every_letter_prints_its_field() -> None:
    job = running_job()
    fmt = "%i|%P|%j|%u|%t|%T|%M|%l|%D|%R|%N|%b|%V|%S|%Q|%r"
    header, line = format_squeue([job], NOW, fmt=fmt).splitlines()
    assert header == (
        "JOBID|PARTITION|NAME|USER|ST|STATE|TIME|TIME_LIMIT|NODES|NODELIST(REASON)|NODELIST"
        "|TRES_PER_NODE|SUBMIT_TIME|START_TIME|PRIORITY|REASON"
    )
    assert line.split("|") == [
        "5",
        "gpu",
        "train-resnet50",
        "alice",
        "R",
        "RUNNING",
        "1:05",
        "1:00:00",
        "1",
        "local",
        "local",
        "gres/gpu:2",  # Slurm 23.02's spelling (22.05: gres:gpu:2)
        format_timestamp(NOW - 100),
        format_timestamp(NOW - 65),
        "7",  # priority 10 less nice 3
        "None",
    ]


def test_squeue_letters_for_a_pending_job_without_gpus_or_limit() -> None:
    fmt = "%l|%N|%b|%S|%r|%t"
    out = format_squeue([pending_job()], NOW, fmt=fmt, header=False)
    assert out == "UNLIMITED||N/A|N/A|Resources|PD\n"


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("%10j|", "train-resn|"),  # cut to the width
        ("%.10j|", "train-resn|"),  # right-justified values are cut from the end too
        ("%20j|", "train-resnet50      |"),
        ("%.20j|", "      train-resnet50|"),
        ("%.3i|", "  5|"),
        ("%3i|", "5  |"),
        ("%j|", "train-resnet50|"),
        ("%.j|", "train-resnet50|"),  # no width: printed whole
    ],
)
def test_squeue_width_pads_truncates_and_dot_right_justifies(fmt: str, expected: str) -> None:
    assert format_squeue([running_job()], NOW, fmt=fmt, header=False) == expected + "\n"


def test_squeue_header_follows_the_same_width_rules() -> None:
    out = format_squeue([], NOW, fmt="%.3R|%12i|%.8T")
    assert out == "NOD|JOBID       |   STATE\n"


def test_squeue_keeps_literal_text_and_percent_escape() -> None:
    out = format_squeue([running_job()], NOW, fmt="job=%i on [%N] 100%% ", header=False)
    assert out == "job=5 on [local] 100% \n"


def test_squeue_unknown_letter_raises_format_error_listing_supported_ones() -> None:
    with pytest.raises(FormatError) as info:
        format_squeue([running_job()], NOW, fmt="%i %z")
    message = str(info.value)
    assert "%z" in message
    for letter in "iPjutTMlDRNbVSQr":
        assert f"%{letter}" in message
    assert isinstance(info.value, ValueError)


def test_squeue_trailing_percent_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="no field letter"):
        format_squeue([], NOW, fmt="%i %")


def test_squeue_control_characters_in_names_are_neutralised() -> None:
    job = running_job(spec=replace(TRAIN, name="evil\x1b[2Jname"))
    out = format_squeue([job], NOW, fmt="%j", header=False)
    assert out == "evil?[2Jname\n"


def test_squeue_json_lists_jobs_with_machine_readable_fields() -> None:
    data = json.loads(format_squeue_json([running_job(), pending_job()], NOW))
    running, pending = data["jobs"]
    assert running == {
        "job_id": 5,
        "array_job_id": None,
        "array_task_id": None,
        "name": "train-resnet50",
        "user": "alice",
        "uid": 1000,
        "state": "RUNNING",
        "state_code": "R",
        "reason": "None",
        "partition": "gpu",
        "node": "local",
        "nodes": "local",
        "num_nodes": 1,
        "placements": [{"node": "local", "gpus": [0, 1]}],
        "gpus": [0, 1],
        "gpu_uuids": [],
        "gpus_requested": 2,
        "gpu_type": None,
        "constraint": None,
        "time_limit": 3600,
        "submit_time": NOW - 100,
        "start_time": NOW - 65,
        "end_time": None,
        "elapsed": 65,
        "attempt": 1,
        "exit_code": None,
        "exit_signal": None,
        "priority": 7,
    }
    assert pending["state_code"] == "PD"
    assert pending["reason"] == "Resources"
    assert pending["node"] is None
    assert pending["time_limit"] is None
    assert pending["elapsed"] == 0


def test_json_outputs_never_contain_env_values() -> None:
    outputs = [
        format_squeue_json([running_job()], NOW),
        format_sacct_json([running_job()], NOW),
        format_job_details_json(running_job(), [], NOW),
    ]
    for out in outputs:
        assert "s3cret-value" not in out
        assert "fast-and-loose" not in out


# --- sacct --------------------------------------------------------------------


def test_sacct_default_fields_fixed_width_with_dashed_line() -> None:
    jobs = [running_job(), pending_job(), finished_job()]
    out = format_sacct(jobs, NOW)
    assert out == textwrap.dedent(
        """\
        JobID           JobName      User      State ExitCode    Elapsed AllocGPUS        NodeList
        ------------ ---------- --------- ---------- -------- ---------- --------- ---------------
        5            train-res+     alice    RUNNING      0:0   00:01:05         2           local
        6                 sweep       bob    PENDING      0:0   00:00:00         0   None assigned
        7            train-res+     alice  COMPLETED      0:0   01:02:03         1           gpu01
        """
    )


def test_sacct_without_header_has_no_dashed_line() -> None:
    out = format_sacct([finished_job()], NOW, header=False)
    assert out.splitlines() == [
        "7            train-res+     alice  COMPLETED      0:0   01:02:03         1           gpu01"
    ]


@pytest.mark.parametrize(
    ("code", "signal", "shown"),
    [
        (None, None, "0:0"),
        (0, None, "0:0"),
        (1, None, "1:0"),
        (0, 9, "0:9"),
        (2, 15, "2:15"),
    ],
)
def test_sacct_exit_code_is_code_colon_signal(
    code: int | None, signal: int | None, shown: str
) -> None:
    job = finished_job(exit_code=code, exit_signal=signal)
    out = format_sacct([job], NOW, fields=["ExitCode"], parsable=True, header=False)
    assert out == shown + "\n"


def test_sacct_parsable_is_pipe_separated_without_padding_or_dashes() -> None:
    out = format_sacct([finished_job(), pending_job()], NOW, parsable=True)
    assert out == (
        "JobID|JobName|User|State|ExitCode|Elapsed|AllocGPUS|NodeList\n"
        "7|train-resnet50|alice|COMPLETED|0:0|01:02:03|1|gpu01\n"
        "6|sweep|bob|PENDING|0:0|00:00:00|0|None assigned\n"
    )


def test_sacct_parsable_without_header() -> None:
    out = format_sacct([pending_job()], NOW, parsable=True, header=False, fields=["JobID"])
    assert out == "6\n"


def test_sacct_every_extra_field() -> None:
    fields = ["Start", "End", "Submit", "Timelimit", "Reason", "Attempt", "Partition", "UID"]
    job = finished_job(attempt=2, reason="NonZeroExitCode")
    out = format_sacct([job], NOW, fields=fields, parsable=True)
    header, line = out.splitlines()
    assert header == "|".join(fields)
    assert line.split("|") == [
        format_timestamp(NOW - 4000),
        format_timestamp(NOW - 4000 + 3723),
        format_timestamp(NOW - 5000),
        "01:00:00",
        "NonZeroExitCode",
        "2",
        "gpu",
        "1000",
    ]


def test_sacct_unknown_times_and_unlimited_limit() -> None:
    fields = ["Start", "End", "Timelimit", "Reason", "Elapsed"]
    pending = format_sacct([pending_job()], NOW, fields=fields, parsable=True, header=False)
    assert pending == "Unknown|Unknown|UNLIMITED|Resources|00:00:00\n"
    running = format_sacct([running_job()], NOW, fields=["End"], parsable=True, header=False)
    assert running == "Unknown\n"


def test_sacct_elapsed_of_running_job_counts_to_now_and_shows_days() -> None:
    job = running_job(start_time=NOW - 93784)
    out = format_sacct([job], NOW, fields=["Elapsed"], parsable=True, header=False)
    assert out == "1-02:03:04\n"


def test_sacct_fields_are_case_insensitive_and_take_a_width() -> None:
    out = format_sacct([finished_job()], NOW, fields=["jobid", "JOBNAME%20", "state%-12"])
    assert out.splitlines() == [
        "JobID                     JobName State",
        "------------ -------------------- ------------",
        "7                  train-resnet50 COMPLETED",
    ]


def test_sacct_unknown_field_raises_format_error_listing_valid_ones() -> None:
    with pytest.raises(FormatError) as info:
        format_sacct([], NOW, fields=["JobID", "MaxRSS"])
    message = str(info.value)
    assert "MaxRSS" in message
    for name in ("JobID", "AllocGPUS", "Timelimit", "Attempt", "UID"):
        assert name in message


def test_sacct_json_matches_squeue_json_shape() -> None:
    jobs = [finished_job(exit_code=0, exit_signal=9)]
    data = json.loads(format_sacct_json(jobs, NOW))
    assert data == json.loads(format_squeue_json(jobs, NOW))
    (job,) = data["jobs"]
    assert job["elapsed"] == 3723
    assert job["exit_signal"] == 9


# --- sinfo --------------------------------------------------------------------


def nodes() -> list[NodeInfo]:
    return [
        NodeInfo(
            name="local",
            state=NodeState.MIXED,
            gpus=(gpu(0), gpu(1), gpu(2, foreign=2), gpu(3)),
            allocations={0: 5, 1: 5},
        ),
        NodeInfo(
            name="sim01",
            state=NodeState.DRAINED,
            reason="GPU 1 memory not released",
            gpus=(gpu(0, simulated=True), gpu(1, simulated=True)),
        ),
        NodeInfo(name="gpu02", state=NodeState.IDLE, reason="stale", gpus=(gpu(0),)),
    ]


def test_sinfo_gpus_prints_one_line_per_node_with_counts() -> None:
    assert format_sinfo_gpus(nodes()) == (
        "NODELIST PARTITION STATE   GPUS ALLOC FREE BUSY GPU_TYPE                          REASON\n"
        "local    gpu       mixed      4     2    1    1 NVIDIA H100 80GB HBM3\n"
        "sim01    gpu       drained    2     0    2    0 NVIDIA H100 80GB HBM3 (simulated) "
        "GPU 1 memory not released\n"
        "gpu02    gpu       idle       1     0    1    0 NVIDIA H100 80GB HBM3\n"
    )


def test_sinfo_gpus_busy_counts_only_unallocated_gpus_with_foreign_processes() -> None:
    node = NodeInfo(
        name="n1",
        state=NodeState.ALLOCATED,
        # GPU 0 is ours and has a foreign process too: it counts as allocated, not busy.
        gpus=(gpu(0, foreign=1), gpu(1, foreign=1), gpu(2, foreign=3)),
        allocations={0: 9},
    )
    line = format_sinfo_gpus([node], header=False)
    assert line.split()[3:7] == ["3", "1", "0", "2"]


def test_sinfo_gpus_reason_only_for_drained_or_down_nodes() -> None:
    out = format_sinfo_gpus(
        [
            NodeInfo(name="a", state=NodeState.DOWN, reason="unreachable"),
            NodeInfo(name="b", state=NodeState.IDLE, reason="left over"),
        ],
        header=False,
    )
    first, second = out.splitlines()
    assert first.endswith("unreachable")
    assert "left over" not in second
    assert "N/A" in second  # no GPUs reported: no type


def test_sinfo_gpus_without_header_or_nodes() -> None:
    assert format_sinfo_gpus([], header=False) == ""
    assert format_sinfo_gpus([]).startswith("NODELIST PARTITION STATE")


def test_sinfo_json_has_per_gpu_detail_and_holding_job() -> None:
    data = json.loads(format_sinfo_json(nodes()))
    local, sim, _ = data["nodes"]
    assert local["state"] == "mixed"
    assert (local["gpus_total"], local["gpus_allocated"], local["gpus_free"]) == (4, 2, 1)
    assert local["gpus_busy_outside"] == 1
    assert local["simulated"] is False
    assert local["gpus"][0] == {
        "index": 0,
        "uuid": "GPU-0000",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_used_mib": 512,
        "memory_total_mib": 81559,
        "utilization_pct": 37,
        "foreign_processes": 0,
        "simulated": False,
        "type": None,  # built with no type here; a report's GPUs get theirs (gputypes)
        "job_id": 5,
        "free": False,
    }
    assert local["gpus"][2]["job_id"] is None
    assert local["gpus"][2]["foreign_processes"] == 2
    assert local["gpus"][2]["free"] is False
    assert [g["free"] for g in local["gpus"]].count(True) == local["gpus_free"]
    assert sim["simulated"] is True
    assert sim["reason"] == "GPU 1 memory not released"


# --- scontrol show job ----------------------------------------------------------


EVENTS = [
    Event(5, NOW - 100, JobState.PENDING, "submitted"),
    Event(5, NOW - 64, JobState.RUNNING, "started"),
    Event(5, NOW - 65, JobState.CONFIGURING, ""),  # out of order: printed by time
]


def test_job_details_prints_scontrol_style_record_and_events() -> None:
    out = format_job_details(running_job(), EVENTS, NOW)
    submit, start = format_timestamp(NOW - 100), format_timestamp(NOW - 65)
    assert out == (
        "JobId=5 JobName=train-resnet50\n"
        "   UserId=alice(1000)\n"
        "   Priority=7 Nice=3 QOS=normal\n"
        "   JobState=RUNNING Reason=None ExitCode=0:0\n"
        "   RunTime=00:01:05 TimeLimit=01:00:00\n"
        f"   SubmitTime={submit}\n"
        f"   StartTime={start} EndTime={format_timestamp(NOW - 65 + 3600)}\n"
        "   Partition=gpu\n"
        "   NodeList=local Gres=gpu:2 GPUs=0,1 Attempt=1 Retries=3 Requeue=1\n"
        "   BatchHost=local\n"
        "   NumNodes=1 NumTasks=1\n"
        "   NumCPUs=1 MinMemoryNode=0\n"
        "   ReqTRES=billing=1,cpu=1,gres/gpu=2,node=1\n"
        "   AllocTRES=billing=1,cpu=1,gres/gpu=2,node=1\n"
        "   TresPerNode=gres/gpu:2\n"
        "   Command=python train.py --lr 0.1\n"
        "   Image=pytorch:24.01 WorkDir=/data/alice Mounts=/data:/data:ro,/scratch:/scratch"
        " ShmSize=8g\n"
        "   Environment=WANDB_API_KEY,MODE\n"
        "   StdErr=(null)\n"
        "   StdIn=/dev/null\n"
        "   StdOut=(null)\n"
        "Events:\n"
        f"   {submit}  PENDING      submitted\n"
        f"   {start}  CONFIGURING\n"
        f"   {format_timestamp(NOW - 64)}  RUNNING      started\n"
    )


def test_job_details_never_show_env_values() -> None:
    for out in (
        format_job_details(running_job(), EVENTS, NOW),
        format_job_details_json(running_job(), EVENTS, NOW),
    ):
        assert "WANDB_API_KEY" in out
        assert "s3cret-value" not in out
        assert "fast-and-loose" not in out


def test_job_details_of_pending_job_show_unknown_and_null_values() -> None:
    out = format_job_details(pending_job(), [], NOW)
    assert "   JobState=PENDING Reason=Resources ExitCode=0:0\n" in out
    assert "   RunTime=00:00:00 TimeLimit=UNLIMITED\n" in out
    assert "\n   StartTime=Unknown EndTime=Unknown\n" in out
    assert "   NodeList=(null) Gres=(null) GPUs=(null) Attempt=0 Retries=0 Requeue=1\n" in out
    assert "   Image=(null) WorkDir=(null) Mounts=(null) ShmSize=(null)\n" in out
    assert "   Environment=(null)\n" in out
    assert out.endswith("Events:\n")


def test_job_details_exit_code_carries_the_signal() -> None:
    job = finished_job(state=JobState.CANCELLED, exit_code=0, exit_signal=15)
    out = format_job_details(job, [], NOW)
    assert "   JobState=CANCELLED Reason=None ExitCode=0:15\n" in out
    assert f" EndTime={format_timestamp(NOW - 4000 + 3723)}\n" in out
    assert "   RunTime=01:02:03 " in out


def test_job_details_command_is_shell_quoted_on_one_line() -> None:
    spec = JobSpec(name="s", command=("/bin/sh", "-c", "echo 'a b'\nexit 3"))
    out = format_job_details(pending_job(spec=spec), [], NOW)
    assert "   Command=/bin/sh -c $'echo \\'a b\\'\\nexit 3'\n" in out
    spec = JobSpec(name="s", command=("python", "run.py", "--name", "my run"))
    out = format_job_details(pending_job(spec=spec), [], NOW)
    assert "   Command=python run.py --name 'my run'\n" in out


def test_job_details_json_includes_spec_and_events() -> None:
    data = json.loads(format_job_details_json(running_job(), EVENTS, NOW))
    assert data["job_id"] == 5
    assert data["command"] == ["python", "train.py", "--lr", "0.1"]
    assert data["env_names"] == ["WANDB_API_KEY", "MODE"]
    assert data["mounts"] == ["/data:/data:ro", "/scratch:/scratch"]
    assert data["retries"] == 3
    assert [e["state"] for e in data["events"]] == ["PENDING", "CONFIGURING", "RUNNING"]
    assert data["events"][0] == {"time": NOW - 100, "state": "PENDING", "reason": "submitted"}


def test_absurd_widths_are_refused_rather_than_padded() -> None:
    with pytest.raises(FormatError, match="too large"):
        format_squeue([running_job()], NOW, fmt="%99999999i")
    with pytest.raises(FormatError, match="too large"):
        format_sacct([running_job()], NOW, fields=["JobName%99999999"])


def test_node_list_shows_where_each_node_is_and_why_it_is_out() -> None:
    from gbatch.core.model import NodeInfo, NodeState
    from gbatch.render.sinfo import format_node_list

    nodes = [
        NodeInfo("gpu01", NodeState.IDLE, address="gbatch@10.0.0.11:22"),
        NodeInfo(
            "gpu02", NodeState.DOWN, reason="host key unknown", address="gbatch@10.0.0.12:2222"
        ),
    ]
    assert format_node_list(nodes).splitlines() == [
        "NODE  ADDRESS               STATE GPUS REASON",
        "gpu01 gbatch@10.0.0.11:22   idle     0",
        "gpu02 gbatch@10.0.0.12:2222 down     0 host key unknown",
    ]


def _varied_queue() -> list[Job]:
    """Jobs whose memoized squeue cells (same spec, user, state, reason...) repeat, with
    the cases that must not share a cell: held, requeued, array tasks and folded tails."""
    array_spec = replace(TRAIN, array_task=0, array_pos=0, array_throttle=2)
    jobs = [running_job(), running_job(id=8, start_time=NOW - 7200, node="gpu02")]
    jobs += [pending_job(id=10 + i, reason=("Resources", "Priority", "")[i % 3]) for i in range(6)]
    jobs += [pending_job(id=20, held=True), pending_job(id=21, held=True, reason="JobHeldAdmin")]
    jobs.append(pending_job(id=22, start_time=NOW - 50, end_time=NOW - 20))  # requeued
    jobs.append(pending_job(id=23, user="carol", uid=1002, spec=replace(TRAIN, partition="big")))
    jobs += [
        pending_job(id=30 + pos, spec=replace(array_spec, array_task=4 + pos, array_pos=pos))
        for pos in range(3)
    ]
    jobs.append(pending_job(id=40, spec=replace(array_spec, array_task=0), array_more=((2, 9),)))
    jobs.append(running_job(id=33, spec=replace(array_spec, array_task=7, array_pos=3)))
    jobs += [finished_job(), finished_job(id=50, state=JobState.TIMEOUT, reason="TimeLimit")]
    jobs.append(pending_job(id=51, spec=replace(TRAIN, name="tab\tname", comment="c")))
    return jobs


@pytest.mark.parametrize(
    "fmt",
    [
        None,
        "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R",
        "%i %A %F %K %P %j %u %U %t %T %M %l %L %D %C %m %R %N %b %V %S %e %Q %p %r %k %E %o %Z %Y",
        "%.3i|%5K|%.2P|%4j|%.3u%%%1t%.4M%R%.2r",
    ],
)
@pytest.mark.parametrize("expand", [False, True], ids=["folded", "expanded"])
def test_squeue_memoized_rows_equal_one_line_drawn_per_job(fmt: str | None, expand: bool) -> None:
    from gbatch.core.arrays import expand_tasks
    from gbatch.core.constants import SQUEUE_DEFAULT_FORMAT
    from gbatch.core.jobids import collapse_pending
    from gbatch.render.squeue import SqueueView, _parse_squeue_format, _squeue_line

    jobs = _varied_queue()
    starts = {11: NOW + 600.0, 45: NOW + 900.0}  # 45: a task record 40 stands for
    parts = _parse_squeue_format(SQUEUE_DEFAULT_FORMAT if fmt is None else fmt)
    view = SqueueView(NOW, starts)
    rows = (
        [(task, None) for job in jobs for task in expand_tasks(job)]
        if expand
        else collapse_pending(jobs)
    )
    expected = [_squeue_line(parts, None, view)]
    expected += [_squeue_line(parts, job, view, label) for job, label in rows]

    out = format_squeue(jobs, NOW, fmt=fmt, starts=starts, expand_arrays=expand)

    assert out == "".join(line + "\n" for line in expected)


@pytest.mark.parametrize(
    "fmt",
    [
        None,
        "%i %A %F %K %P %j %u %U %t %T %M %l %L %D %C %m %R %N %b %V %Q %p %r %k %E %o %Z %Y",
        "%.3i|%5K|%.2P|%4j|%.3u%%%1t%.4M%R%.2r",
    ],
)
@pytest.mark.parametrize("expand", [False, True], ids=["folded", "expanded"])
@pytest.mark.parametrize("sort", ["P,t,-p", "-t,i", "u,-V,M", "j,l,L,-N,U,T,Q,D,B,C,m"])
def test_squeue_from_columns_prints_what_it_printed_from_the_table(
    fmt: str | None, expand: bool, sort: str
) -> None:
    # squeue asks for listing_columns now; its rows must print byte for byte as the job
    # table's did: held, requeued, array tasks, a folded tail with a throttle, a name
    # with a control character, every letter a columns reply serves, -r and sorts.
    import json

    from gbatch.protocol.listings import (
        jobs_from_columns,
        jobs_from_table,
        jobs_to_columns,
        jobs_to_table,
    )
    from gbatch.render.squeue import parse_squeue_sort, sort_squeue

    def printed(jobs: list[Job]) -> str:
        ordered = sort_squeue(jobs, parse_squeue_sort(sort), NOW)
        return format_squeue(ordered, NOW, fmt=fmt, expand_arrays=expand)

    queue = _varied_queue()
    from_table = jobs_from_table(json.loads(json.dumps(jobs_to_table(queue))))
    from_columns = jobs_from_columns(json.loads(json.dumps(jobs_to_columns(queue))))

    assert printed(from_columns) == printed(from_table)
