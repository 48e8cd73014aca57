"""Model objects survive the trip through the socket's JSON unchanged."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any

import pytest

from gbatch.core.model import Event, Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.protocol.wire import (
    BriefRecords,
    Later,
    Streamed,
    encode_reply,
    event_from_wire,
    event_to_wire,
    job_from_wire,
    job_to_wire,
    jobs_from_table,
    jobs_to_columns,
    jobs_to_table,
    materialised,
    node_from_wire,
    node_to_wire,
    table_labels,
)
from gbatch.tui.data import JobDecoder

T0 = 1_767_225_600.125


def through_json(data: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(json.dumps(data))
    return decoded


def full_spec() -> JobSpec:
    return JobSpec(
        name="sweep-lr",
        command=("/bin/sh", "-c", "python train.py --lr 3e-4 && echo 'done ✓'"),
        image="nvcr.io/nvidia/pytorch:24.01-py3",
        gpus=2,
        time_limit=7200,
        retries=3,
        env=(("CUDA_LAUNCH_BLOCKING", "1"), ("WANDB_MODE", "offline")),
        mounts=("/data:/data:ro", "/scratch:/scratch"),
        workdir="/workspace",
        priority=5,
        nice=2,
        shm_size="16g",
    )


def full_job() -> Job:
    return Job(
        id=4711,
        uid=1000,
        user="alice",
        spec=full_spec(),
        state=JobState.COMPLETING,
        submit_time=T0,
        reason="cancelled by alice",
        held=True,
        start_time=T0 + 10.5,
        end_time=T0 + 99.25,
        node="gpu01",
        gpus=(3, 1),
        attempt=2,
        exit_code=137,
        exit_signal=9,
        stop_state=JobState.CANCELLED,
    )


def test_job_with_every_field_set_round_trips() -> None:
    job = full_job()
    assert job_from_wire(through_json(job_to_wire(job))) == job


def test_job_with_only_required_fields_round_trips() -> None:
    job = Job(
        id=1,
        uid=0,
        user="root",
        spec=JobSpec(name="x", command=("true",)),
        state=JobState.PENDING,
        submit_time=T0,
    )
    assert job_from_wire(through_json(job_to_wire(job))) == job


def test_job_with_zero_values_keeps_them_distinct_from_none() -> None:
    job = Job(
        id=2,
        uid=0,
        user="root",
        spec=JobSpec(name="x", command=("true",), time_limit=0),
        state=JobState.COMPLETED,
        submit_time=0.0,
        start_time=0.0,
        end_time=0.0,
        gpus=(0,),
        exit_code=0,
        exit_signal=0,
    )

    back = job_from_wire(through_json(job_to_wire(job)))

    assert back == job
    assert (back.start_time, back.exit_code, back.exit_signal) == (0.0, 0, 0)
    assert back.spec.time_limit == 0


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_job_in_every_state_round_trips(state: JobState) -> None:
    job = Job(
        id=3,
        uid=1000,
        user="alice",
        spec=full_spec(),
        state=state,
        submit_time=T0,
        stop_state=state if state.is_final else None,
    )
    assert job_from_wire(through_json(job_to_wire(job))) == job


def brief(job: Job) -> Job:
    """What a brief listing keeps of a job: its spec's listed fields, no command."""
    return job_from_wire(job_to_wire(job, brief=True))


def test_a_job_table_decodes_to_the_brief_jobs_and_shares_alike_specs() -> None:
    array = [
        replace(full_job(), id=10 + i, spec=replace(full_spec(), env=((f"T{i}", ""),)))
        for i in range(3)
    ]
    jobs = [
        full_job(),
        *array,
        replace(full_job(), id=1, spec=JobSpec(name="x", command=("true",))),
    ]
    table = through_json(jobs_to_table(jobs))

    # The array's tasks differ only outside the brief fields: one spec entry for them.
    assert len(table["specs"]) == 2
    assert jobs_from_table(table) == [brief(job) for job in jobs]


