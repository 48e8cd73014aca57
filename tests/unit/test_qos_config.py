"""The `qos:` block of config.yaml (gbatch/core/qos.py): parsing, refusals, who may use
which QOS, and the per-user QOS limits the loop filters before the plan."""

from __future__ import annotations

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.qos import (
    MAX_GPUS_REASON,
    MAX_JOBS_REASON,
    NORMAL,
    QosError,
    QosTable,
    gpus_refusal,
    over_qos_limits,
    parse_qos,
    refusal,
    wall_refusal,
)
from gbatch.jobspec.sbatchopts import IGNORED_OPTIONS
from gbatch.jobspec.spec import SpecError, build_spec


def parse(raw: object) -> QosTable:
    return parse_qos(raw, user_exists=lambda n: n != "ghost", group_exists=lambda n: n != "ghost")


LAB = {
    "high": {
        "priority": 1000,
        "max_gpus": 4,
        "max_running_jobs": 1,
        "max_pending_jobs": 3,
        "max_wall": "1-00:00:00",
        "preempt": ["scavenger"],
        "users": ["alice"],
        "groups": ["deadline"],
    },
    "scavenger": {
        "priority": -100,
        "preempt_mode": "requeue",
        "grace_time": 30,
        "preempt_exempt_time": "10:00",
        "users": "ALL",
    },
}


def test_a_lab_config_reads_with_normal_always_there_and_open_to_all() -> None:
    table = parse(LAB)
    assert table.names == ["normal", "high", "scavenger"]
    high, scavenger = table.by_name["high"], table.by_name["scavenger"]
    assert (high.priority, high.max_gpus, high.max_running_jobs) == (1000, 4, 1)
    assert (high.max_pending_jobs, high.max_wall, high.preempt) == (3, 86400, ("scavenger",))
    assert (scavenger.grace_time, scavenger.preempt_exempt_time) == (30, 600)
    assert table.by_name[NORMAL].grace_time == 120  # the default
    assert table.allowed("bob", ()) == ["normal", "scavenger"]
    assert table.allowed("alice", ()) == ["normal", "high", "scavenger"]
    assert table.allowed("carol", ("deadline",)) == ["normal", "high", "scavenger"]
    assert table.allowed("bob", (), admin=True) == ["normal", "high", "scavenger"]
    assert parse(None).names == ["normal"] and QosTable().names == ["normal"]
    # A job queued before QOS (None), or of a QOS since removed, is normal's.
    assert table.get(None).name == table.get("gone").name == NORMAL


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"high": {"priorty": 1}}, 'qos.high: unknown setting "priorty". Did you mean "priority"?'),
        ({"high": {"preempt": ["nope"]}}, "qos.high.preempt: 'nope' is not a QOS here"),
        ({"high": {"preempt": "high"}}, "qos.high.preempt: a QOS cannot preempt itself"),
        ({"high": {"preempt_mode": "suspend"}}, "qos.high.preempt_mode: 'suspend' is not one of"),
        ({"high": {"max_gpus": -1}}, "qos.high.max_gpus: -1 is not zero or more"),
        ({"high": {"users": ["ghost"]}}, "qos.high.users: 'ghost' is not an existing user"),
        ({"high": {"groups": ["ghost"]}}, "qos.high.groups: 'ghost' is not an existing Unix group"),
        ({"high": {"max_wall": "soon"}}, "qos.high.max_wall"),
        ({"high": {"grace_time": -5}}, "qos.high.grace_time: -5 is below zero"),
        ({"bad name!": {}}, "qos: 'bad name!' is not a QOS name"),
        (["high"], "qos: ['high'] is not a mapping"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(raw: object, message: str) -> None:
    with pytest.raises(QosError) as err:
        parse(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_refusals_name_the_allowed_qos_and_the_fix() -> None:
    table = parse(LAB)
    allowed = table.allowed("bob", ())
    assert refusal("normal", table, allowed) is None
    assert refusal("high", table, allowed) == (
        "qos: 'high' is not a QOS you may use. Use one of: normal, scavenger "
        "(gbatch scontrol show qos lists them)"
    )
    assert "is not a QOS here" in (refusal("hihg", table, allowed) or "")
    high = table.by_name["high"]
    assert wall_refusal(high, 3600) is None
    assert "over QOS high's max_wall (1-00:00:00)" in (wall_refusal(high, 2 * 86400) or "")
    assert gpus_refusal(high, 4) is None
    assert "QOS high's limit (max_gpus) is 4" in (gpus_refusal(high, 5) or "")


def test_qos_is_an_option_and_a_job_file_key_no_longer_ignored() -> None:
    assert not any("--qos" in flags for flags, *_ in IGNORED_OPTIONS)
    spec = build_spec({"command": "true", "qos": "high"}, {}, default_name="j")
    assert spec.qos == "high" and spec.qos_priority == 0
    assert build_spec({"command": "true"}, {"qos": "low"}, default_name="j").qos == "low"
    with pytest.raises(SpecError, match='-q/--qos: "a b" is not a QOS name'):
        build_spec({"command": "true"}, {"qos": "a b"}, default_name="j")
    # Stored only when set; its weight is part of the priority the queue sorts by.
    weighted = spec.replace(qos_priority=1000, priority=5, nice=2)
    assert weighted.effective_priority == 1003
    assert JobSpec.from_dict(weighted.to_dict()) == weighted
    plain = build_spec({"command": "true"}, {}, default_name="j").to_dict()
    assert "qos" not in plain and "qos_priority" not in plain


def job(
    job_id: int,
    user: str,
    qos: str | None,
    gpus: int = 1,
    state: JobState = JobState.PENDING,
    held: bool = False,
) -> Job:
    spec = JobSpec(name="j", command=("true",), gpus=gpus, qos=qos)
    return Job(job_id, 1000, user, spec, state, float(job_id), held=held)


def test_the_per_user_qos_limits_hold_back_the_jobs_past_them() -> None:
    table = parse(
        {
            "high": {"max_running_jobs": 1, "users": "ALL"},
            "gpu2": {"max_gpus": 2, "users": "ALL"},
        }
    )
    running = [job(1, "alice", "high", state=JobState.RUNNING)]
    pending = [
        job(2, "alice", "high"),  # alice runs one high job already
        job(3, "bob", "high"),  # bob's first goes, his second waits
        job(4, "bob", "high"),
        job(5, "bob", "gpu2", gpus=2),
        job(6, "bob", "gpu2", gpus=1),  # past 2 GPUs with job 5
        job(7, "bob", None, gpus=8),  # normal: no limit
        job(8, "bob", "high", held=True),  # held: not counted, not given a reason
    ]
    assert over_qos_limits(pending, running, table) == {
        2: MAX_JOBS_REASON,
        4: MAX_JOBS_REASON,
        6: MAX_GPUS_REASON,
    }
    assert over_qos_limits(pending, running, parse(None)) == {}
