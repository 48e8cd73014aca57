from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.model import Gpu
from gbatch.nodes.report import (
    ContainerReport,
    NodeReport,
    ProcessReport,
    ReportError,
    gbatch_container_ids,
    parse_report,
    parse_report_line,
    to_gpus,
)

SAMPLE = Path(__file__).resolve().parents[2] / "agent" / "sample_report.json"
OWN_CONTAINER = "3f4e8a1b9c2d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
EXITED_CONTAINER = "8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d"


def sample() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAMPLE.read_text())
    return data


def report_with_processes(*processes: dict[str, Any]) -> NodeReport:
    data = sample()
    data["gpus"] = data["gpus"][:1]
    data["gpus"][0]["processes"] = list(processes)
    return parse_report(data)


def process(sid: int | None = None, container: str | None = None) -> dict[str, Any]:
    return {"pid": 100, "sid": sid, "used_memory_mib": 10, "container": container}


def test_sample_report_parses_into_values() -> None:
    report = parse_report(sample())

    assert (report.schema, report.host, report.source, report.note) == (1, "gpu01", "nvml", "")
    assert report.time == 1767225600.125
    assert report.disk_free_bytes == 412316860416
    assert [g.index for g in report.gpus] == [0, 1]
    assert report.gpus[1].processes == (
        ProcessReport(pid=90412, sid=90380, used_memory_mib=12288, container=None),
    )


def test_report_line_parses_from_bytes_with_newline() -> None:
    line = (json.dumps(sample()) + "\n").encode()

    assert parse_report_line(line) == parse_report(sample())


def test_nulls_are_kept_where_schema_allows_them() -> None:
    data = sample()
    data["gpus"][0]["utilization_pct"] = None
    data["gpus"][0]["processes"][0].update(sid=None, used_memory_mib=None)
    data["facts"]["disk_free_bytes"] = None

    report = parse_report(data)

    assert report.gpus[0].utilization_pct is None
    assert report.gpus[0].processes[0].sid is None
    assert report.gpus[0].processes[0].used_memory_mib is None
    assert report.disk_free_bytes is None


def test_unknown_keys_are_ignored_so_the_agent_can_grow() -> None:
    data = sample()
    data["extra"] = {"anything": 1}
    data["gpus"][0]["temperature_c"] = 61

    assert parse_report(data) == parse_report(sample())


def test_report_of_a_host_without_gpus_parses() -> None:
    data = sample()
    data.update(source="none", gpus=[], note="NVML unavailable: Driver Not Loaded")

    report = parse_report(data)

    assert report.gpus == ()
    assert report.note == "NVML unavailable: Driver Not Loaded"


def test_unknown_schema_version_is_refused_with_advice() -> None:
    data = sample()
    data["schema"] = 2

    with pytest.raises(ReportError, match=r"report schema 2 is not supported.*reads schema 1"):
        parse_report(data)


