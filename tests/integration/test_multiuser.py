"""Jobs of real Unix users on one shared head: another user can neither act on them nor
read their env or logs, whether through the CLI or a raw request with forged identity
fields; admins (members of `admin_group`) can; `private_data` hides other users' jobs.
Every refusal is audited in the daemon log: one line saying who (user, uid, pid), what
and why, or past a user's budget, counted in one line per window.

Users and the admin group are made with useradd/groupadd per run and removed after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, require_root, wait_for

from gbatch.protocol import wire
from gbatch.protocol.client import Client, RequestFailed

ACTIONS = ("cancel", "hold", "release", "requeue", "logs")
CLI_ARGV = {
    "cancel": ("scancel",),
    "hold": ("scontrol", "hold"),
    "release": ("scontrol", "release"),
    "requeue": ("scontrol", "requeue"),
    "logs": ("logs",),
}
# Each round forges the identity another way: the daemon must read none of it.
FORGERIES = (
    lambda owner: {"uid": owner.uid, "user": owner.name},
    lambda owner: {"owner": owner.name, "caller": {"uid": owner.uid, "user": owner.name}},
    lambda owner: {"uid": 0, "user": "root", "admin": True, "pid": 1},
)
AUDIT = re.compile(
    r"audit: user=(?P<user>\S+) uid=(?P<uid>\d+) pid=(?P<pid>\d+) op=(?P<op>\S+) "
    r"(?:job=(?P<job>\d+) owner=(?P<owner>\S+)|target=(?P<target>\S+)) -> (?P<outcome>.*)"
)
SUMMARY = re.compile(
    r"audit: user=(?P<user>\S+) uid=(?P<uid>\d+) op=\S+ -> and (?P<count>[\d,]+) more "
    r"refusals in "
)


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to create Unix users and act as them")
    preload()


@pytest.fixture
def users() -> Iterator[dict[str, User]]:
    with temp_users("gbta", ["alice", "bob"], "admins", ["carol", "dave:primary"]) as made:
        yield made


def shared_head(users: dict[str, User], private_data: bool) -> Head:
    """A head other users reach (socket 666), admins by group membership."""
    base = Path(tempfile.mkdtemp(prefix="gbatch-multi-", dir="/tmp"))
    base.chmod(0o755)
    config = FAST_CONFIG + (
        f"socket_mode: '666'\nadmin_group: {users['admins'].name}\n"
        f"private_data: {'true' if private_data else 'false'}\n"
    )
    head = make_head(base / "home", config=config)
    head.home.chmod(0o711)  # others reach the socket, list nothing
    head.start()
    return head


def stop_and_remove(head: Head) -> None:
    head.stop()
    kill_leftover_jobs(head.home)
    # A killed job's shim may still write its exit record: remove again until gone.
    for _ in range(20):
        shutil.rmtree(head.home.parent, ignore_errors=True)
        if not head.home.parent.exists():
            return
        time.sleep(0.25)


@pytest.fixture
def open_head(users: dict[str, User]) -> Iterator[Head]:
    head = shared_head(users, private_data=False)
    yield head
    stop_and_remove(head)


@pytest.fixture
def private_head(users: dict[str, User]) -> Iterator[Head]:
    head = shared_head(users, private_data=True)
    yield head
    stop_and_remove(head)


def call(sock: Path, op: str, **args: Any) -> dict[str, Any]:
    """One raw request; a refusal comes back as {"refused": kind, "error": ...}."""
    try:
        with Client(sock) as client:
            return client.send({"op": op, **args})
    except RequestFailed as err:
        return {"refused": err.kind, "error": err.message}


def submit_jobs(head: Head, user: User) -> dict[str, int]:
    """As `user`: one running job, one held, one completed; each with a secret env
    value, and a log line naming its owner."""
    sock = head.home / "gbatchd.sock"
    secret = {"TOKEN": f"{user.name}-env-secret"}
    # The log line is made at run time: the command itself (readable by all) lacks it.
    say = f"printf '%s-%s\\n' {user.name} log-secret"

    def submit() -> dict[str, int]:
        ids = {}
        for key, command, held in (
            ("run", f"{say}; sleep 300", False),
            ("held", "true", True),
            ("done", say, False),
        ):
            spec = {"name": key, "command": ["sh", "-c", command], "gpus": 0, "env": secret}
            with Client(sock) as client:
                (ids[key],) = client.call(wire.Submit(spec=spec, held=held))["ids"]
        return ids

    ids: dict[str, int] = as_user(user, submit)
    head.wait_state(ids["run"], "RUNNING")
    head.wait_state(ids["done"], "COMPLETED")
    return ids


def snapshot(head: Head) -> dict[int, dict[str, Any]]:
    """Every job as root sees it (full spec, env values included)."""
    reply = call(head.home / "gbatchd.sock", "jobs", history=True)
    return {job["id"]: job for job in reply["jobs"]}


def audit_lines(head: Head) -> list[dict[str, str]]:
    text = (head.home / "gbatchd.log").read_text()
    return [m.groupdict() for m in AUDIT.finditer(text)]


def attack(home: Path, owner: User, jobs: dict[str, int], rounds: int) -> list[dict[str, Any]]:
    """Run in a child as the attacker: every action on every job of `owner`, through the
    CLI and as raw requests with forged identity, plus node and daemon requests. Each
    attempt: what was tried, the op and job the audit line must name, what came back."""
    sock = home / "gbatchd.sock"
    attempts: list[dict[str, Any]] = []
    for round_ in range(rounds):
        forged = FORGERIES[round_ % len(FORGERIES)](owner)
        for job_id in jobs.values():
            for action in ACTIONS:
                out = run_cli(home, *CLI_ARGV[action], str(job_id))
                attempts.append({"via": "cli", "op": action, "job": job_id, **out})
                ids: dict[str, Any] = {"id": job_id} if action == "logs" else {"ids": [job_id]}
                reply = call(sock, action, **ids, **forged)
                attempts.append({"via": "raw", "op": action, "job": job_id, "reply": reply})
            # Reading the job is allowed; reading its env values is not.
            out = run_cli(home, "scontrol", "show", "job", str(job_id), "--json")
            attempts.append({"via": "cli", "op": "job_env", "job": job_id, **out})
            reply = call(sock, "job", id=job_id, **forged)
            attempts.append({"via": "raw", "op": "job_env", "job": job_id, "reply": reply})
        for op, args, target in (
            ("shutdown", {}, "daemon"),
            ("node_drain", {"name": "local", "reason": "mine now"}, "node_local"),
            ("node_resume", {"name": "local"}, "node_local"),
        ):
            reply = call(sock, op, **args, **forged)
            attempts.append({"via": "raw", "op": op, "target": target, "reply": reply})
    for attempt in attempts:
        attempt["pid"] = os.getpid()
    return attempts


def succeeded(attempt: dict[str, Any], secrets: list[str]) -> bool:
    """Did the attempt get anything: an ok result, or a secret in what came back?"""
    shown = json.dumps(attempt)
    if any(secret in shown for secret in secrets):
        return True
    if attempt["op"] == "job_env":
        return False  # the record may be read; the secrets were checked above
    if attempt["via"] == "cli":
        return bool(attempt["rc"] == 0)
    reply = attempt["reply"]
    if "refused" in reply:
        return False
    if reply.get("done"):  # a request over jobs counts what it did, and lists failures
        return True
    return any(result.get("ok") for result in reply.get("results", [{"ok": True}]))


def test_other_users_are_refused_every_action_and_each_refusal_is_audited(
    open_head: Head, users: dict[str, User]
) -> None:
    alice, bob = users["alice"], users["bob"]
    jobs = {alice.name: submit_jobs(open_head, alice), bob.name: submit_jobs(open_head, bob)}
    before = snapshot(open_head)
    secrets = [f"{u.name}-{what}-secret" for u in (alice, bob) for what in ("env", "log")]

    attempts = []
    for attacker, owner in ((bob, alice), (alice, bob)):
        done = as_user(attacker, partial(attack, open_head.home, owner, jobs[owner.name], 3))
        for attempt in done:
            attempt["attacker"] = (attacker.name, str(attacker.uid))
        attempts += done

    assert len(attempts) >= 200
    assert [a for a in attempts if succeeded(a, secrets)] == []
    refusals = [a for a in attempts if a["op"] != "job_env"]
    for attempt in refusals:
        if attempt["via"] == "cli":
            assert attempt["rc"] != 0 and "Access/permission denied" in attempt["err"], attempt
            assert "Traceback" not in attempt["err"]
        else:
            reply = attempt["reply"]
            errors = [reply.get("error")] + [r.get("error") for r in reply.get("results", [])]
            assert any("ermission" in str(e) or "only root" in str(e) for e in errors), attempt
    # Reading a job's record is allowed, env names and command too; env values never.
    for attempt in (a for a in attempts if a["op"] == "job_env"):
        if attempt["via"] == "cli":
            assert attempt["rc"] == 0
            shown = json.loads(attempt["out"])
        else:
            shown = attempt["reply"]["job"]["spec"]
            assert shown["env"] == {"TOKEN": ""}
        assert "sh" in json.dumps(shown)

    assert snapshot(open_head) == before, "a refused attempt changed a job"

    # Every refusal is audited: a line naming who (user, uid and the pid that connected),
    # what and why, up to a user's budget per window (gbatch/head/refusals.py); the rest
    # are counted in one line once the window has ended.
    tried = Counter(a["attacker"] for a in attempts)

    def accounted() -> bool:
        text = (open_head.home / "gbatchd.log").read_text()
        told = Counter(
            (line["user"], line["uid"])
            for line in audit_lines(open_head)
            if line["outcome"].startswith("refused")
        )
        for match in SUMMARY.finditer(text):
            told[match["user"], match["uid"]] += int(match["count"].replace(",", ""))
        return told == tried

    wait_for(accounted, 60, "a line or a count for every refusal")
    lines = [line for line in audit_lines(open_head) if line["outcome"].startswith("refused")]
    expected = Counter(
        (*a["attacker"], str(a["pid"]), a["op"], str(a.get("job") or a["target"])) for a in attempts
    )
    logged = Counter(
        (line["user"], line["uid"], line["pid"], line["op"], line["job"] or line["target"])
        for line in lines
    )
    assert not logged - expected, "an audit line names no attempt"
    assert {line["outcome"] for line in lines} <= {
        "refused: not the owner",
        "refused: not an admin",
        "refused: env values withheld, not the owner",
    }
    for line in (line for line in lines if line["job"]):
        owner_name = next(o for o, ids in jobs.items() if int(line["job"]) in ids.values())
        assert line["owner"] == owner_name


def test_admin_group_members_may_act_on_any_job(open_head: Head, users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    carol, dave = users["carol"], users["dave"]  # supplementary and primary members
    theirs = {alice.name: submit_jobs(open_head, alice), bob.name: submit_jobs(open_head, bob)}
    a_jobs, b_jobs = theirs[alice.name], theirs[bob.name]
    home = open_head.home

    def as_carol() -> list[dict[str, Any]]:
        return [
            run_cli(home, "scontrol", "hold", str(a_jobs["held"])),
            run_cli(home, "scontrol", "release", str(a_jobs["held"])),
            run_cli(home, "logs", str(a_jobs["done"])),
            run_cli(home, "scontrol", "requeue", str(a_jobs["done"])),
            {"job": call(home / "gbatchd.sock", "job", id=a_jobs["run"])},
        ]

    *acted, shown = as_user(carol, as_carol)
    assert [each["rc"] for each in acted] == [0, 0, 0, 0], acted
    assert f"{alice.name}-log-secret" in acted[2]["out"]
    assert shown["job"]["job"]["spec"]["env"] == {"TOKEN": f"{alice.name}-env-secret"}
    open_head.wait_state(a_jobs["held"], "COMPLETED")  # released, it ran
    events = call(home / "gbatchd.sock", "job", id=a_jobs["done"])["events"]
    assert f"requeued by {carol.name}" in [event["reason"] for event in events]

    def as_dave() -> list[dict[str, Any]]:
        return [
            run_cli(home, "scancel", str(b_jobs["run"])),
            run_cli(home, "node", "drain", "local", "--reason", "maintenance"),
            run_cli(home, "node", "resume", "local"),
        ]

    cancel, drain, resume = as_user(dave, as_dave)
    assert [cancel["rc"], drain["rc"], resume["rc"]] == [0, 0, 0], (cancel, drain, resume)
    open_head.wait_state(b_jobs["run"], "CANCELLED")
    admins = {users["carol"].name, users["dave"].name}
    refused = [line for line in audit_lines(open_head) if line["outcome"].startswith("refused")]
    assert [line for line in refused if line["user"] in admins] == []


def test_private_data_shows_each_user_only_their_own_jobs(
    private_head: Head, users: dict[str, User]
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    a_jobs = submit_jobs(private_head, alice)
    b_jobs = submit_jobs(private_head, bob)
    home = private_head.home
    sock = home / "gbatchd.sock"
    missing = max(*a_jobs.values(), *b_jobs.values()) + 1000
    before = snapshot(private_head)

    def as_bob() -> dict[str, Any]:
        return {
            "squeue": run_cli(home, "squeue", "--json"),
            "sacct_all": run_cli(home, "sacct", "-a", "--json"),
            "sacct_alice": run_cli(home, "sacct", "-u", alice.name, "--json"),
            "raw_jobs": call(sock, "jobs", history=True, users=[alice.name], uid=alice.uid),
            "show": run_cli(home, "scontrol", "show", "job", str(a_jobs["run"])),
            "show_missing": run_cli(home, "scontrol", "show", "job", str(missing)),
            "logs": run_cli(home, "logs", str(a_jobs["done"])),
            "cancel": run_cli(home, "scancel", str(a_jobs["run"])),
            "hold": run_cli(home, "scontrol", "hold", str(a_jobs["run"])),
            "release": run_cli(home, "scontrol", "release", str(a_jobs["held"])),
            "requeue": run_cli(home, "scontrol", "requeue", str(a_jobs["done"])),
            "raw_job": call(sock, "job", id=a_jobs["run"], user=alice.name, uid=alice.uid),
        }

    seen = as_user(bob, as_bob)
    assert {j["job_id"] for j in json.loads(seen["squeue"]["out"])["jobs"]} == {
        b_jobs["run"],
        b_jobs["held"],
    }
    for key in ("sacct_all", "sacct_alice"):
        listed = {j["job_id"] for j in json.loads(seen[key]["out"])["jobs"]}
        assert listed <= set(b_jobs.values()) and not listed & set(a_jobs.values()), key
    assert seen["raw_jobs"]["jobs"] == []
    # Another user's job answers exactly as a job that does not exist.
    assert seen["show"]["rc"] == seen["show_missing"]["rc"] == 1
    assert seen["show"]["err"] == seen["show_missing"]["err"].replace(
        str(missing), str(a_jobs["run"])
    )
    assert seen["logs"]["err"].endswith(f"Invalid job id specified: {a_jobs['done']}\n")
    for key in ("cancel", "hold", "release", "requeue"):
        assert seen[key]["rc"] != 0 and "Invalid job id specified" in seen[key]["err"], key
    assert seen["raw_job"] == {
        "refused": "not_found",
        "error": f"Invalid job id specified: {a_jobs['run']}",
    }
    assert f"{alice.name}-" not in json.dumps(seen)
    assert snapshot(private_head) == before

    lines = [line for line in audit_lines(private_head) if line["user"] == bob.name]
    assert sorted(line["op"] for line in lines) == sorted(
        ["job", "logs", "cancel", "hold", "release", "requeue", "job"]
    )
    assert {line["outcome"] for line in lines} == {
        "refused: not the owner (private_data: not found)"
    }

    # An admin still sees everyone's jobs.
    squeue = as_user(carol, lambda: run_cli(home, "squeue", "--json"))
    listed = {j["job_id"] for j in json.loads(squeue["out"])["jobs"]}
    assert listed == {a_jobs["run"], a_jobs["held"], b_jobs["run"], b_jobs["held"]}
