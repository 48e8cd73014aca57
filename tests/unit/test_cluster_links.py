"""Per-user identity on a cluster partition: links kept sealed in the store, jobs sent and
watched as their own user, a refused key breaking that user's link alone (and telling
them), and a partition going down or coming back told to the admins' webhooks."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
from oracles import outbox as outbox_rows
from test_cluster import CLUSTER, T0, FakeCluster

from gbatch.core.model import CLUSTER_LINK_REASON, Job, JobSpec, JobState
from gbatch.head import notify
from gbatch.head.clusterlogins import StoreLogins
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.linkkeys import make_key_pair
from gbatch.head.loop.cluster import ClusterJobsStep
from gbatch.head.store import Store
from gbatch.nodes.backend import Backend, BackendDown, LinkRefused, Observation, SessionFailed
from gbatch.nodes.base import CommandResult
from gbatch.nodes.cluster import SlurmBackend, login_problem
from gbatch.nodes.inventory import Inventory, InventoryError, Partition, load_inventory
from gbatch.nodes.ssh import RemoteError, RemoteTimeout
from gbatch.site.config import Config, Paths, Webhook

PER_USER = replace(CLUSTER, user="", identity="per_user", max_jobs=10)
UNI = Partition("uni", (), slurm=PER_USER)
HOOK = Webhook("ops", "https://hooks.example.org/x", "", ("PARTITION_DOWN", "PARTITION_UP"))
POLICY = notify.Policy(mail=True, mail_domain="lab.org", webhooks=(HOOK,))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db", POLICY)
    yield opened
    opened.close()


class PerUserCluster(FakeCluster):
    """A cluster reached as each user's linked login: the logins from the store, and
    keys it refuses (`refusing`)."""

    def __init__(self, logins: StoreLogins) -> None:
        super().__init__()
        self.logins = logins
        self.refusing: set[str] = set()  # gbatch users whose key the cluster refuses
        self.sent_as: dict[str, str] = {}  # cluster id -> the login it was sent as
        self._observed: frozenset[str] = frozenset()

    def _as(self, user: str, job_id: int | None) -> str:
        link = self.logins.login(user)
        if link is None:
            raise LinkRefused(f"{user} has no working link")
        if user in self.refusing:
            self.logins.refused(user, "the host refused the linked key", job_id)
            raise LinkRefused(f"the cluster refused {user}'s linked key")
        if not link.taken:
            self.logins.accepted(user)
        return link.login

    def submit(self, job: Job, marker: str) -> str:
        login = self._as(job.user, job.id)
        backend_id = super().submit(job, marker)
        self.sent_as[backend_id] = login
        return backend_id

    def observe(self) -> Mapping[str, Observation]:
        seen: set[str] = set()
        for user in self.logins.users():
            try:
                self._as(user, None)
            except LinkRefused:
                continue
            seen.add(user)
        self._observed = frozenset(seen)
        return super().observe()

    def observed_users(self) -> frozenset[str] | None:
        return self._observed

    def may_send(self, user: str) -> bool:
        return self.logins.login(user) is not None


def _step(store: Store) -> tuple[ClusterJobsStep, PerUserCluster]:
    cluster = PerUserCluster(StoreLogins(store, "uni", lambda: T0))

    def make(partition: Partition) -> Backend:
        return cluster

    return ClusterJobsStep(store, [UNI], "head1", make), cluster


def _submit(store: Store, user: str, uid: int = 1000) -> int:
    spec = JobSpec(name="j", command=("id", "-un"), partition="uni")
    (job_id,) = store.submit([spec], uid=uid, user=user, now=T0)
    return job_id


def _link(store: Store, user: str, login: str) -> str:
    private, public = make_key_pair(f"gbatch:uni:{user}")
    store.link_cluster("uni", user, login, private, public, T0)
    return private


# -- config and names --------------------------------------------------------------------------


def _inventory(tmp_path: Path, slurm: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes:\n  - name: gpu01\n    host: gpu01.lab\n"
        "partitions:\n  - name: gpu\n    nodes: [gpu01]\n    default: true\n"
        f"  - name: uni\n    slurm:\n{slurm}"
    )
    return path


def test_a_per_user_partition_needs_no_service_account_and_refuses_one(tmp_path: Path) -> None:
    path = _inventory(tmp_path, "      login: x\n      identity: per_user\n")
    inventory = load_inventory(path, home=tmp_path)
    (uni,) = [p for p in inventory.partitions if p.name == "uni"]
    assert uni.slurm is not None and (uni.slurm.identity, uni.slurm.user) == ("per_user", "")
    with pytest.raises(InventoryError) as err:
        load_inventory(
            _inventory(tmp_path, "      login: x\n      identity: per_user\n      user: svc\n"),
            home=tmp_path,
        )
    assert "user" in str(err.value) and "gbatch cluster link" in str(err.value)


@pytest.mark.parametrize("login", ["alice", "ab123", "john.doe", "x_y-z"])
def test_cluster_logins_people_have_are_taken(login: str) -> None:
    assert login_problem(login) is None


@pytest.mark.parametrize("login", ["", "-oProxyCommand=x", ".hidden", "a b", "a;b", "é", "x" * 65])
def test_a_login_that_is_no_login_name_is_refused_in_one_line(login: str) -> None:
    assert "not a login name" in (login_problem(login) or "")


def test_a_made_key_pair_is_ed25519_and_its_public_half_matches() -> None:
    private, public = make_key_pair("gbatch:uni:alice")
    key = paramiko.Ed25519Key.from_private_key(io.StringIO(private))
    assert public == f"ssh-ed25519 {key.get_base64()} gbatch:uni:alice"


# -- the store ---------------------------------------------------------------------------------


def test_a_links_private_key_is_sealed_in_the_store_file(store: Store, tmp_path: Path) -> None:
    private = _link(store, "alice", "ab123")
    body = private.splitlines()[1]
    assert store.cluster_login("uni", "alice") == ("ab123", private, False)
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("gbatch.db*"))
    assert body.encode() not in raw and b"OPENSSH PRIVATE KEY" not in raw
    assert b"ab123" in raw  # the login is no secret


def test_unlink_forgets_the_key_and_relink_replaces_it(store: Store) -> None:
    first = _link(store, "alice", "ab123")
    second = _link(store, "alice", "alice2")
    assert second != first and store.cluster_login("uni", "alice") == ("alice2", second, False)
    assert [link.login for link in store.cluster_links("alice")] == ["alice2"]
    assert store.unlink_cluster("uni", "alice") and not store.unlink_cluster("uni", "alice")
    assert store.cluster_login("uni", "alice") is None and store.cluster_links() == []


# -- the loop's step, as each user -------------------------------------------------------------


def test_a_job_is_sent_as_its_users_own_login(store: Store) -> None:
    step, cluster = _step(store)
    _link(store, "alice", "ab123")
    _link(store, "bob", "bb456")
    alices, bobs = _submit(store, "alice"), _submit(store, "bob", 1001)
    step.mirror(T0 + 1)
    by_marker = {o.marker: i for i, o in cluster.jobs.items()}
    sent = {
        job_id: cluster.sent_as[by_marker[f"gbatch:head1:{job_id}.1"]] for job_id in (alices, bobs)
    }
    assert sent == {alices: "ab123", bobs: "bb456"}


def test_a_job_of_a_user_without_a_link_waits_saying_so_and_goes_once_linked(
    store: Store,
) -> None:
    step, cluster = _step(store)
    job_id = _submit(store, "alice")  # linked, then unlinked before it was sent
    step.mirror(T0 + 1)
    assert cluster.calls["submit"] == 0 and store.cluster_open_count("uni") == 0
    job = store.require(job_id)
    assert (job.state, job.reason) == (JobState.PENDING, CLUSTER_LINK_REASON)
    _link(store, "alice", "ab123")
    step.mirror(T0 + 2)
    assert cluster.calls["submit"] == 1 and list(cluster.sent_as.values()) == ["ab123"]


def test_a_new_links_key_refused_is_no_news_and_its_job_goes_once_the_key_is_there(
    store: Store,
) -> None:
    step, cluster = _step(store)
    _link(store, "alice", "ab123")
    assert store.cluster_links("alice")[0].state == "new"
    cluster.refusing.add("alice")  # she has not added the key yet
    job_id = _submit(store, "alice")
    step.mirror(T0 + 1)
    step.mirror(T0 + 2)
    (link,) = store.cluster_links("alice")
    assert link.state == "new" and link.reason.startswith("waiting for its key")
    assert outbox_rows(store, job_id) == [] and cluster.sent_as == {}
    assert store.require(job_id).state is JobState.PENDING
    cluster.refusing.clear()
    step.mirror(T0 + 3)
    assert list(cluster.sent_as.values()) == ["ab123"]
    assert store.cluster_links("alice")[0].state == "ok"


def test_a_refused_key_breaks_that_users_link_alone_and_tells_them_once(store: Store) -> None:
    step, cluster = _step(store)
    _link(store, "alice", "ab123")
    _link(store, "bob", "bb456")
    first = _submit(store, "alice")
    _submit(store, "bob", 1001)
    step.mirror(T0)  # both keys taken: the links are ok
    assert [link.state for link in store.cluster_links()] == ["ok", "ok"]
    cluster.refusing.add("alice")
    alices, bobs = _submit(store, "alice"), _submit(store, "bob", 1001)
    step.mirror(T0 + 1)
    step.mirror(T0 + 2)
    job = store.require(alices)
    assert (job.state, job.reason) == (JobState.PENDING, CLUSTER_LINK_REASON)
    assert sorted(cluster.sent_as.values()) == ["ab123", "bb456", "bb456"]  # bob's went
    assert store.require(bobs).reason == "Priority"
    assert "uni" not in step.down  # the cluster is up: alice's key is at fault
    (alice_link,) = store.cluster_links("alice")
    assert (alice_link.state, alice_link.since) == ("broken", T0)  # StoreLogins' clock
    assert "refused" in alice_link.reason
    assert store.cluster_links("bob")[0].state == "ok"
    # Told once, on her first job there (the pass's squeue as her found it).
    told = [(r["job_id"], r["channel"], r["target"]) for r in outbox_rows(store)]
    assert told == [(first, "mail", "alice@lab.org")]  # whatever her --mail-type
    assert any("cluster link of alice broken" in e.reason for e in store.events(first))
    # Relinked (the new key on the cluster): her waiting job is sent, as her.
    cluster.refusing.clear()
    _link(store, "alice", "ab123")
    step.mirror(T0 + 3)
    assert sorted(cluster.sent_as.values()) == ["ab123", "ab123", "bb456", "bb456"]
    assert store.require(alices).reason.startswith("sent to cluster uni")


def test_a_broken_users_running_job_keeps_its_state_until_relinked(store: Store) -> None:
    step, cluster = _step(store)
    _link(store, "alice", "ab123")
    job_id = _submit(store, "alice")
    step.mirror(T0 + 1)
    assert store.cluster_links("alice")[0].state == "ok"
    (backend_id,) = cluster.jobs
    cluster.set(backend_id, "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    cluster.refusing.add("alice")
    cluster.jobs.clear()  # what squeue as someone else would (not) show
    step.mirror(T0 + 3)
    job = store.require(job_id)
    assert job.state is JobState.RUNNING  # not "lost": unobserved
    assert store.cluster_links("alice")[0].state == "broken"
    told = [r["kind"] for r in outbox_rows(store, job_id)]
    assert told.count("CLUSTER_LINK") == 1


def test_a_partition_going_down_and_up_is_told_to_the_admins_webhooks_once_each(
    store: Store,
) -> None:
    step, cluster = _step(store)
    _link(store, "alice", "ab123")
    _submit(store, "alice")
    step.mirror(T0 + 1)
    cluster.down = True
    step.mirror(T0 + 2)
    step.mirror(T0 + 3)
    cluster.down = False
    step.mirror(T0 + 4)
    rows = [(r["kind"], r["target"]) for r in outbox_rows(store) if r["job_id"] is None]
    assert rows == [("PARTITION_DOWN", "ops"), ("PARTITION_UP", "ops")]
    text = notify.summary({"kind": "PARTITION_DOWN", "node": {"name": "uni", "reason": "x"}})
    assert text == "gbatch partition uni: down: x"


def test_only_users_linked_with_jobs_there_are_watched(store: Store) -> None:
    step, _ = _step(store)
    assert StoreLogins(store, "uni", lambda: T0).users() == []
    _link(store, "alice", "ab123")
    _link(store, "carol", "cc789")  # linked, no job: not asked
    _submit(store, "alice")
    step.mirror(T0 + 1)
    assert StoreLogins(store, "uni", lambda: T0).users() == ["alice"]


def test_the_docs_per_user_example_loads(tmp_path: Path) -> None:
    from docexamples import yaml_block_with

    example = yaml_block_with("slurm-cluster.md", "identity: per_user")
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes:\n  - {name: gpu01, host: gpu01.lab}\n"
        "partitions:\n  - name: gpu\n    nodes: [gpu01]\n    default: true\n"
        + example.replace("partitions:\n", "")
    )
    (uni,) = [p for p in load_inventory(path, home=tmp_path).partitions if p.name == "uni"]
    assert uni.slurm is not None and uni.slurm.identity == "per_user"


# -- SlurmBackend as each user (its connections faked: what each login's session does) ------


class FakeSession:
    """A login's session on the login node: squeue prints `lines`, or fails as told."""

    def __init__(self, login: str, fails: str = "") -> None:
        self.connected = True
        self.login = login
        self.fails = fails  # "exit": squeue exits 1 (a broken shell); "timeout"
        self.ran: list[list[str]] = []

    def run(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None) -> CommandResult:
        self.ran.append(list(argv))
        if self.fails == "lost":  # its sessions were ended (the connection is gone)
            self.connected = False
            raise RemoteError("SSH session not active")
        if self.fails == "lost once":
            self.fails = ""
            self.connected = False
            raise RemoteError("SSH session not active")
        if self.fails == "timeout":
            raise RemoteTimeout("command timed out after 10 s")
        if self.fails == "exit":
            return CommandResult(1, b"", b".bashrc: line 1: oops\n")
        if argv[0] == "squeue":
            return CommandResult(0, f"9{len(self.login)}|PENDING|Priority|||5:00|c\n".encode(), b"")
        return CommandResult(0, b"77\n", b"")

    def close(self) -> None:
        pass


