"""Steps in the store, the handlers and the loop: opened only in a running job by its
owner, numbered as Slurm numbers them, and an srun/salloc allocation ending with its
first step (or when its client goes away first)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.model import JobSpec, JobState
from gbatch.core.steps import INTERACTIVE, Step
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import AFTER_TURN, STREAM, Caller, handle
from gbatch.head.loop.runs import RunEnd
from gbatch.head.store import StepRefused, Store
from gbatch.nodes.base import RunStatus, StepStatus
from gbatch.site.config import Config, Paths

ALICE = Caller(uid=1000, user="alice", pid=10)
BOB = Caller(uid=1001, user="bob", pid=11)
ROOT = Caller(uid=0, user="root", pid=1)
T0 = 1_800_000_000.0


def queue(daemon: Daemon, caller: Caller = ALICE, interactive: str | None = None) -> int:
    spec: dict[str, Any] = JobSpec(name="j", command=("bash",)).to_dict()
    if interactive is not None:
        spec["interactive"] = interactive
    (job_id,) = handle(daemon, caller, {"op": "submit", "spec": spec})["ids"]
    return int(job_id)


def run(store: Store, job_id: int, node: str = "local") -> None:
    store.set_state(job_id, JobState.CONFIGURING, "", T0, node=node, gpus=(0,), attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", T0, start_time=T0)


def open_step(store: Store, job_id: int, interactive: bool = False, user: str = "alice") -> Step:
    return store.open_step(
        job_id,
        1,
        name="bash",
        argv=("bash",),
        user=user,
        pty=True,
        interactive=interactive,
        now=T0,
        max_open_per_user=64,
    )


# -- the store ----------------------------------------------------------------------


def test_steps_are_numbered_per_job_and_salloc_shell_is_interactive(daemon: Daemon) -> None:
    store = daemon.store
    batch, salloc = queue(daemon), queue(daemon, interactive="salloc")
    run(store, batch)
    run(store, salloc)
    assert [open_step(store, batch).label for _ in range(3)] == [
        f"{batch}.0",
        f"{batch}.1",
        f"{batch}.2",
    ]
    shell = open_step(store, salloc, interactive=True)
    assert (shell.step_id, shell.label, shell.leads) == (INTERACTIVE, f"{salloc}.interactive", True)
    inside = open_step(store, salloc)
    assert (inside.label, inside.leads) == (f"{salloc}.0", False)
    assert not any(s.leads for s in store.steps_of([batch]))
    with pytest.raises(StepRefused, match="not an salloc allocation"):
        open_step(store, salloc, interactive=True)  # its shell is open already
    with pytest.raises(StepRefused, match="not an salloc allocation"):
        open_step(store, batch, interactive=True)


def test_a_step_opens_only_in_a_running_job(daemon: Daemon) -> None:
    job_id = queue(daemon)
    with pytest.raises(StepRefused, match=f"job {job_id} is not running \\(it is PENDING\\)"):
        open_step(daemon.store, job_id)
    assert daemon.store.steps_of([job_id]) == []


def test_a_users_running_steps_are_capped(daemon: Daemon) -> None:
    store = daemon.store
    job_id = queue(daemon)
    run(store, job_id)
    for _ in range(2):
        store.open_step(
            job_id, 1, name="x", argv=("x",), user="alice", pty=False, interactive=False,
            now=T0, max_open_per_user=2,
        )  # fmt: skip
    with pytest.raises(StepRefused, match="alice has 2 steps running"):
        store.open_step(
            job_id, 1, name="x", argv=("x",), user="alice", pty=False, interactive=False,
            now=T0, max_open_per_user=2,
        )  # fmt: skip
    assert store.end_step(job_id, 0, JobState.COMPLETED, T0 + 1, exit_code=0)
    assert not store.end_step(job_id, 0, JobState.FAILED, T0 + 2)  # ended already
    assert [s.label for s in store.open_steps()] == [f"{job_id}.1"]
    ended = store.steps_of([job_id])[0]
    assert (ended.state, ended.end_time, ended.exit_code) == (JobState.COMPLETED, T0 + 1, 0)


def test_unled_allocations_are_those_whose_first_step_never_opened(daemon: Daemon) -> None:
    store = daemon.store
    led, waiting, pending = (queue(daemon, interactive="srun") for _ in range(3))
    batch = queue(daemon)
    run(store, led)
    run(store, waiting)
    open_step(store, led)
    assert sorted(store.unled_allocations()) == [waiting, pending]
    assert batch not in store.unled_allocations()


# -- the handlers -------------------------------------------------------------------


def test_another_user_is_refused_a_step_with_slurms_words_and_audited(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = queue(daemon)
    run(daemon.store, job_id)
    caplog.set_level(logging.INFO, logger="gbatchd")
    reply = handle(daemon, BOB, {"op": "step", "job": job_id, "argv": ["id"]})
    assert reply["ok"] is False and reply["kind"] == "permission"
    assert reply["error"].startswith("Access/permission denied")
    assert daemon.store.steps_of([job_id]) == []
    assert f"op=step job={job_id} owner=alice -> refused: not the owner" in caplog.text


def test_admins_open_steps_only_where_the_config_says_so(tmp_path: Path) -> None:
    for allowed in (False, True):
        paths = Paths(tmp_path / str(allowed))
        store = Store(paths.store)
        daemon = Daemon(paths, Config(simulate_gpus=2, admin_steps=allowed), store)
        try:
            job_id = queue(daemon)
            run(store, job_id)
            reply = handle(daemon, ROOT, {"op": "step", "job": job_id, "argv": ["id"]})
            assert reply["ok"] is allowed, reply
            if allowed:
                assert reply["label"] == f"{job_id}.0"
                assert daemon.store.steps_of([job_id])[0].user == "root"
                # It runs as alice, with her environment and workdir, not root's.
                again = handle(
                    daemon,
                    ROOT,
                    {
                        "op": "step",
                        "job": job_id,
                        "argv": ["id"],
                        "env": {"HOME": "/root", "LD_PRELOAD": "/x.so", "TERM": "xterm"},
                        "cwd": "/root",
                    },
                )[STREAM].launch
                assert (dict(again.env), again.cwd) == ({"TERM": "xterm"}, None)
        finally:
            daemon.committer.close()
            store.close()


def test_the_owners_step_is_recorded_and_handed_to_the_server(daemon: Daemon) -> None:
    job_id = queue(daemon)
    run(daemon.store, job_id)
    reply = handle(
        daemon,
        ALICE,
        {
            "op": "step",
            "job": job_id,
            "argv": ["python", "-c", "print(1)"],
            "env": {"HOME": "/home/alice", "CUDA_VISIBLE_DEVICES": "3", "GBATCH_X": "1"},
            "pty": True,
            "rows": 40,
            "cols": 100,
        },
    )
    assert {k: reply[k] for k in ("ok", "job", "step", "label", "leads")} == {
        "ok": True,
        "job": job_id,
        "step": 0,
        "label": f"{job_id}.0",
        "leads": False,
    }
    start = reply[STREAM]
    # What the caller sends of its environment is filtered as an export: no GPU choice.
    assert dict(start.launch.env) == {"HOME": "/home/alice"}
    assert start.launch.pty == (40, 100)
    assert job_id in daemon.steps_starting
    start.abandon()  # the reply could not be written
    assert job_id not in daemon.steps_starting
    (step,) = daemon.store.steps_of([job_id])
    assert (step.state, step.name) == (JobState.CANCELLED, "python")


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (JobState.PENDING, "is not running yet (PENDING)"),
        (JobState.COMPLETED, "Job/step already completing or completed"),
    ],
)
def test_a_step_of_a_job_not_running_is_refused(
    daemon: Daemon, state: JobState, error: str
) -> None:
    job_id = queue(daemon)
    if state is JobState.COMPLETED:
        run(daemon.store, job_id)
        daemon.store.set_state(job_id, state, "", T0, end_time=T0)
    reply = handle(daemon, ALICE, {"op": "step", "job": job_id, "argv": ["id"]})
    assert reply["kind"] == "invalid" and error in reply["error"]


def test_a_step_in_a_job_on_a_node_gone_from_the_fleet_is_refused(daemon: Daemon) -> None:
    job_id = queue(daemon)
    run(daemon.store, job_id, node="gpu01")
    reply = handle(daemon, ALICE, {"op": "step", "job": job_id, "argv": ["id"]})
    assert reply["kind"] == "unavailable"
    assert f"job {job_id} runs on gpu01, which is not in the fleet now" in reply["error"]


def test_waiting_for_an_allocation_returns_once_it_runs(daemon: Daemon) -> None:
    job_id = queue(daemon, interactive="srun")
    reply = handle(daemon, ALICE, {"op": "await_allocation", "job": job_id, "seconds": 0})
    assert reply[AFTER_TURN]()["state"] == "PENDING"
    run(daemon.store, job_id)
    reply = handle(daemon, ALICE, {"op": "await_allocation", "job": job_id, "seconds": 5})
    assert reply[AFTER_TURN]() == {
        "ok": True,
        "state": "RUNNING",
        "reason": "",
        "node": "local",
        "gpus": [0],
    }
    assert handle(daemon, BOB, {"op": "await_allocation", "job": job_id})["kind"] == "permission"
    batch = queue(daemon)
    assert handle(daemon, ALICE, {"op": "await_allocation", "job": batch})["kind"] == "invalid"


def test_steps_of_others_jobs_are_hidden_under_private_data(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    daemon = Daemon(paths, Config(simulate_gpus=2, private_data=True), store)
    try:
        mine, theirs = queue(daemon, ALICE), queue(daemon, BOB)
        for job_id, user in ((mine, "alice"), (theirs, "bob")):
            run(store, job_id)
            open_step(store, job_id, user=user)
        listed = handle(daemon, ALICE, {"op": "steps", "ids": [mine, theirs]})["steps"]
        assert [s["job"] for s in listed] == [mine]
    finally:
        daemon.committer.close()
        store.close()


# -- the loop -----------------------------------------------------------------------


def ended_with(daemon: Daemon, status: StepStatus, monkeypatch: pytest.MonkeyPatch) -> None:
    node = daemon.fleet.nodes["local"]
    monkeypatch.setattr(node, "step_status", lambda job, step: status)


def test_an_allocation_ends_with_its_first_steps_exit(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = queue(daemon, interactive="srun")
    run(daemon.store, job_id)
    open_step(daemon.store, job_id)
    ended_with(daemon, StepStatus("exited", 3, 0, T0 + 5), monkeypatch)
    daemon.collect_ended_steps(T0 + 6)
    job = daemon.store.require(job_id)
    assert (job.state, job.stop_state, job.exit_code) == (
        JobState.COMPLETING,
        JobState.FAILED,
        3,
    )
    assert "its step" in job.reason and "exit code 3" in job.reason
    (step,) = daemon.store.steps_of([job_id])
    assert (step.state, step.exit_code, step.end_time) == (JobState.FAILED, 3, T0 + 5)
    # Its holder then dies of the SIGTERM it is sent: the job keeps the step's exit.
    end: RunEnd = daemon.ended_runs._finish(
        job, RunStatus("exited", 0, signal.SIGTERM, T0 + 7), T0 + 7
    )
    assert (end.new, end.fields["exit_code"], end.fields["exit_signal"], end.reason) == (
        JobState.FAILED,
        3,
        0,
        "exit code 3",
    )


def test_a_hung_up_first_step_cancels_its_allocation(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = queue(daemon, interactive="salloc")
    run(daemon.store, job_id)
    open_step(daemon.store, job_id, interactive=True)
    ended_with(daemon, StepStatus("exited", 0, signal.SIGHUP, T0 + 5, hangup=True), monkeypatch)
    daemon.collect_ended_steps(T0 + 6)
    job = daemon.store.require(job_id)
    assert (job.state, job.stop_state) == (JobState.COMPLETING, JobState.CANCELLED)
    assert daemon.store.steps_of([job_id])[0].reason == "its client went away"
    end: RunEnd = daemon.ended_runs._finish(
        daemon.store.require(job_id), RunStatus("exited", 0, signal.SIGTERM, T0 + 7), T0 + 7
    )
    assert (end.new, end.reason, end.fields["exit_signal"]) == (
        JobState.CANCELLED,
        "its client went away",
        signal.SIGHUP,
    )


def test_a_batch_jobs_step_ending_leaves_the_job_running(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = queue(daemon)
    run(daemon.store, job_id)
    open_step(daemon.store, job_id)
    ended_with(daemon, StepStatus("exited", 1, 0, T0 + 5), monkeypatch)
    daemon.collect_ended_steps(T0 + 6)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    assert daemon.store.open_steps() == []


def test_a_step_being_started_is_not_taken_for_vanished(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = queue(daemon, interactive="srun")
    run(daemon.store, job_id)
    open_step(daemon.store, job_id)
    ended_with(daemon, StepStatus("vanished"), monkeypatch)
    daemon.steps_starting.begin(job_id)
    daemon.collect_ended_steps(T0 + 1)
    assert daemon.store.require(job_id).state is JobState.RUNNING
    daemon.steps_starting.end(job_id)
    daemon.collect_ended_steps(T0 + 2)
    assert daemon.store.require(job_id).state is JobState.COMPLETING
    assert daemon.store.steps_of([job_id])[0].reason == "its step shim vanished"


def test_a_step_whose_relay_ended_with_an_earlier_gbatchd_is_hung_up_and_cancelled(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host's step after a gbatchd restart: nobody relays it; it is recorded CANCELLED
    with the node's reason, and the node is asked to hang up what is left of it."""
    job_id = queue(daemon)
    run(daemon.store, job_id)
    open_step(daemon.store, job_id)
    reason = "its relay to gpu01 ended with an earlier gbatchd; hung up"
    ended_with(daemon, StepStatus("vanished", hangup=True, error=reason), monkeypatch)
    hung_up: list[tuple[int, int]] = []
    node = daemon.fleet.nodes["local"]
    monkeypatch.setattr(
        node, "hang_up_step", lambda job, step: hung_up.append((job.id, step.step_id))
    )
    daemon.collect_ended_steps(T0 + 1)
    (step,) = daemon.store.steps_of([job_id])
    assert (step.state, step.reason) == (JobState.CANCELLED, reason)
    assert hung_up == [(job_id, 0)]
    assert daemon.store.require(job_id).state is JobState.RUNNING