def listed(job: Job) -> Job:
    """What the queue's narrow listing (ListJobs `columns`) keeps of a job: the brief
    one, less the fields no listing column shows."""
    return replace(
        brief(job),
        gpus=(),
        gpu_uuids=(),
        attempt=0,
        exit_code=None,
        exit_signal=None,
        stop_state=None,
    )


def test_the_tuis_decoder_reads_a_listing_into_the_listed_jobs_sharing_alike_specs() -> None:
    array = [
        replace(full_job(), id=10 + i, spec=replace(full_spec(), env=((f"T{i}", ""),)))
        for i in range(3)
    ]
    jobs = [*array, replace(full_job(), id=1, spec=JobSpec(name="x", command=("true",)))]

    decoded, labels = JobDecoder().decode(through_json(jobs_to_columns(jobs)))

    assert decoded == tuple(listed(job) for job in jobs)
    assert decoded[0].spec is decoded[1].spec is decoded[2].spec  # decoded once
    assert labels == {}


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_a_listing_row_decodes_to_a_job_equal_field_by_field_to_one_built_by_init(
    state: JobState,
) -> None:
    # job_from_listing fills the Job's __dict__ itself, skipping the dataclass __init__:
    # every field, secret_values (compare=False) too, must be what __init__ would set.
    job = replace(full_job(), state=state, stop_state=None)
    (decoded,), _ = JobDecoder().decode(through_json(jobs_to_columns([job])))
    built = Job(**{f.name: getattr(decoded, f.name) for f in fields(Job) if f.init})

    assert vars(decoded) == vars(built)
    assert decoded == listed(job) and hash(decoded) == hash(listed(job))
    assert decoded.state is state
    assert decoded.secret_values == ()


def test_a_tables_array_tasks_are_labelled_n_k_beside_their_shared_spec() -> None:
    tasks = [
        replace(
            full_job(), id=20 + pos, spec=replace(full_spec(), array_task=3 + pos, array_pos=pos)
        )
        for pos in range(3)
    ]
    table = through_json(jobs_to_table([full_job(), *tasks]))
    assert len(table["specs"]) == 1  # the tasks still share their brief spec
    assert table_labels(table) == {20: "20_3", 21: "20_4", 22: "20_5"}
    # A row of an older daemon (no array columns) decodes, unlabelled.
    old = {"specs": table["specs"], "rows": [row[:17] for row in table["rows"]]}
    assert jobs_from_table(old)[0] == jobs_from_table(table)[0]
    assert table_labels(old) == {}


def test_the_tuis_decoder_labels_array_tasks_n_k_beside_their_shared_spec() -> None:
    tasks = [
        replace(
            full_job(),
            id=20 + pos,
            state=JobState.PENDING,
            spec=replace(full_spec(), array_task=3 + pos, array_pos=pos),
            array_more=((9, 12),) if pos == 2 else (),
        )
        for pos in range(3)
    ]
    decoded, labels = JobDecoder().decode(through_json(jobs_to_columns([full_job(), *tasks])))

    assert labels == {20: "20_3", 21: "20_4", 22: "20_[5,9-12]"}
    # The tasks share one spec, so their cells are formatted once.
    assert decoded[1].spec is decoded[2].spec is decoded[3].spec
    assert decoded[3].array_more == ((9, 12),)


def test_jobs_from_a_table_equal_the_brief_records_array_tasks_included() -> None:
    # squeue decodes tables with jobs_from_table: each job must be what the brief record
    # (job_to_wire(brief=True)) gives, an array task's array_task and array_pos too.
    tasks = [
        replace(
            full_job(),
            id=20 + pos,
            state=JobState.PENDING,
            spec=replace(full_spec(), array_task=3 + 2 * pos, array_pos=pos),
            array_more=((9, 12), (15, 15)) if pos == 2 else (),
        )
        for pos in range(3)
    ]
    other = replace(full_job(), id=1, spec=JobSpec(name="x", command=("true",), priority=7))
    jobs = [full_job(), *tasks, other, replace(tasks[0], id=30, state=JobState.RUNNING)]

    decoded = jobs_from_table(through_json(jobs_to_table(jobs)))

    assert decoded == [brief(job) for job in jobs]
    assert [j.spec for j in decoded] == [brief(job).spec for job in jobs]
    assert [j.array_job_id for j in decoded] == [job.array_job_id for job in jobs]


