"""Who an admin may mint API tokens for, on a root daemon with real throw-away users
(issue 29, finding 3): a member of `admin_group` minted `gbatch token --user gbatch`
(the daemon's own service user) and submitted `cat $GBATCH_HOME/id_ed25519` as it.

Now only an account listed under `service_accounts:` gets another's token, and its job
runs as that account; the daemon's user (root here; the system deployment's is in
test_system_mode.py), a system account (uid below UID_MIN), nobody and a person are
refused with one line and exit 4, and every such mint leaves an audit line. No other
path lets an admin act as another account: not scontrol update, not a submit option.

Users and the admin group are made with useradd/groupadd per run and removed after.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, Head, require_root, shared_home

from gbatch.protocol.client import Client
from gbatch.site.accounts import login_uid_min


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to create Unix users and act as them")
    preload()


@pytest.fixture
def users() -> Iterator[dict[str, User]]:
    with temp_users("gbtk", ["bob", "svc"], "admins", ["carol"]) as made:
        yield made


@pytest.fixture
def head(users: dict[str, User]) -> Iterator[Head]:
    config = FAST_CONFIG + (
        "socket_mode: '666'\n"
        f"admin_group: {users['admins'].name}\n"
        f"service_accounts: [{users['svc'].name}]\n"
    )
    with shared_home("gbatch-tokens-", config) as made:
        made.start()
        yield made


def cli(head: Head, user: User, *argv: str) -> dict[str, Any]:
    out: dict[str, Any] = as_user(user, partial(run_cli, head.home, *argv))
    return out


def system_account() -> str:
    """An account of this system below UID_MIN (not root): daemon, bin, ..."""
    low = sorted(
        (entry.pw_uid, entry.pw_name)
        for entry in pwd.getpwall()
        if 0 < entry.pw_uid < login_uid_min()
    )
    if not low:
        pytest.skip("this system has no system account but root")
    return low[0][1]


def test_an_admin_mints_only_for_a_listed_service_account_and_its_job_runs_as_it(
    head: Head, users: dict[str, User]
) -> None:
    carol, bob, svc = users["carol"], users["bob"], users["svc"]
    system = system_account()
    fix = (
        "Mint tokens for a robot's own account: create one (useradd -M -s /usr/sbin/nologin "
        "NAME) and list it under service_accounts in gbatchd's config.yaml\n"
    )
    refused = {
        bob.name: f"gbatch token: error: --user {bob.name}: no tokens for {bob.name} but its "
        "own: it is not listed in service_accounts (a person's account, or a typo). A person "
        "mints their own with `gbatch token`; for a robot's account, list it under "
        "service_accounts in gbatchd's config.yaml\n",
        system: f"gbatch token: error: --user {system}: no tokens for {system}: it is a "
        f"system account (uid {pwd.getpwnam(system).pw_uid} is below UID_MIN "
        f"{login_uid_min()} of /etc/login.defs). {fix}",
        "nobody": "gbatch token: error: --user nobody: no tokens for nobody: it is a system "
        f"account (uid 65534, the overflow user nobody). {fix}",
        # The daemon's own user: this daemon runs as root.
        "root": "gbatch token: error: no tokens for root: a leaked token would run jobs as "
        "root. Mint one for a service account with --user NAME\n",
    }
    for name, error in refused.items():
        out = cli(head, carol, "token", "--user", name)
        assert (out["rc"], out["out"], out["err"]) == (4, "", error), name
    # A person's own token still works: bob mints for himself.
    assert cli(head, bob, "token", "--scope", "read")["rc"] == 0

    minted = cli(head, carol, "token", "--user", svc.name, "--scope", "submit,read")
    assert minted["rc"] == 0, minted
    token = minted["out"].strip()
    # The attack's job: who it runs as, and whether it reads gbatchd's files.
    spy = f"id -un; cat {head.home}/gbatchd.log >/dev/null 2>&1 && echo READ || echo DENIED"
    spec = {"name": "who", "command": ["sh", "-c", spy], "gpus": 0, "workdir": "/tmp"}
    with Client(head.home / "gbatchd.sock") as client:
        reply = client.send(
            {"op": "with_token", "token": token, "request": {"op": "submit", "spec": spec}}
        )
    (job_id,) = reply["ids"]
    job = head.wait_state(job_id, "COMPLETED")
    assert (job["user"], job["uid"]) == (svc.name, svc.uid)
    assert head.run("logs", str(job_id), check=True).stdout == f"{svc.name}\nDENIED\n"

    log = (head.home / "gbatchd.log").read_text()
    who = f"audit: user={carol.name} uid={carol.uid} "
    assert f"op=token target=user_{svc.name} -> allowed: jti " in log
    assert ", a service account" in log
    for name, why in (
        (bob.name, "it is not listed in service_accounts"),
        (system, "it is a system account"),
        ("nobody", "it is a system account"),
        ("root", "root"),
    ):
        lines = [line for line in log.splitlines() if f"{who}" in line and f"=user_{name} " in line]
        assert len(lines) == 1, (name, lines)
        assert f"-> refused: {why}" in lines[0], lines[0]


def test_no_other_path_lets_an_admin_act_as_another_account(
    head: Head, users: dict[str, User]
) -> None:
    """Neither scontrol update nor a submit option changes whose a job is."""
    carol, svc = users["carol"], users["svc"]
    out = cli(head, carol, "sbatch", "--parsable", "--hold", "--wrap", "id -un")
    assert out["rc"] == 0, out
    job_id = int(out["out"])
    for key in ("UserId", "User", "Uid"):
        changed = cli(head, carol, "scontrol", "update", f"JobId={job_id}", f"{key}={svc.name}")
        assert changed["rc"] == 2 and f"{key}: not a key gbatch updates" in changed["err"]
    for option in ("--uid", "--user"):
        submitted = cli(head, carol, "sbatch", option, svc.name, "--wrap", "id -un")
        assert submitted["rc"] == 2, (option, submitted)
    # A raw request naming another owner is read as the caller's own.
    spec = {"name": "x", "command": ["true"], "gpus": 0, "user": svc.name, "uid": svc.uid}
    forged = as_user(carol, partial(_raw_submit, head, spec))
    assert forged == "invalid"
    assert head.job(job_id)["user"] == carol.name


def _raw_submit(head: Head, spec: dict[str, Any]) -> str:
    from gbatch.protocol.client import RequestFailed

    try:
        with Client(head.home / "gbatchd.sock") as client:
            client.send({"op": "submit", "spec": spec, "user": spec["user"], "uid": spec["uid"]})
    except RequestFailed as err:
        return err.kind
    return "queued"


def test_a_service_account_the_daemon_could_not_let_anyone_hold_stops_it_at_start(
    users: dict[str, User],
) -> None:
    for listed, said in (
        ("root", "(root: it is root"),
        ("nobody", "(nobody: it is a system account"),
        (users["bob"].name + "x", "is none: create it with useradd"),
    ):
        config = FAST_CONFIG + f"service_accounts: [{listed}]\n"
        with shared_home("gbatch-tokens-", config) as made:
            out = made.run("daemon", "run")
        assert out.returncode == 2, out
        assert "config.yaml: service_accounts: " in out.stderr and said in out.stderr
