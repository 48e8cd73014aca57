"""Per-user identity on a partition backed by a real Slurm cluster (issue 34), end to end.

A root head other users submit to (socket_mode 666), two real Unix users of the lab
(useradd), and the cluster: a container of gbatch-slurm-host (tests/images/
build-slurm-host-image.sh) with two logins of its own, `ab123` and `bb456`. Each lab
user links their login with `gbatch cluster link uni --login NAME` and puts the public
key it prints in that login's authorized_keys on the cluster, as a person would; their
jobs then run there as that login (`id -un`). A root caller with no link is refused at
submit; a key removed from authorized_keys breaks that user's link (cluster status
says so, their job waits saying why, they are mailed and the admins' webhook told) and a
relink mends it; the login node paused takes the partition down and back, each told to
the webhook once.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, Head, require_root, shared_home, wait_for
from dockerenv import REPO_ROOT
from hosts import Host, ensure_host_image, start_host
from test_notifications import Inbox, smtp_server

pytestmark = pytest.mark.docker

SLURM_IMAGE = "gbatch-slurm-host:latest"
SLURM_BUILD = REPO_ROOT / "tests" / "images" / "build-slurm-host-image.sh"
LOGINS = {"alice": "ab123", "bob": "bb456"}  # lab user -> their login on the cluster


class Hooks(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Lab:
    head: Head
    cluster: Host
    users: dict[str, User]
    inbox: Inbox
    hooked: list[dict[str, Any]]  # the admins' webhook's events, as posted

    def told(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.hooked if event.get("kind") == kind]

    def gbatch(self, who: str, *argv: str) -> dict[str, Any]:
        """`gbatch ARGV` as lab user `who`: {"rc", "out", "err"}."""
        home = self.head.home
        result: dict[str, Any] = as_user(self.users[who], lambda: run_cli(home, *argv))
        return result

    def sbatch(self, who: str, *argv: str) -> int:
        done = self.gbatch(who, "sbatch", "--parsable", "-p", "uni", "-D", "/tmp", *argv)
        assert done["rc"] == 0, done["err"]
        return int(done["out"])

    def there(self, *argv: str, stdin: str | None = None) -> str:
        """A command on the cluster's node, as root there."""
        return subprocess.run(
            ["docker", "exec", "-i", self.cluster.container.get_container_id(), *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout

    def link(self, who: str) -> str:
        """`gbatch cluster link` as `who`, and its public key put where sshd reads it."""
        login = LOGINS[who]
        done = self.gbatch(who, "cluster", "link", "uni", "--login", login)
        assert done["rc"] == 0, done["err"]
        public = done["out"].strip()
        assert public.startswith("ssh-ed25519 ") and len(done["out"].splitlines()) == 1
        self.there(
            "sh",
            "-c",
            f"cat > /home/{login}/.ssh/authorized_keys && chown {login} "
            f"/home/{login}/.ssh/authorized_keys",
            stdin=public + "\n",
        )
        return public

    def cluster_users(self) -> dict[str, str]:
        """The cluster's own view: job name -> the login it ran as."""
        out = self.there("squeue", "-h", "--states=all", "-o", "%j|%u")
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def _inventory(path: Path, cluster: Host) -> Path:
    known_hosts = path / "known_hosts"
    known_hosts.write_text(cluster.known_hosts.read_text())
    inventory = path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "known_hosts": str(known_hosts),
                "partitions": [
                    {"name": "gpu", "nodes": ["local"], "default": True},
                    {
                        "name": "uni",
                        "slurm": {
                            "login": "127.0.0.1",
                            "port": cluster.port,
                            "identity": "per_user",
                            "connect_timeout": 2,
                            "partition": "gpu",
                        },
                    },
                ],
            }
        )
    )
    return inventory


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_root("to make users and run a root daemon for them")
    preload()
    ensure_host_image()
    image = ensure_host_image(SLURM_IMAGE, SLURM_BUILD)
    tmp_path = tmp_path_factory.mktemp("slurm-identity")
    hooked: list[dict[str, Any]] = []
    hooks = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Recorder", (Hooks,), {"received": hooked})
    )
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    smtp, inbox = smtp_server()
    config = (
        f"{FAST_CONFIG}socket_mode: '666'\nsmtp_host: 127.0.0.1\nsmtp_port: {smtp.port}\n"
        "mail_domain: lab.test\nnotify_retry_seconds: 0.2\n"
        f"webhooks: [{{name: ops, url: 'http://127.0.0.1:{hooks.server_address[1]}/hook',"
        " events: [CLUSTER_LINK, PARTITION_DOWN, PARTITION_UP]}]\n"
    )
    cluster = start_host(tmp_path, "uni-login", image=image, user="labsvc")
    try:
        with (
            temp_users("gbsi", list(LOGINS)) as users,
            shared_home("gbatch-ident-", config=config) as head,
        ):
            lab = Lab(head, cluster, users, inbox, hooked)
            for login in LOGINS.values():
                lab.there("useradd", "-m", "-s", "/bin/sh", "-p", "*", login)
                lab.there("install", "-d", "-o", login, "-m", "0700", f"/home/{login}/.ssh")
            head.env["GBATCH_INVENTORY"] = str(_inventory(tmp_path, cluster))
            head.start()
            yield lab
    finally:
        cluster.stop()
        smtp.stop()
        hooks.shutdown()
        hooks.server_close()


