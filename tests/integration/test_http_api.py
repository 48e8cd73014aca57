"""The HTTP API end to end: a real gbatchd, `gbatch api serve` on 127.0.0.1 (a free
port), a token minted with the real CLI, and urllib as the CI pipeline's curl."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    FAST_CONFIG,
    GBATCH,
    Head,
    is_gone,
    make_head,
    require_root,
    service_config,
    shared_home,
    token_account,
    wait_for,
)

SCRIPT = """#!/bin/bash
#SBATCH -J from-ci
#SBATCH --hold
echo hello from the API
"""


def token_user() -> str:
    """Root mints for a service account its heads list (root gets no tokens); anyone else
    for themselves (a daemon not run by root runs only its own user's bare jobs)."""
    return token_account()


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    # A short leeway, so that an expired token is seen expired within a second.
    config = FAST_CONFIG + "token_leeway_seconds: 0.2\n" + service_config()
    h = make_head(tmp_path / "home", config=config)
    h.start()
    yield h
    h.stop()


@pytest.fixture
def api(head: Head) -> Iterator[str]:
    with serve_api(head) as url:
        yield url


@contextlib.contextmanager
def serve_api(head: Head, *options: str) -> Iterator[str]:
    """`gbatch api serve` for `head` on a free port of 127.0.0.1 with `options` (its
    command-line options): its base URL (https:// with --tls-cert)."""
    process = subprocess.Popen(
        [*GBATCH, "api", "serve", "--listen", "127.0.0.1:0", *options],
        env=head.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once it listens
        assert "gbatch API on http" in line, process.stderr and process.stderr.read()
        yield line.split()[3]
    finally:
        process.terminate()
        process.wait(timeout=30)


def http(
    url: str,
    method: str = "GET",
    token: str | None = None,
    body: str | None = None,
    content_type: str = "text/x-shellscript",
) -> tuple[int, dict[str, object], str]:
    """(status, the JSON reply, its raw text)."""
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else body.encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read().decode()
            return reply.status, json.loads(text), text
    except urllib.error.HTTPError as err:
        text = err.read().decode()
        return err.code, json.loads(text), text


def mint(head: Head, *args: str) -> str:
    return head.run("token", "--user", token_user(), *args, check=True).stdout.strip()


def queue(head: Head) -> list[dict[str, object]]:
    jobs: list[dict[str, object]] = json.loads(head.run("squeue", "--json", check=True).stdout)[
        "jobs"
    ]
    return jobs


def test_a_ci_pipeline_submits_with_a_token_and_the_job_is_its_users(head: Head, api: str) -> None:
    token = mint(head, "--lifespan", "2h", "--scope", "submit,read")
    status, reply, _ = http(f"{api}/jobs", "POST", token, SCRIPT)
    assert status == 201, reply
    job_id = reply["job_id"]
    (listed,) = queue(head)
    assert listed["job_id"] == job_id
    assert listed["user"] == token_user()
    assert listed["name"] == "from-ci"
    status, shown, _ = http(f"{api}/jobs/{job_id}", token=token)
    assert status == 200 and shown["job"]["user"] == token_user()  # type: ignore[index]
    assert [e["state"] for e in shown["events"]] == ["PENDING"]  # type: ignore[attr-defined]
    status, listing, _ = http(f"{api}/jobs?user={token_user()}", token=token)
    assert [j["id"] for j in listing["jobs"]] == [job_id]  # type: ignore[attr-defined]
    # A YAML job file and its JSON form go the same way.
    yaml_job = "command: echo yaml\nname: y\nhold: true\n"
    status, reply, _ = http(f"{api}/jobs", "POST", token, yaml_job, "application/yaml")
    assert status == 400 and "hold" in str(reply["error"])  # a key sbatch refuses too
    json_job = json.dumps({"command": "echo json", "name": "j"})
    status, reply, _ = http(f"{api}/jobs", "POST", token, json_job, "application/json")
    assert status == 201, reply
    status, listing, _ = http(f"{api}/jobs?history=true&name=j", token=token)
    assert [(j["id"], j["user"]) for j in listing["jobs"]] == [  # type: ignore[attr-defined]
        (reply["job_id"], token_user())
    ]
    status, doc, _ = http(f"{api}/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"


def test_the_job_list_comes_in_pages_and_as_columns(head: Head, api: str) -> None:
    token = mint(head, "--scope", "submit,read")
    later = json.dumps({"command": "true", "name": "p", "begin": "2099-01-01T00:00:00"})
    ids = [
        http(f"{api}/jobs", "POST", token, later, "application/json")[1]["job_id"] for _ in "abc"
    ]
    seen: list[int] = []
    after = ""
    while True:
        status, page, _ = http(f"{api}/jobs?limit=2{after}", token=token)
        assert status == 200, page
        seen += [j["id"] for j in page["jobs"]]  # type: ignore[attr-defined]
        if page["next"] is None:
            break
        after = f"&after={page['next']}"
    assert seen == ids
    status, page, _ = http(f"{api}/jobs?format=columns&after={ids[0]}", token=token)
    assert status == 200, page
    columns = page["columns"]
    assert columns["id"] == ids[1:]  # type: ignore[index]
    assert columns["user"] == [token_user()] * 2  # type: ignore[index]
    assert [columns["specs"][i]["name"] for i in columns["spec"]] == ["p", "p"]  # type: ignore[index]
    for bad in ("limit=0", "limit=x", "after=-1", "format=xml"):
        status, reply, _ = http(f"{api}/jobs?{bad}", token=token)
        assert status == 400 and reply["kind"] == "invalid", bad


def test_bad_tokens_get_401_or_403_in_one_json_line_and_nothing_is_queued(
    head: Head, api: str
) -> None:
    good = mint(head, "--scope", "submit")
    reader = mint(head, "--scope", "read")
    short = mint(head, "--lifespan", "1s", "--scope", "read")
    header, payload, signature = good.split(".")
    tampered = f"{header}.{payload}.{signature[:-4]}AAAA"
    cases = {
        "missing": (None, 401),
        "tampered": (tampered, 401),
        "garbage": ("not-a-token", 401),
        "out of scope": (reader, 403),
    }
    for what, (token, expected) in cases.items():
        status, reply, text = http(f"{api}/jobs", "POST", token, SCRIPT)
        assert status == expected, (what, reply)
        assert reply["ok"] is False and reply["kind"] in ("unauthenticated", "permission")
        assert text.count("\n") <= 1, what  # one JSON line
    wait_for(
        lambda: http(f"{api}/jobs", token=short)[0] == 401,
        timeout=10,
        what="the 1 s token to expire",
    )
    status, reply, _ = http(f"{api}/jobs", token=short)
    assert reply["kind"] == "unauthenticated" and "expired" in str(reply["error"])
    # The reader may read but not cancel; nothing was queued by any refused request.
    assert queue(head) == []
    status, reply, _ = http(f"{api}/jobs", token=reader)
    assert status == 200 and reply["jobs"] == []
    # A revoked token is refused from then on.
    (entry,) = [
        line.split()[0]
        for line in head.run("token", "--list", "--all", check=True).stdout.splitlines()[1:]
        if "submit" in line.split()[2] and "read" not in line.split()[2]
    ]
    head.run("token", "--revoke", entry, check=True)
    status, reply, _ = http(f"{api}/jobs", "POST", good, SCRIPT)
    assert status == 401 and "revoked" in str(reply["error"])
    assert queue(head) == []


def test_the_daemons_audit_log_names_the_token_of_each_request(head: Head, api: str) -> None:
    token = mint(head, "--scope", "read")
    http(f"{api}/jobs", "POST", token, SCRIPT)
    log = (head.home / "gbatchd.log").read_text()
    assert "via=token:" in log and "refused: token lacks scope submit" in log


def sse_events(url: str, token: str) -> Iterator[tuple[str, dict[str, object]]]:
    """(event, its JSON data) as each arrives on a text/event-stream."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        name = ""
        for raw in reply:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                yield name, json.loads(line.removeprefix("data: "))


def test_a_log_is_followed_over_sse_as_it_grows_until_the_job_ends(
    head: Head, api: str, tmp_path: Path
) -> None:
    # The job writes a line, then waits for the test to have seen it: what comes after
    # can only arrive by following. The go-file sits where the job's user can see it.
    gate = Path(tempfile.mkdtemp(prefix="gbatch-sse-"))
    gate.chmod(0o755)
    go = gate / "go"
    job = json.dumps(
        {
            "name": "follow-me",
            "workdir": "/tmp",
            "command": f"echo first; while [ ! -e {go} ]; do sleep 0.1; done; "
            "printf 'second\\r\\n'; echo third; exit 3",
        }
    )
    token = mint(head, "--scope", "submit,read")
    status, reply, _ = http(f"{api}/jobs", "POST", token, job, "application/json")
    assert status == 201, reply
    seen = ""
    states: list[str] = []
    events = sse_events(f"{api}/jobs/{reply['job_id']}/logs/follow", token)
    try:
        for name, data in events:
            if name == "log":
                seen += str(data["data"])
                if seen == "first\n":
                    assert data["state"] == "RUNNING"
                    go.touch()
            elif name == "end":
                assert data["state"] == "FAILED"  # exit 3
                break
            elif name == "state":
                states.append(str(data["state"]))
            else:
                raise AssertionError(f"unexpected event {name}: {data}")
    finally:
        shutil.rmtree(gate)
    assert seen == "first\nsecond\r\nthird\n"
    # Before it runs, a poll may catch the job PENDING or CONFIGURING (its allocation
    # committed, its start not yet confirmed), in that order.
    assert states[-2:] == ["RUNNING", "FAILED"]
    assert states[:-2] == sorted(states[:-2], key=["PENDING", "CONFIGURING"].index)
    # From an offset (an EventSource's Last-Event-ID): the rest only, then the end.
    rest = list(sse_events(f"{api}/jobs/{reply['job_id']}/logs/follow?offset=6", token))
    assert rest == [
        ("state", {"state": "FAILED"}),
        ("log", {"data": "second\r\nthird\n", "offset": len(seen), "state": "FAILED"}),
        ("end", {"state": "FAILED", "offset": len(seen)}),
    ]


def test_following_a_log_without_a_token_or_of_no_job_is_a_json_error(head: Head, api: str) -> None:
    status, reply, _ = http(f"{api}/jobs/1/logs/follow")
    assert status == 401 and reply["kind"] == "unauthenticated"
    status, reply, _ = http(f"{api}/jobs/999/logs/follow", token=mint(head, "--scope", "read"))
    assert status == 404 and reply["kind"] == "not_found"


def test_a_followed_log_goes_on_across_a_daemon_restart_without_loss_or_repeat(
    head: Head, api: str
) -> None:
    # The job counts until the test has seen the daemon come back: lines written while
    # gbatchd was down must arrive once each, after it.
    gate = Path(tempfile.mkdtemp(prefix="gbatch-sse-"))
    gate.chmod(0o755)
    go = gate / "go"
    job = json.dumps(
        {
            "name": "outlives-gbatchd",
            "workdir": "/tmp",
            "command": f"i=0; while [ ! -e {go} ]; do echo tick $i; i=$((i+1)); sleep 0.05; "
            "done; echo last",
        }
    )
    token = mint(head, "--scope", "submit,read")
    status, reply, _ = http(f"{api}/jobs", "POST", token, job, "application/json")
    assert status == 201, reply
    job_id = int(str(reply["job_id"]))
    seen = ""
    restarted_at: int | None = None
    try:
        for name, data in sse_events(f"{api}/jobs/{job_id}/logs/follow", token):
            assert name in ("state", "log", "end"), (name, data)
            if name == "log":
                seen += str(data["data"])
                if restarted_at is None and "tick 3\n" in seen:
                    pid = head.daemon_pid()
                    head.stop()
                    wait_for(lambda pid=pid: is_gone(pid), what="gbatchd to stop")
                    head.start()
                    restarted_at = len(seen)
                elif restarted_at is not None and len(seen) > restarted_at:
                    go.touch()  # something came after the restart
            elif name == "end":
                assert data["state"] == "COMPLETED"
                break
    finally:
        shutil.rmtree(gate)
    assert restarted_at is not None
    lines = seen.splitlines()
    assert lines[-1] == "last"
    assert lines[:-1] == [f"tick {i}" for i in range(len(lines) - 1)]  # no gap, no repeat
    assert seen == head.run("logs", str(job_id), check=True).stdout


def test_another_users_job_is_refused_over_http_in_the_words_of_the_socket() -> None:
    """The daemon authorizes both: a token's cancel or hold of another user's job gets
    the refusal that user's own CLI gets over the socket."""
    require_root("to act as another user on the socket")
    from asuser import User, as_user, preload, run_cli

    config = FAST_CONFIG + "socket_mode: '666'\n" + service_config()
    with shared_home("gbatch-shared-", config) as shared_head:
        shared_head.start()
        job = shared_head.sbatch("--hold", "--wrap", "echo mine", "-D", "/tmp")  # root's
        token = mint(shared_head, "--scope", "read,control")  # the service account's
        with serve_api(shared_head) as url:
            over_http = {}
            for action in ("cancel", "hold"):
                status, reply, _ = http(f"{url}/jobs/{job}/{action}", "POST", token)
                assert status == 409, reply
                over_http[action] = reply["results"][0]["error"]  # type: ignore[index]
        bot = pwd.getpwnam(token_user())
        preload()
        home = shared_head.home
        over_socket = as_user(
            User(bot.pw_name, bot.pw_uid, bot.pw_gid),
            lambda: {
                "cancel": run_cli(home, "scancel", str(job)),
                "hold": run_cli(home, "scontrol", "hold", str(job)),
            },
        )
        for action, error in over_http.items():
            assert over_socket[action]["rc"] == 1, over_socket[action]
            assert over_socket[action]["err"].endswith(f": {error}\n"), (action, error)
        assert shared_head.job(job)["state"] == "PENDING"


UNI = """partitions:
  - name: gpu
    nodes: [local]
    default: true
  - name: uni
    slurm:
      login: 127.0.0.1
      port: 1
      identity: per_user
"""


def test_cluster_status_over_http_is_the_bearers_own_as_gbatch_cluster_status_shows_it(
    tmp_path: Path,
) -> None:
    """GET /cluster is the request `gbatch cluster status` sends, as the token's user: the
    cluster partitions, and that user's links alone (everyone's, `all=1`, for admins)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "inventory.yaml").write_text(UNI)
    head = make_head(home, config=FAST_CONFIG + service_config())
    head.start()
    try:
        head.run("cluster", "link", "uni", "--login", "ab123", check=True)  # the socket's user
        me = pwd.getpwuid(os.getuid()).pw_name
        token = mint(head, "--scope", "read")
        with serve_api(head) as url:
            status, reply, _ = http(f"{url}/cluster", token=token)
            everyone, all_reply, _ = http(f"{url}/cluster?all=1", token=token)
            no_token, _, _ = http(f"{url}/cluster")
        assert status == 200, reply
        (uni,) = reply["partitions"]  # type: ignore[misc]
        assert (uni["name"], uni["identity"], uni["login"]) == ("uni", "per_user", "127.0.0.1:1")
        users = {link["user"] for link in reply["links"]}  # type: ignore[attr-defined]
        if token_user() == me:  # the daemon's own user: their link, and an admin
            assert users == {me} and everyone == 200
        else:  # root's link is not the service account's to see, nor everyone's
            assert users == set() and everyone == 403, all_reply
            assert all_reply["kind"] == "permission"
        assert no_token == 401
        cli = head.run("cluster", "status", check=True).stdout
        assert "uni" in cli and "ab123" in cli
    finally:
        head.stop()