def mutated(path: tuple[str | int, ...], value: Any = None, *, delete: bool = False) -> Any:
    data: Any = copy.deepcopy(sample())
    target = data
    for step in path[:-1]:
        target = target[step]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("schema",), "report: missing key 'schema'"),
        (("host",), "report: missing key 'host'"),
        (("facts",), "report: missing key 'facts'"),
        (("containers",), "report: missing key 'containers'"),
        (("facts", "disk_free_bytes"), "report.facts: missing key 'disk_free_bytes'"),
        (("gpus", 1, "uuid"), "report.gpus[1]: missing key 'uuid'"),
        (("gpus", 0, "processes", 0, "pid"), "report.gpus[0].processes[0]: missing key 'pid'"),
        (("containers", 1, "exit_code"), "report.containers[1]: missing key 'exit_code'"),
        (("containers", 0, "job"), "report.containers[0]: missing key 'job'"),
    ],
)
def test_missing_key_is_named_with_its_place(path: tuple[str | int, ...], message: str) -> None:
    with pytest.raises(ReportError) as caught:
        parse_report(mutated(path, delete=True))

    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("schema",), "1", "report.schema: expected an integer, got str '1'"),
        (("time",), "now", "report.time: expected a number, got str 'now'"),
        (("source",), "dcgm", "report.source: expected one of none, nvml, simulation, got 'dcgm'"),
        (("gpus",), {}, "report.gpus: expected a list, got dict {}"),
        (("gpus", 0), [], "report.gpus[0]: expected an object, got list []"),
        (("gpus", 0, "index"), True, "report.gpus[0].index: expected an integer, got bool True"),
        (
            ("gpus", 1, "memory_used_mib"),
            1.5,
            "report.gpus[1].memory_used_mib: expected an integer, got float 1.5",
        ),
        (
            ("gpus", 0, "utilization_pct"),
            "97%",
            "report.gpus[0].utilization_pct: expected an integer or null, got str '97%'",
        ),
        (
            ("gpus", 0, "simulated"),
            0,
            "report.gpus[0].simulated: expected true or false, got int 0",
        ),
        (("gpus", 0, "name"), None, "report.gpus[0].name: expected a string, got null"),
        (
            ("gpus", 1, "processes", 0, "container"),
            42,
            "report.gpus[1].processes[0].container: expected a string or null, got int 42",
        ),
        (("facts",), [], "report.facts: expected an object, got list []"),
        (("containers",), {}, "report.containers: expected a list, got dict {}"),
        (("containers", 0), "abc", "report.containers[0]: expected an object, got str 'abc'"),
        (
            ("containers", 0, "job"),
            "42",
            "report.containers[0].job: expected an integer, got str '42'",
        ),
        (
            ("containers", 1, "exit_code"),
            "137",
            "report.containers[1].exit_code: expected an integer or null, got str '137'",
        ),
        (
            ("containers", 1, "oom_killed"),
            1,
            "report.containers[1].oom_killed: expected true or false, got int 1",
        ),
        (
            ("containers", 0, "started_at"),
            "2026-01-01T00:00:00Z",
            "report.containers[0].started_at: expected a number or null, got str "
            "'2026-01-01T00:00:00Z'",
        ),
        (
            ("containers", 1, "finished_at"),
            False,
            "report.containers[1].finished_at: expected a number or null, got bool False",
        ),
        (("containers", 0, "id"), None, "report.containers[0].id: expected a string, got null"),
        (("docker_note",), 3, "report.docker_note: expected a string, got int 3"),
        (("lease", "problem"), None, "report.lease.problem: expected a string, got null"),
    ],
)
def test_wrong_type_is_named_with_its_place(
    path: tuple[str | int, ...], value: object, message: str
) -> None:
    with pytest.raises(ReportError) as caught:
        parse_report(mutated(path, value))

    assert str(caught.value) == message


def test_repeated_gpu_uuid_is_refused() -> None:
    data = sample()
    data["gpus"][1]["uuid"] = data["gpus"][0]["uuid"]

    with pytest.raises(ReportError, match=r"report.gpus\[1\].uuid: .* repeats"):
        parse_report(data)


def test_source_none_with_gpus_is_refused() -> None:
    data = sample()
    data["source"] = "none"

    with pytest.raises(ReportError, match='source "none" must list no GPUs'):
        parse_report(data)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "report is not JSON"),
        (b"\xff\xfe", "report is not UTF-8"),
        ("[1, 2]", "report: expected an object, got list"),
        ("", "report is not JSON"),
    ],
)
def test_bad_lines_are_refused(line: str | bytes, message: str) -> None:
    with pytest.raises(ReportError, match=message):
        parse_report_line(line)


def test_report_error_is_a_value_error() -> None:
    assert issubclass(ReportError, ValueError)


def test_to_gpus_copies_the_reported_values() -> None:
    gpus = to_gpus(parse_report(sample()), gbatch_sessions=(), gbatch_containers=())

    assert gpus[0] == Gpu(
        index=0,
        uuid="GPU-5c1b2f0e-7d3a-4b8e-9f21-0a6c3d4e5f61",
        name="NVIDIA A100-SXM4-80GB",
        memory_total_mib=81920,
        memory_used_mib=31245,
        utilization_pct=97,
        foreign_processes=1,
        simulated=False,
        foreign_memory_mib=31245,  # in use, less what gbatch's processes hold (none)
        type="a100",  # from its name, by gbatch/core/gputypes.py's built-in rules
    )


def test_sample_counts_one_foreign_process_when_its_container_is_gbatch_s() -> None:
    gpus = to_gpus(
        parse_report(sample()), gbatch_sessions=(), gbatch_containers={OWN_CONTAINER[:12]}
    )

    # The MIG card and its 3g.40gb slice both list the foreign process.
    assert [g.foreign_processes for g in gpus] == [0, 1, 1, 0]


def test_process_in_a_gbatch_session_is_not_foreign() -> None:
    report = report_with_processes(process(sid=500), process(sid=501))

    (gpu,) = to_gpus(report, gbatch_sessions={500}, gbatch_containers=())

    assert gpu.foreign_processes == 1