def _log(lab: Lab, who: str, job_id: int) -> str:
    done = lab.gbatch(who, "logs", str(job_id))
    assert done["rc"] == 0, done["err"]
    return str(done["out"]).strip()


def test_each_users_job_runs_on_the_cluster_as_the_login_they_linked(lab: Lab) -> None:
    for who in LOGINS:
        lab.link(who)
    alices = lab.sbatch("alice", "-J", "as-alice", "--wrap", "id -un")
    bobs = lab.sbatch("bob", "-J", "as-bob", "--wrap", "id -un")
    for job_id in (alices, bobs):
        assert lab.head.wait_state(job_id, "COMPLETED", "FAILED", timeout=90)["state"] == (
            "COMPLETED"
        )
    assert _log(lab, "alice", alices) == "ab123" and _log(lab, "bob", bobs) == "bb456"
    ran_as = lab.cluster_users()
    assert ran_as["as-alice"] == "ab123" and ran_as["as-bob"] == "bb456", ran_as
    # scancel reaches the cluster as the job's own user.
    sleeper = lab.sbatch("bob", "-J", "bob-sleeps", "--wrap", "sleep 300")
    lab.head.wait_state(sleeper, "RUNNING", timeout=90)
    assert lab.gbatch("bob", "scancel", str(sleeper))["rc"] == 0
    assert lab.head.wait_state(sleeper, "CANCELLED", timeout=60)["state"] == "CANCELLED"
    wait_for(
        lambda: (
            "CANCELLED" in lab.there("squeue", "-h", "-t", "all", "-n", "bob-sleeps", "-o", "%T")
        ),
        30,
        "the cluster to cancel bob's job",
    )
    status = lab.gbatch("alice", "cluster", "status")
    assert status["rc"] == 0 and "ab123" in status["out"] and "bb456" not in status["out"]


def test_a_user_without_a_link_is_refused_at_submit_in_one_line(lab: Lab) -> None:
    done = lab.head.run("sbatch", "-p", "uni", "--wrap", "true")  # root: linked nothing
    assert done.returncode != 0 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "gbatch cluster link uni --login NAME" in done.stderr
    # Nor can anyone link a login name that is none, or a partition that is the lab's.
    bad = lab.gbatch("alice", "cluster", "link", "uni", "--login=-oProxyCommand=x")
    assert bad["rc"] != 0 and "not a login name" in bad["err"]
    lab_partition = lab.gbatch("alice", "cluster", "link", "gpu", "--login", "ab123")
    assert lab_partition["rc"] != 0 and "not a cluster partition" in lab_partition["err"]


