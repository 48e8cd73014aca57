"""Identity comes from the socket (SO_PEERCRED): only a job's owner and root act on it.

The other user here is `nobody`, speaking to the daemon from a forked process that
dropped to nobody's uid (the venv's interpreter under /root is not theirs to run).
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Head, require_root

from gbatch.protocol import wire
from gbatch.protocol.client import Client, RequestFailed


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to act as another user")


NOBODY = pwd.getpwnam("nobody")


def as_nobody(socket_path: Path, action: Callable[[Client], Any]) -> Any:
    """Run `action` with a client connected as nobody; return its result or error."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges for good, then speak to the daemon
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            with Client(socket_path) as client:
                outcome = {"ok": action(client)}
        except RequestFailed as err:
            outcome = {"refused": err.kind, "error": err.message}
        except BaseException as err:
            outcome = {"crash": repr(err)}
        os.write(write_end, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_another_user_can_neither_cancel_hold_nor_read_the_logs_of_my_job(
    shared_head: Head,
) -> None:
    sock = shared_head.home / "gbatchd.sock"
    job_id = shared_head.sbatch("--wrap", "echo secret; sleep 30")
    shared_head.wait_state(job_id, "RUNNING")

    cancel = as_nobody(sock, lambda c: c.call(wire.Cancel(ids=(job_id,)))["results"])
    assert cancel == {
        "ok": [{"id": job_id, "ok": False, "error": f"Access/permission denied for job {job_id}"}]
    }
    hold = as_nobody(sock, lambda c: c.call(wire.Hold(ids=(job_id,)))["results"][0]["ok"])
    assert hold == {"ok": False}
    logs = as_nobody(sock, lambda c: c.call(wire.ReadLog(id=job_id, offset=0)))
    assert logs["refused"] == "permission" and "secret" not in json.dumps(logs)
    stop = as_nobody(sock, lambda c: c.call(wire.Shutdown()))
    assert stop["refused"] == "permission"
    drain = as_nobody(sock, lambda c: c.call(wire.DrainNode(name="local", reason="mine now")))
    assert drain["refused"] == "permission"
    # Everyone sees the queue, as in Slurm.
    listed = as_nobody(sock, lambda c: [j["id"] for j in c.call(wire.ListJobs())["jobs"]])
    assert listed == {"ok": [job_id]}

    assert shared_head.state(job_id) == "RUNNING"
    audit = (shared_head.home / "gbatchd.log").read_text()
    who = f"audit: user=nobody uid={NOBODY.pw_uid} pid="
    for what in ("cancel", "hold", "logs"):
        assert f" op={what} job={job_id} owner=root -> refused: not the owner" in audit
    assert " op=shutdown target=daemon -> refused: not an admin" in audit
    assert " op=node_drain target=node_local -> refused: not an admin" in audit
    assert audit.count(who) == 5
    shared_head.run("scancel", str(job_id), check=True)
    shared_head.wait_state(job_id, "CANCELLED")


def test_the_owner_is_whoever_connects_not_who_the_request_claims(shared_head: Head) -> None:
    sock = shared_head.home / "gbatchd.sock"
    spec = {"name": "forged", "command": ["true"], "gpus": 0}
    forged = {"op": "submit", "spec": spec, "held": True, "uid": 0, "user": "root"}
    submitted = as_nobody(sock, lambda c: c.send(forged)["ids"])
    (job_id,) = submitted["ok"]
    job = shared_head.job(job_id)
    assert (job["user"], job["uid"]) == ("nobody", NOBODY.pw_uid)
    # The owner may cancel their own job.
    cancelled = as_nobody(sock, lambda c: c.call(wire.Cancel(ids=(job_id,))))
    assert cancelled == {"ok": {"results": [], "done": 1, "failed": 0}}
    shared_head.wait_state(job_id, "CANCELLED")


def test_root_may_cancel_another_users_job(shared_head: Head) -> None:
    sock = shared_head.home / "gbatchd.sock"
    spec = {"name": "theirs", "command": ["true"], "gpus": 0}
    (job_id,) = as_nobody(sock, lambda c: c.call(wire.Submit(spec=spec, held=True))["ids"])["ok"]
    assert shared_head.run("scancel", str(job_id)).returncode == 0
    shared_head.wait_state(job_id, "CANCELLED")
