"""The socket's requests: one type per op, encoded by the client, decoded and checked by
the daemon; and the error kinds a reply may carry, each with its exit status."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gbatch.cli._main import exit_status
from gbatch.cli.exits import Exit
from gbatch.protocol import decoder, requests

# One request per op, every field away from its default: a new request type needs one.
EXAMPLES: dict[str, requests.Request] = {
    "ping": requests.Ping(),
    "submit": requests.Submit(
        spec={"name": "train", "command": ["python", "train.py"], "gpus": 2, "env": {"A": "1"}},
        secret_env={"TOKEN": "s3cret"},
        count=4,
        held=True,
    ),
    "cancel": requests.Cancel(ids=(1, 2), users=("alice",), states=("PD", "RUNNING")),
    "hold": requests.Hold(ids=(3,)),
    "release": requests.Release(ids=(3, 4)),
    "requeue": requests.Requeue(ids=(5,)),
    "jobs": requests.ListJobs(
        ids=(1,),
        users=("bob",),
        states=("CD",),
        history=True,
        since=1_767_225_600.5,
        brief=True,
        table=True,
    ),
    "job": requests.ShowJob(id=12),
    "update": requests.UpdateJob(id=12, changes={"TimeLimit": "30:00", "JobName": "x"}),
    "nodes": requests.ListNodes(),
    "logs": requests.ReadLog(id=12, offset=4096),
    "node_drain": requests.DrainNode(name="gpu01", reason="fan noise"),
    "reservation_change": requests.ChangeReservation(
        action="create", words=("ReservationName=demo", "StartTime=now", "Duration=10")
    ),
    "reservation_delete": requests.DeleteReservation(name="demo"),
    "reservations": requests.ListReservations(name="demo"),
    "node_resume": requests.ResumeNode(name="gpu01"),
    "node_install": requests.InstallAgent(names=("gpu01", "gpu02")),
    "node_hostkey": requests.GetHostKey(name="gpu01"),
    "node_trust": requests.TrustHostKey(name="gpu01", fingerprint="SHA256:abc", replace=True),
    "shares": requests.ShowShares(users=("alice", "bob"), all_users=True),
    "priorities": requests.ShowPriorities(ids=(3, 4), users=("alice",)),
    "usage_report": requests.ReportUsage(
        start=1_767_225_600.0, end=1_769_904_000.0, users=("bob",), all_users=True, by_group=True
    ),
    "usage_series": requests.ReportUsageSeries(edges=(1_767_225_600.0, 1_767_312_000.0)),
    "timeline": requests.ShowTimeline(start=1_767_225_600.0, end=1_767_312_000.0),
    "gpu_history": requests.ShowGpuHistory(
        start=1_767_225_600.0, end=1_767_229_200.0, node="gpu01", gpus=(0, 3), points=60
    ),
    "metrics": requests.Metrics(),
    "shutdown": requests.Shutdown(),
    "token": requests.MintToken(lifespan=7200, scopes=("read", "submit"), user="ci-bot"),
    "tokens": requests.ListTokens(all_users=True),
    "token_revoke": requests.RevokeToken(jti="0a1b2c"),
    "token_rotate": requests.RotateTokenKey(drop_old=True),
    "cluster_link": requests.LinkCluster(partition="uni", login="alice"),
    "cluster_unlink": requests.UnlinkCluster(partition="uni"),
    "cluster_status": requests.ClusterStatus(all_users=True),
    "with_token": requests.WithToken(token="eyJ.x.y", request={"op": "jobs", "users": ["ci-bot"]}),
    "step": requests.OpenStep(
        job=12,
        argv=("bash", "-l"),
        env={"TERM": "xterm"},
        cwd="/home/alice",
        pty=True,
        rows=40,
        cols=120,
        interactive=True,
    ),
    "await_allocation": requests.AwaitAllocation(job=12, seconds=2.5, planned=True),
    "steps": requests.ListSteps(ids=(12, 13)),
    "port_forward": requests.OpenForward(job=12, ports=(8888,), watch=True, task=3),
}

# JSON values that are not of a type, for each type a request field has: a field of a
# new type must be listed here (test_every_field_type_has_wrong_values_to_try).
WRONG: dict[Any, list[object]] = {
    int: ["1", 1.5, True, [1], 2**63],
    str: [1, True, ["a"], {"a": "b"}],
    bool: [1, "true", [True]],
    float: ["1", True, [1.0]],
    float | None: ["1", True, [1.0]],
    int | None: ["1", 1.5, True, [1], 2**63],
    str | None: [1, True, ["a"]],
    tuple[int, ...]: ["1", 1, [1.5], [True], ["1"], [None], {"1": 1}],
    tuple[float, ...]: ["1", 1.5, [True], ["1"], [None], {"1": 1}],
    tuple[str, ...]: ["PD", 1, [1], [None], [["PD"]], {"PD": 1}],
    dict[str, Any]: [[], "x", 1, True],
    dict[str, str] | None: [[], "x", {"A": 1}, {"A": None}],
    dict[str, Any] | None: [[], "x", 1, True],
    dict[str, str]: [[], "x", None, {"A": 1}, {"A": None}],
}


def through_json(request: requests.Request) -> Any:
    return json.loads(json.dumps(requests.encode_request(request)))


def field_cases() -> list[tuple[str, str, object]]:
    cases = []
    for op, cls in sorted(requests.REQUESTS.items()):
        hints = requests.type_hints(cls)
        for name in cls._fields:
            cases += [(op, name, value) for value in WRONG.get(hints[name], [])]
    return cases


def test_every_op_has_an_example_request() -> None:
    assert set(EXAMPLES) == set(requests.REQUESTS)
    assert all(type(request).op == op for op, request in EXAMPLES.items())


@pytest.mark.parametrize("op", sorted(EXAMPLES))
def test_each_request_comes_back_from_the_socket_as_it_was_sent(op: str) -> None:
    request = EXAMPLES[op]
    assert decoder.decode_request(through_json(request)) == request


@pytest.mark.parametrize("op", sorted(EXAMPLES))
def test_fields_left_out_or_null_take_their_defaults(op: str) -> None:
    cls = requests.REQUESTS[op]
    example = vars(EXAMPLES[op])
    required = {name: example[name] for name in cls._fields if name not in cls._defaults}
    assert decoder.decode_request({"op": op, **required}) == cls(**required)
    nulls = dict.fromkeys(cls._defaults)
    assert decoder.decode_request({"op": op, **required, **nulls}) == cls(**required)


def test_the_json_keeps_the_ops_and_field_names_clients_have_always_sent() -> None:
    sent = through_json(EXAMPLES["submit"])
    assert sent == {
        "op": "submit",
        "spec": {"name": "train", "command": ["python", "train.py"], "gpus": 2, "env": {"A": "1"}},
        "secret_env": {"TOKEN": "s3cret"},
        "count": 4,
        "held": True,
        # Added with --export, --array expressions and --test-only; old daemons ignore none
        # of them silently, so clients send them only to a daemon of the same version.
        "submit_env": None,
        "array": None,
        "test_only": False,
        "sweep": None,  # a parameter sweep's names and rows, and its tasks' name template
        "name_template": None,
    }
    assert through_json(requests.ListJobs(states=("PD",))) == {
        "op": "jobs",
        "ids": [],
        "jobs": [],
        "users": [],
        "states": ["PD"],
        "history": False,
        "since": None,
        "brief": False,
        "table": False,
        # Added with squeue's -n, -p, -w and --start (issue 15).
        "names": [],
        "partitions": [],
        "nodes": [],
        "starts": False,
        # Added with seff's and sacct's GPU usage (issue 15).
        "gpu_usage": False,
        # Added with squeue's columns (issue 16).
        "columns": False,
        # Added with the HTTP API's pages (issue 17).
        "after": None,
        "limit": None,
        # Added with the TUI's paged queue (issue 16): a view's page, sorted, filtered
        # and counted by the daemon.
        "sort": "",
        "reverse": False,
        "shown_states": [],
        "search": "",
        "offset": None,
        "counts": False,
    }
    # What squeue sent before there were request types: nulls for options not given.
    old = {"op": "jobs", "users": None, "ids": None, "brief": True}
    assert decoder.decode_request(old) == requests.ListJobs(brief=True)


def test_every_field_type_has_wrong_values_to_try() -> None:
    for cls in requests.REQUESTS.values():
        hints = requests.type_hints(cls)
        for name in cls._fields:
            assert hints[name] in WRONG, f"{cls.op}.{name}: add its type {hints[name]} to WRONG"


@pytest.mark.parametrize(("op", "name", "value"), field_cases())
def test_a_field_of_the_wrong_type_is_refused_naming_the_field(
    op: str, name: str, value: object
) -> None:
    data = {**through_json(EXAMPLES[op]), name: value}
    with pytest.raises(decoder.BadRequest) as caught:
        decoder.decode_request(data)
    message = str(caught.value)
    assert message.startswith(f"bad request: {op}.{name}: expected "), message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"op": "jobs", "states": [1]},
            "bad request: jobs.states: expected a list of strings, got [1]",
        ),
        (
            {"op": "cancel", "ids": "x"},
            'bad request: cancel.ids: expected a list of integers, got "x"',
        ),
        ({"op": "submit", "spec": []}, "bad request: submit.spec: expected an object, got []"),
        ({"op": "job"}, "bad request: job.id: expected an integer, got nothing"),
        ({"op": "job", "id": None}, "bad request: job.id: expected an integer, got null"),
        ({"op": "logs", "id": True}, "bad request: logs.id: expected an integer, got true"),
        (
            {"op": "jobs", "since": "yesterday"},
            'bad request: jobs.since: expected a number, got "yesterday"',
        ),
        (
            {"op": "node_trust", "name": "gpu01", "fingerprint": "SHA256:x", "replace": "yes"},
            'bad request: node_trust.replace: expected true or false, got "yes"',
        ),
        (
            {"op": "hold", "ids": [2**64]},
            f"bad request: hold.ids: expected a list of integers of at most 18 digits, got "
            f"[{2**64}]",
        ),
        ({"op": "format-disk"}, "unknown request 'format-disk'"),
        ({"op": 7}, "bad request: op: expected the name of a request, got 7"),
        ({"ids": [1]}, "bad request: op: expected the name of a request, got nothing"),
        ([{"op": "ping"}], "bad request: a request is one JSON object per line, not a list"),
        ("ping", "bad request: a request is one JSON object per line, not a string"),
    ],
)
def test_a_bad_request_says_what_is_wrong_in_one_line(data: object, message: str) -> None:
    with pytest.raises(decoder.BadRequest) as caught:
        decoder.decode_request(data)
    assert str(caught.value) == message


def test_a_secret_value_is_never_shown_in_a_refusal() -> None:
    for secrets in ({"TOKEN": 12345678}, "TOKEN=12345678", ["12345678"]):
        data = {"op": "submit", "spec": {}, "secret_env": secrets}
        with pytest.raises(decoder.BadRequest) as caught:
            decoder.decode_request(data)
        message = str(caught.value)
        assert message.startswith("bad request: submit.secret_env: expected an object of strings")
        assert "12345678" not in message


def test_a_long_value_is_cut_short_in_the_refusal() -> None:
    with pytest.raises(decoder.BadRequest) as caught:
        decoder.decode_request({"op": "cancel", "ids": "x" * 100_000})
    assert len(str(caught.value)) < 150


def test_fields_a_request_type_does_not_name_are_ignored() -> None:
    forged = {"op": "submit", "spec": {"name": "x"}, "uid": 0, "user": "root"}
    assert decoder.decode_request(forged) == requests.Submit(spec={"name": "x"})


def test_a_request_is_frozen_and_takes_only_its_own_fields() -> None:
    request = requests.ShowJob(id=1)
    with pytest.raises(AttributeError):
        request.id = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="has no field user"):
        requests.ShowJob(id=1, user="root")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="id is required"):
        requests.ShowJob()  # type: ignore[call-arg]
    assert requests.Hold(ids=(1,)) != requests.Release(ids=(1,))


def test_every_error_kind_has_an_exit_status() -> None:
    statuses = {kind: exit_status(kind) for kind in requests.ERROR_KINDS}
    assert statuses == {
        "invalid": Exit.USAGE,
        "not_found": Exit.FAILED,
        "permission": Exit.PERMISSION,
        "unavailable": Exit.UNAVAILABLE,
        "internal": Exit.INTERNAL,
        "unauthenticated": Exit.PERMISSION,  # a token that lets nobody in (the HTTP API)
    }


def test_a_kind_this_client_does_not_know_reads_as_internal() -> None:
    assert requests.error_kind("permission") == "permission"
    assert requests.error_kind("quota") == "internal"
    assert requests.error_kind(None) == "internal"


def test_error_kinds_are_the_error_kind_literal_type_checkers_read() -> None:
    """requests.py writes ErrorKind's values twice, for mypy (the Literal, under
    TYPE_CHECKING: typing is not imported at start) and for the code (ERROR_KINDS)."""
    import ast
    import typing
    from pathlib import Path

    tree = ast.parse(Path(requests.__file__).read_text())
    checked = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == "ErrorKind"
    )
    assert isinstance(checked.value, ast.Subscript)
    literals = tuple(ast.literal_eval(checked.value.slice))
    assert literals == requests.ERROR_KINDS
    assert typing.get_args(requests.ErrorKind) == requests.ERROR_KINDS


def test_every_request_field_has_its_type_hint_without_typing_imported_by_requests() -> None:
    """The daemon's decoder reads each request's hints (decoder._field_checks), whose
    typing names requests.py imports for type checkers alone (requests.type_hints)."""
    for cls in requests.REQUESTS.values():
        assert [name for name, _ in decoder._field_checks(cls)] == list(cls._fields)