def test_a_key_removed_on_the_cluster_breaks_the_link_and_a_relink_mends_it(lab: Lab) -> None:
    lab.link("alice")
    warm = lab.sbatch("alice", "--wrap", "true")
    lab.head.wait_state(warm, "COMPLETED", timeout=90)
    # Alice's key is taken out of authorized_keys, and her open sessions end (a key
    # removed is refused at the next login: here, at once).
    lab.there("sh", "-c", "true > /home/ab123/.ssh/authorized_keys")
    subprocess.run(
        ["docker", "exec", lab.cluster.container.get_container_id(), "pkill", "-u", "ab123"],
        capture_output=True,
        timeout=30,
    )
    waiting = lab.sbatch("alice", "-J", "after-break", "--wrap", "id -un")

    def broken() -> bool:
        out = lab.gbatch("alice", "cluster", "status")["out"]
        return "broken" in out

    wait_for(broken, 60, "alice's link to be marked broken")
    record = json.loads(
        lab.gbatch("alice", "scontrol", "show", "job", str(waiting), "--json")["out"]
    )
    assert record["state"] == "PENDING" and record["reason"] == "ClusterLinkBroken", record
    status = lab.gbatch("alice", "cluster", "status")["out"]
    assert "refused" in status and "up" in status  # the partition itself is up
    # She is mailed (whatever her --mail-type), and the admins' webhook is told, once.
    address = f"{lab.users['alice'].name}@lab.test"
    wait_for(lambda: any(m["To"] == address for m in lab.inbox.messages), 30, "the mail to alice")
    (mail,) = [m for m in lab.inbox.messages if m["To"] == address]
    assert "Cluster link broken" in str(mail["Subject"]), mail["Subject"]
    wait_for(lambda: lab.told("CLUSTER_LINK"), 30, "the admins' webhook")
    (event,) = lab.told("CLUSTER_LINK")
    assert event["job"]["user"] == lab.users["alice"].name
    # A new job is refused at submit while the link is broken, saying how to mend it;
    # the one already queued waits for the relink.
    again = lab.gbatch("alice", "sbatch", "-p", "uni", "-D", "/tmp", "--wrap", "true")
    assert again["rc"] != 0 and "is broken" in again["err"], again
    assert "gbatch cluster link uni --login NAME" in again["err"]
    # Relinked: the head may try the new key before she adds it (no news: the link
    # is new until the cluster takes it), and sends her job once it is there.
    lab.link("alice")
    assert lab.head.wait_state(waiting, "COMPLETED", timeout=90)["state"] == "COMPLETED"
    assert _log(lab, "alice", waiting) == "ab123"


def test_the_login_node_paused_takes_the_partition_down_and_back_told_once_each(
    lab: Lab,
) -> None:
    lab.link("bob")
    job_id = lab.sbatch("bob", "--wrap", "sleep 8; echo done")
    lab.head.wait_state(job_id, "RUNNING", timeout=90)
    container = lab.cluster.container.get_container_id()
    subprocess.run(["docker", "pause", container], check=True, timeout=30, capture_output=True)
    try:
        wait_for(lambda: lab.told("PARTITION_DOWN"), 60, "PARTITION_DOWN")
        status = lab.gbatch("bob", "cluster", "status")["out"]
        assert "down" in status.splitlines()[1], status
        assert lab.head.state(job_id) == "RUNNING"  # its last known state
    finally:
        subprocess.run(
            ["docker", "unpause", container], check=True, timeout=30, capture_output=True
        )
    assert lab.head.wait_state(job_id, "COMPLETED", timeout=90)["state"] == "COMPLETED"
    wait_for(lambda: lab.told("PARTITION_UP"), 60, "PARTITION_UP")
    (down,) = lab.told("PARTITION_DOWN")
    assert down["node"]["name"] == "uni" and down["node"]["reason"], down
    assert len(lab.told("PARTITION_UP")) == 1
    assert lab.users["bob"].name in lab.gbatch("bob", "cluster", "status")["out"]
    # His jobs there ended: he may unlink, and the key is gone from the head.
    done = lab.gbatch("bob", "cluster", "unlink", "uni")
    assert done["rc"] == 0 and "unlinked bb456" in done["err"], done
    assert lab.users["bob"].name not in lab.gbatch("bob", "cluster", "status")["out"]