@pytest.mark.parametrize("given", [OWN_CONTAINER, OWN_CONTAINER[:12], OWN_CONTAINER.upper()])
def test_process_in_a_gbatch_container_is_not_foreign_by_full_or_short_id(given: str) -> None:
    report = report_with_processes(process(sid=9, container=OWN_CONTAINER))

    (gpu,) = to_gpus(report, gbatch_sessions=(), gbatch_containers=[given])

    assert gpu.foreign_processes == 0


def test_short_container_id_in_the_report_matches_a_full_gbatch_id() -> None:
    report = report_with_processes(process(container=OWN_CONTAINER[:12]))

    (gpu,) = to_gpus(report, gbatch_sessions=(), gbatch_containers=[OWN_CONTAINER])

    assert gpu.foreign_processes == 0


def test_processes_outside_gbatch_are_foreign() -> None:
    report = report_with_processes(
        process(sid=None, container=None),
        process(sid=77, container="f" * 64),
        process(sid=500, container=OWN_CONTAINER),  # own: session and container both gbatch's
    )

    (gpu,) = to_gpus(report, gbatch_sessions={500}, gbatch_containers=[OWN_CONTAINER[:12], ""])

    assert gpu.foreign_processes == 2


def test_empty_container_id_matches_nothing() -> None:
    report = report_with_processes(process(container="f" * 64))

    (gpu,) = to_gpus(report, gbatch_sessions=(), gbatch_containers=[""])

    assert gpu.foreign_processes == 1


def test_sample_containers_parse_into_values() -> None:
    running, exited = parse_report(sample()).containers

    assert running == ContainerReport(
        id=OWN_CONTAINER,
        name="gbatch-42-1",
        job=42,
        attempt=1,
        user="alice",
        state="running",
        exit_code=None,
        oom_killed=False,
        started_at=1767222000.483716529,
        finished_at=None,
        node="gpu01",
    )
    assert (exited.id, exited.job, exited.attempt, exited.user) == (
        EXITED_CONTAINER,
        41,
        2,
        "bob",
    )
    assert (exited.state, exited.exit_code, exited.oom_killed) == ("exited", 137, True)
    assert (exited.started_at, exited.finished_at) == (1767218400.25, 1767221999.75)


def test_whole_second_container_times_become_floats() -> None:
    data = sample()
    data["containers"][1].update(started_at=1767218400, finished_at=1767221999)

    exited = parse_report(data).containers[1]

    assert (exited.started_at, exited.finished_at) == (1767218400.0, 1767221999.0)
    assert isinstance(exited.started_at, float)


def test_report_without_docker_note_or_containers_listed_parses_with_defaults() -> None:
    data = sample()
    del data["docker_note"]
    data["containers"] = []

    report = parse_report(data)

    assert (report.containers, report.docker_note) == ((), "")


def test_a_lease_the_host_could_not_write_is_reported_with_why() -> None:
    data = sample()
    assert parse_report(data).lease_problem == ""  # the sample's lease is fine
    data["lease"]["problem"] = "cannot renew the lease file /x: [Errno 30] Read-only file system"

    report = parse_report(data)

    assert report.lease_problem.endswith("Read-only file system")
    assert report.lease_remaining == 299.2


def test_docker_note_is_kept() -> None:
    data = sample()
    data.update(containers=[], docker_note="docker ps: no answer within 10 s")

    assert parse_report(data).docker_note == "docker ps: no answer within 10 s"


def test_unknown_container_keys_are_ignored() -> None:
    data = sample()
    data["containers"][0]["image"] = "pytorch:latest"

    assert parse_report(data) == parse_report(sample())


def test_gbatch_container_ids_are_those_listed_in_any_state() -> None:
    assert gbatch_container_ids(parse_report(sample())) == {OWN_CONTAINER, EXITED_CONTAINER}


def test_listed_containers_make_their_gpu_processes_gbatch_s() -> None:
    report = parse_report(sample())

    gpus = to_gpus(report, gbatch_sessions=(), gbatch_containers=gbatch_container_ids(report))

    # The MIG card and its 3g.40gb slice both list the foreign process.
    assert [g.foreign_processes for g in gpus] == [0, 1, 1, 0]


def test_report_without_containers_gives_no_gbatch_container_ids() -> None:
    data = sample()
    data["containers"] = []

    assert gbatch_container_ids(parse_report(data)) == frozenset()