def test_a_first_step_whose_client_left_before_it_started_ends_its_allocation(
    daemon: Daemon,
) -> None:
    job_id = queue(daemon, interactive="srun")
    run(daemon.store, job_id)
    handle(daemon, ALICE, {"op": "step", "job": job_id, "argv": ["bash"]})[STREAM].abandon()
    job = daemon.store.require(job_id)
    assert (job.state, job.stop_state) == (JobState.COMPLETING, JobState.CANCELLED)


def test_an_allocation_nobody_waits_for_is_cancelled_after_the_grace(tmp_path: Path) -> None:
    clock = [100.0]
    paths = Paths(tmp_path)
    store = Store(paths.store)
    config = Config(simulate_gpus=2, interactive_grace_seconds=30)
    daemon = Daemon(paths, config, store, monotonic=lambda: clock[0])
    try:
        pending, running, led = (queue(daemon, interactive="srun") for _ in range(3))
        run(store, running)
        run(store, led)
        assert handle(daemon, ALICE, {"op": "step", "job": led, "argv": ["bash"]})["leads"]
        clock[0] += 29
        daemon.end_abandoned_allocations(T0)
        assert store.require(pending).state is JobState.PENDING
        # A client waiting now keeps its allocation however long it waits.
        wait = handle(daemon, ALICE, {"op": "await_allocation", "job": pending, "seconds": 0})
        with daemon.waiters.waiting(pending):
            clock[0] += 60
            daemon.end_abandoned_allocations(T0)
        assert store.require(pending).state is JobState.PENDING
        assert store.require(running).state is JobState.COMPLETING
        clock[0] += 31
        wait[AFTER_TURN]()
        daemon.end_abandoned_allocations(T0)
        assert store.require(pending).state is JobState.PENDING  # it waited just now
        clock[0] += 31
        daemon.end_abandoned_allocations(T0)
        assert store.require(pending).state is JobState.CANCELLED
        assert "client went away" in store.require(pending).reason
        assert store.require(led).state is JobState.RUNNING  # its first step holds it
    finally:
        daemon.committer.close()
        store.close()