def test_the_decoder_hands_back_the_same_job_object_while_a_job_is_unchanged() -> None:
    decoder = JobDecoder()

    def decode(job: Job) -> Job:
        return decoder.decode(through_json(jobs_to_columns([job])))[0][0]

    first = decode(full_job())
    assert decode(full_job()) is first

    changed = decode(replace(full_job(), reason="x"))
    assert changed is not first and changed.reason == "x"
    # Another spec under the same spec index is another job too.
    other = replace(full_job(), reason="x", spec=replace(full_spec(), name="other"))
    assert decode(other).spec.name == "other"


def test_job_wire_form_is_plain_json_with_state_names() -> None:
    data = through_json(job_to_wire(full_job()))

    assert data["state"] == "COMPLETING"
    assert data["stop_state"] == "CANCELLED"
    assert data["gpus"] == [3, 1]
    assert data["spec"]["env"] == {"CUDA_LAUNCH_BLOCKING": "1", "WANDB_MODE": "offline"}


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_event_round_trips(state: JobState) -> None:
    event = Event(job_id=4711, time=T0 + 1.5, state=state, reason="node gpu01 lost: ssh timeout")
    assert event_from_wire(through_json(event_to_wire(event))) == event


def full_node() -> NodeInfo:
    return NodeInfo(
        name="gpu01",
        state=NodeState.MIXED,
        reason="",
        gpus=(
            Gpu(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", 81559, 40000, 97, 0, False),
            Gpu(1, "GPU-bbbb", "NVIDIA H100 80GB HBM3", 81559, 3, None, 0, False),
            Gpu(2, "GPU-cccc", "NVIDIA H100 80GB HBM3", 81559, 9000, 40, 2, False),
            Gpu(10, "GPU-dddd", "NVIDIA H100 80GB HBM3", 81559, 20000, 55, 0, False),
        ),
        allocations={0: 4711, 10: 4712},
    )


def test_node_with_gpus_and_allocations_round_trips() -> None:
    node = full_node()

    back = node_from_wire(through_json(node_to_wire(node)))

    assert back == node
    assert back.allocations == {0: 4711, 10: 4712}
    assert all(isinstance(index, int) for index in back.allocations)
    assert back.gpus[1].utilization_pct is None
    assert (back.gpus_total, back.gpus_allocated, back.gpus_busy_outside) == (4, 2, 1)
    assert back.gpus_free == 1


def test_simulated_node_round_trips() -> None:
    node = NodeInfo(
        name="localhost",
        state=NodeState.IDLE,
        gpus=(Gpu(0, "SIM-0", "simulated GPU", 16384, 0, 0, 0, True),),
    )

    back = node_from_wire(through_json(node_to_wire(node)))

    assert back == node
    assert back.simulated


@pytest.mark.parametrize("state", list(NodeState), ids=lambda s: s.value)
def test_node_in_every_state_round_trips(state: NodeState) -> None:
    unavailable = state in (NodeState.DRAINED, NodeState.DOWN)
    node = NodeInfo(name="gpu02", state=state, reason="maintenance" if unavailable else "")
    assert node_from_wire(through_json(node_to_wire(node))) == node


def test_brief_records_are_job_to_wire_s_and_their_text_is_json_s() -> None:
    array_task = replace(full_job(), id=4712, spec=replace(full_spec(), array_task=3))
    jobs = [full_job(), array_task, replace(full_job(), id=4713, state=JobState.PENDING)]
    made = BriefRecords()
    texts = [made.text(job, changed) for changed, job in enumerate(jobs, start=1)]
    assert [json.loads(text) for text in texts] == [job_to_wire(job, brief=True) for job in jobs]
    assert texts == [json.dumps(json.loads(t), separators=(",", ":")) for t in texts]


def streamed(texts: list[str], run: int) -> Streamed:
    return Streamed(iter([",".join(texts[i : i + run]) for i in range(0, len(texts), run)]))


@pytest.mark.parametrize("run", [1, 2, 1000])
def test_a_streamed_list_in_pieces_makes_json_s_line(run: int) -> None:
    jobs = [replace(full_job(), id=n) for n in range(1, 2502)]
    records = [job_to_wire(job, brief=True) for job in jobs]
    texts = [json.dumps(record, separators=(",", ":")) for record in records]
    later = lambda: 7  # noqa: E731
    reply = {"ok": True, "jobs": streamed(texts, run), "now": T0, "next": Later(later)}
    pieces = encode_reply(reply)
    whole = {"ok": True, "jobs": records, "now": T0, "next": 7}
    assert b"".join(pieces) == json.dumps(whole, separators=(",", ":")).encode() + b"\n"
    assert len(pieces) > 1
    again = {"ok": True, "jobs": streamed(texts, run), "now": T0, "next": Later(later)}
    assert materialised(again) == whole


def test_an_empty_streamed_list_is_an_empty_list() -> None:
    reply = {"ok": True, "jobs": Streamed(iter(["", ""])), "now": T0}
    assert b"".join(encode_reply(reply)) == b'{"ok":true,"jobs":[],"now":%s}\n' % str(T0).encode()
    assert materialised({"jobs": Streamed(iter(()))}) == {"jobs": []}


def test_a_brief_record_is_remembered_by_its_rows_change_number() -> None:
    made = BriefRecords()
    job = full_job()
    text = made.text(job, 5)
    found = made.known()(job.id, 5)
    assert found is not None and found.text == text and found.job is job
    assert made.known()(job.id, 6) is None  # the row was written since: made again
    moved = replace(job, state=JobState.RUNNING, reason="")
    assert json.loads(made.text(moved, 6))["state"] == "RUNNING"
    assert made.known()(job.id, 5) is None
    assert made.text(moved, None) and made.known()(job.id, 6) is not None


def test_brief_records_keep_no_more_than_their_bound() -> None:
    made = BriefRecords(most=2)
    jobs = [replace(full_job(), id=n) for n in range(1, 5)]
    find = made.known()
    texts = [made.text(job, 1) for job in jobs]
    assert [json.loads(t) for t in texts] == [job_to_wire(job, brief=True) for job in jobs]
    assert len(made._made) == 2  # a listing longer than the bound keeps only the bound
    assert find(1, 1) is not None and find(4, 1) is None
    again = made.known()  # full: all forgotten at the next listing...
    assert again(1, 1) is None
    assert find(1, 1) is not None  # ...not under the one still listing
    made.text(jobs[0], 1)
    assert list(made._made) == [1]


def test_the_decoder_sees_a_tail_record_whose_tasks_changed_as_a_new_job() -> None:
    # A tail's row is the same while its spans shrink (a task became a row of its own):
    # the Job (its label, its cells) must follow the spans, not stay the last one.
    spec = replace(full_spec(), array_task=3, array_pos=0)
    tail = replace(full_job(), state=JobState.PENDING, spec=spec, array_more=((4, 9),))
    decoder = JobDecoder()
    (first,), labels = decoder.decode(through_json(jobs_to_columns([tail])))
    assert labels == {4711: "4711_[3-9]"}

    (then,), labels = decoder.decode(
        through_json(jobs_to_columns([replace(tail, array_more=((5, 9),))]))
    )
    assert then is not first and then.array_more == ((5, 9),)
    assert labels == {4711: "4711_[3,5-9]"}


def test_a_small_reply_is_one_piece_of_json_s_line() -> None:
    for reply in (
        {"ok": True, "ids": [4711]},
        {"ok": True, "ids": (1, 2, 3), "test": None, "note": "é\n", "share": 0.5},
        {"ok": False, "kind": "invalid", "error": "bad"},
    ):
        whole = json.dumps(reply, separators=(",", ":")).encode() + b"\n"
        assert encode_reply(reply) == [whole]
    # A list streamed as its texts keeps them, even when short: not dumped again.
    made = Streamed(iter(['{"state" :"PENDING"}']))  # a space tells the texts apart
    line = b"".join(encode_reply({"ok": True, "jobs": made}))
    assert line == b'{"ok":true,"jobs":[{"state" :"PENDING"}]}\n'