def _backend(
    store: Store, sessions: dict[str, FakeSession], monkeypatch: pytest.MonkeyPatch
) -> SlurmBackend:
    backend = SlurmBackend("uni", PER_USER, StoreLogins(store, "uni", lambda: T0))

    def connection(user: str, job_id: int | None) -> FakeSession:
        link = backend._link(user)  # no link: LinkRefused, as the real one
        session = sessions[user]
        session.connected = True  # (logged in again)
        backend._conns[user] = (link, session)  # type: ignore[assignment]
        return session

    monkeypatch.setattr(backend, "_connection", connection)
    return backend


def test_one_users_failing_session_leaves_them_out_not_the_partition_down(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = {"alice": FakeSession("ab123", fails="exit"), "bob": FakeSession("bb456")}
    backend = _backend(store, sessions, monkeypatch)
    for user, login in (("alice", "ab123"), ("bob", "bb456")):
        _link(store, user, login)
        job_id = _submit(store, user)
        store.begin_cluster_send(job_id, 1, "uni", f"m{job_id}", T0)
    seen = backend.observe()  # no BackendDown: bob's squeue answered
    assert backend.observed_users() == frozenset({"bob"}) and list(seen) == ["95"]
    assert sessions["bob"].ran[0][:6] == ["squeue", "-h", "--states=all", "-u", "bb456", "-O"]
    # Alice is left out for a while (each try may cost a whole timeout).
    backend.observe()
    assert len(sessions["alice"].ran) == 1 and len(sessions["bob"].ran) == 2
    # A submit timing out in her session leaves the job's intent (SessionFailed), never
    # the partition down.
    sessions["alice"].fails = "timeout"
    with pytest.raises(SessionFailed):
        backend.submit(store.require(1), "m1")


def test_when_nobodys_squeue_works_the_partition_is_down(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = {"alice": FakeSession("ab123", fails="exit")}
    backend = _backend(store, sessions, monkeypatch)
    _link(store, "alice", "ab123")
    job_id = _submit(store, "alice")
    store.begin_cluster_send(job_id, 1, "uni", "m1", T0)
    with pytest.raises(BackendDown, match="squeue failed"):
        backend.observe()


# -- gbatch cluster link / unlink / status, and submit, at the handlers ----------------------


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon (not started) with the lab's `gpu` and the per-user cluster `uni`."""
    paths = Paths(tmp_path)
    opened = Store(paths.store)
    inventory = Inventory(
        (),
        tmp_path / "known_hosts",
        tmp_path / "inventory.yaml",
        (
            Partition("gpu", ("local",), default=True),
            UNI,
        ),
    )
    made = Daemon(paths, Config(simulate_gpus=2), opened, inventory=inventory)
    yield made
    made.committer.close()
    opened.close()


ALICE = Caller(uid=1234, user="alice", pid=2)
ROOT_CALLER = Caller(uid=0, user="root", pid=1)


def test_link_prints_a_public_key_and_keeps_the_private_one_sealed(head: Daemon) -> None:
    reply = handle(head, ALICE, {"op": "cluster_link", "partition": "uni", "login": "ab123"})
    assert reply["ok"] and reply["public"].startswith("ssh-ed25519 ")
    assert "PRIVATE" not in json.dumps(reply)
    status = handle(head, ALICE, {"op": "cluster_status"})
    assert status["partitions"] == [
        {
            "name": "uni",
            "identity": "per_user",
            "login": "login.uni.example:22",
            "state": "up",
            "reason": "",
        }
    ]
    ((link),) = status["links"]
    assert (link["user"], link["login"], link["state"]) == ("alice", "ab123", "new")
    assert handle(head, ROOT_CALLER, {"op": "cluster_status"})["links"] == []  # hers alone


def test_link_refuses_a_lab_partition_a_bad_login_and_a_token(head: Daemon) -> None:
    lab = handle(head, ALICE, {"op": "cluster_link", "partition": "gpu", "login": "ab123"})
    assert lab["kind"] == "invalid" and "not a cluster partition" in lab["error"]
    bad = handle(head, ALICE, {"op": "cluster_link", "partition": "uni", "login": "-oX=y"})
    assert bad["kind"] == "invalid" and "--login" in bad["error"]
    with_token = replace(ALICE, scopes=frozenset({"read", "submit", "control", "ports"}))
    tok = handle(head, with_token, {"op": "cluster_link", "partition": "uni", "login": "ab123"})
    assert tok["kind"] == "permission" and "API token" in tok["error"]
    assert head.store.cluster_links() == []


def test_a_submit_without_a_working_link_is_refused_naming_gbatch_cluster_link(
    head: Daemon,
) -> None:
    submit = {"op": "submit", "spec": {"name": "j", "command": ["true"], "partition": "uni"}}
    refused = handle(head, ALICE, submit)
    assert (
        refused["kind"] == "invalid"
        and "gbatch cluster link uni --login NAME" in (refused["error"])
    )
    handle(head, ALICE, {"op": "cluster_link", "partition": "uni", "login": "ab123"})
    assert handle(head, ALICE, submit)["ok"]  # a new link: the job waits for its key
    head.store.accept_cluster_link("uni", "alice")
    head.store.break_cluster_link("uni", "alice", "the host refused the key", None, T0)
    broken = handle(head, ALICE, submit)
    assert (
        broken["kind"] == "invalid" and "is broken: the host refused the key" in (broken["error"])
    )


def test_unlink_is_refused_while_jobs_are_there_and_forgets_the_key_after(head: Daemon) -> None:
    handle(head, ALICE, {"op": "cluster_link", "partition": "uni", "login": "ab123"})
    job_id = _submit(head.store, "alice", 1234)
    head.store.begin_cluster_send(job_id, 1, "uni", "m", T0)
    refused = handle(head, ALICE, {"op": "cluster_unlink", "partition": "uni"})
    assert refused["kind"] == "invalid" and f"({job_id})" in refused["error"]
    head.store.close_cluster_job(job_id)
    done = handle(head, ALICE, {"op": "cluster_unlink", "partition": "uni"})
    assert done["ok"] and done["login"] == "ab123" and head.store.cluster_links() == []
    again = handle(head, ALICE, {"op": "cluster_unlink", "partition": "uni"})
    assert again["kind"] == "not_found"


def test_a_dead_connection_is_logged_in_again_once_but_never_for_sbatch(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = {"alice": FakeSession("ab123", fails="lost once")}
    backend = _backend(store, sessions, monkeypatch)
    _link(store, "alice", "ab123")
    job_id = _submit(store, "alice")
    store.begin_cluster_send(job_id, 1, "uni", "m1", T0)
    assert list(backend.observe()) == ["95"]  # squeue again on a new connection
    assert len(sessions["alice"].ran) == 2 and backend.observed_users() == {"alice"}
    sessions["alice"].fails = "lost"
    with pytest.raises(SessionFailed):  # its answer may be lost: the marker will tell
        backend.submit(store.require(job_id), "m1")
    assert [argv[0] for argv in sessions["alice"].ran[2:]] == ["sh"]  # sbatch, once
    sessions["alice"].fails = ""
    backend.observe()  # not held back: a lost connection is not the user's failure
    assert sessions["alice"].ran[-1][0] == "squeue"


def test_a_new_key_refused_holds_its_users_other_jobs_back_from_max_jobs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SlurmBackend("uni", PER_USER, StoreLogins(store, "uni", lambda: T0))
    _link(store, "alice", "ab123")
    assert backend.may_send("alice") and not backend.may_send("bob")  # bob: no link
    link = backend._link("alice")
    backend._refused["alice"] = (link, time.monotonic())  # as a refused connect leaves it
    assert not backend.may_send("alice")
    _link(store, "alice", "ab123")  # a relink: a new key, tried at once
    assert backend.may_send("alice")


def test_estimates_and_time_limits_are_asked_as_each_jobs_own_login(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = {"alice": FakeSession("ab123"), "bob": FakeSession("bb456")}
    backend = _backend(store, sessions, monkeypatch)
    _link(store, "alice", "ab123")
    alices, bobs = _submit(store, "alice"), _submit(store, "bob", 1001)  # bob: no link
    assert backend.estimate([store.require(alices), store.require(bobs)]) == {}
    (asked,) = sessions["alice"].ran
    assert asked[0] == "sh" and "--test-only" in asked[2] and f"'%s|' {alices};" in asked[2]
    assert f"'%s|' {bobs};" not in asked[2] and sessions["bob"].ran == []
    store.begin_cluster_send(alices, 1, "uni", "m", T0)
    backend.observe()  # alice's job 95 is hers
    sessions["alice"].ran.clear()
    assert backend.set_time_limits([("95", 30)]) == {}
    assert sessions["alice"].ran[0][-2:] == ["95", "30"]


BOB = Caller(uid=1235, user="bob", pid=3)


def test_an_admin_unlinks_another_users_link_audited_and_nobody_else_may(
    head: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    handle(head, ALICE, {"op": "cluster_link", "partition": "uni", "login": "ab123"})
    unlink_alice = {"op": "cluster_unlink", "partition": "uni", "user": "alice"}
    refused = handle(head, BOB, unlink_alice)
    assert refused["kind"] == "permission" and "admin" in refused["error"]
    assert "\n" not in refused["error"] and len(head.store.cluster_links()) == 1
    job_id = _submit(head.store, "alice", 1234)
    head.store.begin_cluster_send(job_id, 1, "uni", "m", T0)
    busy = handle(head, ROOT_CALLER, unlink_alice)
    assert (
        busy["kind"] == "invalid"
        and f"alice's jobs are on partition uni ({job_id})" in (busy["error"])
    )
    head.store.close_cluster_job(job_id)
    with caplog.at_level("INFO", logger="gbatchd"):
        done = handle(head, ROOT_CALLER, unlink_alice)
    assert done["ok"] and (done["user"], done["login"]) == ("alice", "ab123")
    assert head.store.cluster_links() == []
    audited = [r.getMessage() for r in caplog.records if "op=cluster_unlink" in r.getMessage()]
    assert any("user=root" in line and "alice" in line for line in audited), audited
    nobody = handle(head, ROOT_CALLER, {**unlink_alice, "user": "carol"})
    assert nobody["kind"] == "not_found" and '"carol" has no link' in nobody["error"]
