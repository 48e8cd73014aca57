"""Who may see and do what: env values, private_data, admin_group, and the audit line
each refusal leaves. Handlers against a real store, without the daemon's loop."""

from __future__ import annotations

import grp
import logging
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.core.model import JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.handlers.auth import is_admin
from gbatch.head.store import Store
from gbatch.site.config import Config, ConfigError, Paths, load_config

ALICE = Caller(uid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, user="bob", pid=22)
SPEC = JobSpec(name="j", command=("train.py",), env=(("TOKEN", "s3cret"),)).to_dict()


def make_daemon(tmp_path: Path, **config: object) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2, **config), store)  # type: ignore[arg-type]
    yield made
    made.committer.close()
    store.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    yield from make_daemon(tmp_path)


@pytest.fixture
def private(tmp_path: Path) -> Iterator[Daemon]:
    yield from make_daemon(tmp_path, private_data=True, admins=("carol",))


def submit(daemon: Daemon, caller: Caller) -> int:
    reply = handle(daemon, caller, {"op": "submit", "spec": SPEC, "held": True})
    (job_id,) = reply["ids"]
    return int(job_id)


def test_env_values_are_the_owners_only_in_job_and_listings(daemon: Daemon) -> None:
    job_id = submit(daemon, ALICE)
    mine = handle(daemon, ALICE, {"op": "job", "id": job_id})["job"]["spec"]
    theirs = handle(daemon, BOB, {"op": "job", "id": job_id})["job"]["spec"]
    assert mine["env"] == {"TOKEN": "s3cret"}
    assert theirs["env"] == {"TOKEN": ""}
    assert theirs["command"] == ["train.py"]  # the command is not private without private_data
    listed = handle(daemon, BOB, {"op": "jobs"})["jobs"]
    assert [j["spec"]["env"] for j in listed] == [{"TOKEN": ""}]
    root = Caller(uid=0, user="root", pid=1)
    assert handle(daemon, root, {"op": "jobs"})["jobs"][0]["spec"]["env"] == {"TOKEN": "s3cret"}


def test_each_refusal_leaves_one_audit_line_naming_who_what_and_why(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = submit(daemon, ALICE)
    caplog.set_level(logging.INFO, logger="gbatchd")
    for op in ("cancel", "hold", "release", "requeue"):
        assert not handle(daemon, BOB, {"op": op, "ids": [job_id]})["results"][0]["ok"]
    assert handle(daemon, BOB, {"op": "logs", "id": job_id})["kind"] == "permission"
    handle(daemon, BOB, {"op": "job", "id": job_id})
    assert handle(daemon, BOB, {"op": "shutdown"})["kind"] == "permission"
    assert handle(daemon, BOB, {"op": "node_drain", "name": "local", "reason": "x"})["kind"] == (
        "permission"
    )
    who = "audit: user=bob uid=5002 pid=22"
    what = f"job={job_id} owner=alice"
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit")] == [
        f"{who} op=cancel {what} -> refused: not the owner",
        f"{who} op=hold {what} -> refused: not the owner",
        f"{who} op=release {what} -> refused: not the owner",
        f"{who} op=requeue {what} -> refused: not the owner",
        f"{who} op=logs {what} -> refused: not the owner",
        f"{who} op=job_env {what} -> refused: env values withheld, not the owner",
        f"{who} op=shutdown target=daemon -> refused: not an admin",
        f"{who} op=node_drain target=node_local -> refused: not an admin",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if "audit" in r.getMessage())


def test_a_users_string_can_neither_forge_a_log_line_nor_flood_the_log(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    forged = "gpu1\naudit: user=root uid=0 pid=1 op=shutdown -> allowed\x1b[2J"
    for name in (forged, "x" * 4_000_000):
        reply = handle(daemon, BOB, {"op": "node_drain", "name": name, "reason": "r"})
        assert reply["kind"] == "permission"
    # An admin's drain reason is the user's text too.
    root = Caller(uid=0, user="root", pid=1)
    assert handle(daemon, root, {"op": "node_drain", "name": "local", "reason": "fan\nFORGED"})[
        "ok"
    ]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0] == (
        "audit: user=bob uid=5002 pid=22 op=node_drain target=node_gpu1\\naudit:_user=root_"
        "uid=0_pid=1_op=shutdown_->_allowed\\x1b[2J -> refused: not an admin"
    )
    assert lines[1].endswith("x" * 195 + "...[3999805 more characters] -> refused: not an admin"), (
        lines[1][-120:]
    )
    assert len(lines[1]) < 400
    assert lines[2] == "node local drained by root: fan\\nFORGED"
    assert all("\n" not in line and "\x1b" not in line for line in lines)


def test_private_data_answers_another_users_job_as_a_missing_one(private: Daemon) -> None:
    hers = submit(private, ALICE)
    his = submit(private, BOB)
    missing = his + 100
    assert [j["id"] for j in handle(private, BOB, {"op": "jobs"})["jobs"]] == [his]
    everyone = {"op": "jobs", "history": True, "users": ["alice"]}
    assert handle(private, BOB, everyone)["jobs"] == []
    assert handle(private, BOB, {"op": "jobs", "ids": [hers, his]})["jobs"][0]["id"] == his
    for op in ("job", "logs"):
        gone = handle(private, BOB, {"op": op, "id": missing})
        hidden = handle(private, BOB, {"op": op, "id": hers})
        assert hidden == {**gone, "error": gone["error"].replace(str(missing), str(hers))}
    for op in ("cancel", "hold", "release", "requeue"):
        (result,) = handle(private, BOB, {"op": op, "ids": [hers]})["results"]
        assert result == {"id": hers, "ok": False, "error": f"Invalid job id specified: {hers}"}
    carol = Caller(uid=5003, user="carol", pid=33)
    assert len(handle(private, carol, {"op": "jobs"})["jobs"]) == 2
    assert handle(private, carol, {"op": "job", "id": hers})["job"]["spec"]["env"] == {
        "TOKEN": "s3cret"
    }
    assert private.store.require(hers).held


def test_a_primary_group_member_of_admin_group_is_an_admin(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    caller = Caller(uid=nobody.pw_uid, user="nobody", pid=1)
    for made in make_daemon(tmp_path, admin_group=group):
        assert is_admin(made, caller)
        assert not is_admin(made, ALICE)
    for made in make_daemon(tmp_path / "other", admin_group=None):
        assert not is_admin(made, caller)


def test_config_reads_admin_group_and_private_data(tmp_path: Path) -> None:
    group = grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name
    paths = Paths(tmp_path)
    paths.config_file.write_text(f"admin_group: {group}\nprivate_data: true\n")
    config = load_config(paths, {})
    assert (config.admin_group, config.private_data) == (group, True)
    assert (Config().admin_group, Config().private_data) == (None, False)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("admin_group: no-such-group-gbta", "an existing Unix group"),
        ("admin_group: [a]", "a Unix group name"),
        ("private_data: yes please", "true or false"),
        ("private_data: 1", "true or false"),
    ],
)
def test_bad_admin_group_or_private_data_is_refused_with_the_fix(
    tmp_path: Path, line: str, why: str
) -> None:
    paths = Paths(tmp_path)
    paths.config_file.write_text(line + "\n")
    with pytest.raises(ConfigError, match=why):
        load_config(paths, {})


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            {"priority": 10000},
            "--priority: only an admin may set a job's priority (priority: 10000). Leave it "
            "out; to let others' jobs go first, give --nice N (N of 0 or more)",
        ),
        (
            {"priority": -5},
            "--priority: only an admin may set a job's priority (priority: -5). Leave it "
            "out; to let others' jobs go first, give --nice N (N of 0 or more)",
        ),
        (
            {"nice": -10000},
            "--nice: only an admin may give a negative nice, which raises a job's priority "
            "(nice: -10000). Give 0 or more, or leave it out",
        ),
    ],
)
def test_only_admins_set_a_priority_or_a_negative_nice_at_submit(
    tmp_path: Path, fields: dict[str, int], error: str
) -> None:
    """Slurm's rule, as scontrol update's: a user may only lower their job's priority."""
    for daemon in make_daemon(tmp_path, admins=("carol",)):
        spec = {**SPEC, **fields}
        for request in (
            {"op": "submit", "spec": spec},
            {"op": "submit", "spec": spec, "count": 3},  # an array
            {"op": "submit", "spec": spec, "test_only": True},
        ):
            reply = handle(daemon, ALICE, request)
            assert reply == {"ok": False, "kind": "permission", "error": error}
        assert daemon.store.count() == 0
        carol = Caller(uid=5003, user="carol", pid=33)
        root = Caller(uid=0, user="root", pid=1)
        for admin in (carol, root):
            (job_id,) = handle(daemon, admin, {"op": "submit", "spec": spec})["ids"]
            job = daemon.store.get(job_id)
            assert job is not None and (job.spec.priority, job.spec.nice) == (
                fields.get("priority", 0),
                fields.get("nice", 0),
            )


def test_a_user_may_lower_their_jobs_priority_with_a_positive_nice(daemon: Daemon) -> None:
    reply = handle(daemon, ALICE, {"op": "submit", "spec": {**SPEC, "nice": 100}})
    job = daemon.store.get(reply["ids"][0])
    assert job is not None and job.spec.effective_priority == -100
