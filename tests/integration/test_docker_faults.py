"""Docker faults under running container jobs on the local node: a job's container
killed or removed by someone else, and the engine itself crashing (SIGKILL) or
restarting cleanly (SIGTERM), with and without the gbatch daemon down at the same time.

Every test runs against a private docker engine (private_engine.py), never the
machine's main one: killing dockerd must not touch other people's containers. What
each test shows: every affected job reaches a correct state with a reason, a job's
container is never started twice for one attempt (`--restart=no`; the engine's own
start events are counted), and a requeue happens exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for
from dockerenv import TEST_IMAGE, ensure_test_image, require_docker
from private_engine import PrivateEngine, private_engine

from gbatch.nodes.docker import container_name

pytestmark = [pytest.mark.docker, pytest.mark.private_engine]

# The first attempt runs until stopped; any later one says so and ends at once.
RUN_ONCE_LONG = 'echo "run $GBATCH_ATTEMPT"; [ "$GBATCH_ATTEMPT" -gt 1 ] || sleep 300'
QUIET_S = 1.5  # several daemon ticks (0.2 s) and agent reports: long enough to revive


@pytest.fixture
def engine() -> Iterator[PrivateEngine]:
    require_docker()  # the test image is copied from the main engine
    ensure_test_image()
    with private_engine(TEST_IMAGE) as engine:
        yield engine


@pytest.fixture
def head(tmp_path: Path, engine: PrivateEngine) -> Iterator[Head]:
    head = make_head(
        tmp_path / "home", gpus=2, config=FAST_CONFIG + f"docker: {engine.client_script}\n"
    )
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)


def submit(head: Head, command: str, *options: str) -> int:
    return head.sbatch("--image", TEST_IMAGE, "--gpus", "1", *options, "--wrap", command)


def start_running(head: Head, engine: PrivateEngine, command: str, *options: str) -> int:
    """Submit a container job; return once its first attempt's container runs."""
    job_id = submit(head, command, *options)
    head.wait_state(job_id, "RUNNING", timeout=60)
    name = container_name(job_id, 1)
    wait_for(lambda: name in engine.running_names(), 30, f"{name} to run")
    return job_id


def reasons(job: dict[str, object]) -> list[str]:
    events = job["events"]
    assert isinstance(events, list)
    return [str(event["reason"]) for event in events]


def assert_never_revived(
    engine: PrivateEngine, job_id: int, attempts: int, started: set[int] | None = None
) -> None:
    """Each of the job's attempts started exactly once (only those in `started`, when
    given: the rest never started), none beyond `attempts` ever started, and (after a
    quiet while) none of them is running."""
    time.sleep(QUIET_S)
    ran = set(range(1, attempts + 1)) if started is None else started
    for attempt in range(1, attempts + 2):
        name = container_name(job_id, attempt)
        expected = 1 if attempt in ran else 0
        assert engine.container_starts.count(name) == expected, (
            f"{name} started {engine.container_starts.count(name)} times: {engine.container_starts}"
        )
        assert name not in engine.running_names()


# -- someone else kills or removes a job's container ------------------------------------


def test_container_killed_by_someone_else_fails_with_its_exit_code_and_stays_dead(
    head: Head, engine: PrivateEngine
) -> None:
    job_id = start_running(head, engine, "sleep 300")
    engine.docker("kill", container_name(job_id, 1), check=True)
    job = head.wait_state(job_id, "FAILED", timeout=30)
    assert (job["exit_code"], job["exit_signal"], job["attempt"]) == (137, 0, 1)
    assert job["reason"] == "exit code 137"
    shown = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert "JobState=FAILED Reason=exit code 137 ExitCode=137:0" in shown
    sacct = head.run(
        "sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "State,ExitCode", check=True
    )
    assert sacct.stdout.split() == ["FAILED|137:0"]
    assert_never_revived(engine, job_id, attempts=1)
    assert head.state(job_id) == "FAILED"


def test_container_killed_by_someone_else_is_retried_once_when_the_job_has_retries(
    head: Head, engine: PrivateEngine
) -> None:
    job_id = start_running(head, engine, RUN_ONCE_LONG, "--retries", "1")
    engine.docker("kill", container_name(job_id, 1), check=True)
    job = head.wait_state(job_id, "COMPLETED", timeout=60)
    assert job["attempt"] == 2
    assert "retry 1/1 after exit code 137" in reasons(job)
    assert_never_revived(engine, job_id, attempts=2)
    log = head.run("logs", str(job_id), check=True).stdout
    assert log.splitlines()[-1] == "run 2"


def test_container_removed_behind_gbatchs_back_is_requeued_exactly_once_and_completes(
    head: Head, engine: PrivateEngine
) -> None:
    job_id = start_running(head, engine, RUN_ONCE_LONG)
    engine.docker("rm", "-f", container_name(job_id, 1), check=True)
    job = head.wait_state(job_id, "COMPLETED", timeout=60)
    assert job["attempt"] == 2
    vanished = [r for r in reasons(job) if "vanished" in r]
    assert vanished == ["its run vanished (node restarted?); requeued"]
    assert_never_revived(engine, job_id, attempts=2)


def test_an_image_the_engine_cannot_get_fails_the_launch_naming_it_with_exit_code_1(
    head: Head, engine: PrivateEngine
) -> None:
    # The private engine has no network at all: a pull fails at once, offline.
    image = "gbatch-no-such-image:latest"
    job_id = head.sbatch("--image", image, "--wrap", "true")
    job = head.wait_state(job_id, "FAILED", timeout=60)
    reason = str(job["reason"])
    said = f"launch failed: image {image} not found and it cannot be pulled ("
    assert reason.startswith(said), reason
    assert "docker: Error response" in reason and "--help" not in reason  # docker's words
    # Slurm's ExitCode for a launch failure, never 0:0 (success to a script).
    assert (job["exit_code"], job["exit_signal"]) == (1, 0)
    shown = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert f"JobState=FAILED Reason={said}" in shown and "ExitCode=1:0" in shown
    squeue = head.run("squeue", "-h", "-t", "all", "-o", "%i %t %R", check=True).stdout
    assert squeue.startswith(f"{job_id} F ({said}"), squeue
    sacct = head.run(
        "sacct", "-n", "-P", "-j", str(job_id), "-o", "State,ExitCode,Reason", check=True
    ).stdout
    assert sacct.startswith(f"FAILED|1:0|{said}"), sacct


# -- the engine itself goes away ---------------------------------------------------------


def stay_running_while_down(
    head: Head,
    engine: PrivateEngine,
    *job_ids: int,
    allowed: frozenset[str] = frozenset({"RUNNING"}),
) -> None:
    """While the engine is down nobody can tell whether a run lives (its container
    does, under its shim): the jobs must stay RUNNING, neither ended nor requeued.

    `allowed` widens that where the engine may have told gbatch the run's end before
    it went quiet (a clean stop)."""
    assert not engine.answers()
    deadline = time.monotonic() + QUIET_S
    while time.monotonic() < deadline:
        states = [head.state(job_id) for job_id in job_ids]
        assert set(states) <= allowed, states
        time.sleep(0.2)


def test_engine_crash_mid_job_ends_the_job_once_and_never_revives_its_container(
    head: Head, engine: PrivateEngine
) -> None:
    job_id = start_running(head, engine, "sleep 300")
    engine.crash()
    stay_running_while_down(head, engine, job_id)
    engine.start()  # restoring, the engine stops the orphaned container (SIGTERM)
    job = head.wait_state(job_id, "FAILED", timeout=30)
    assert (job["exit_code"], job["attempt"], job["reason"]) == (143, 1, "exit code 143")
    assert_never_revived(engine, job_id, attempts=1)


@pytest.mark.parametrize("restart", ["crash", "stop"])
def test_output_copied_while_the_engine_goes_away_is_whole_and_only_the_jobs(
    head: Head, engine: PrivateEngine, restart: str
) -> None:
    # The copy (`docker logs -f`) breaks with the engine: its last words are docker's
    # error, and what the engine gave before it went may be short. Once the engine
    # answers again the output is replayed whole from the container.
    out = head.home.parent / "out.txt"
    job_id = start_running(head, engine, "seq 1 500; echo last; sleep 300", "-o", str(out))
    wait_for(lambda: "last" in head.run("logs", str(job_id)).stdout, 30, "the output")
    engine.crash() if restart == "crash" else engine.stop()
    engine.start()
    head.wait_state(job_id, "FAILED", timeout=30)
    expected = [str(n) for n in range(1, 501)] + ["last"]
    assert head.run("logs", str(job_id), check=True).stdout.splitlines() == expected
    assert out.read_text().splitlines() == expected


@pytest.mark.parametrize("restart", ["crash", "stop"])
def test_engine_restart_mid_job_requeues_a_job_with_retries_exactly_once(
    head: Head, engine: PrivateEngine, restart: str
) -> None:
    job_id = start_running(head, engine, RUN_ONCE_LONG, "--retries", "1")
    allowed = frozenset({"RUNNING"})
    if restart == "crash":
        engine.crash()
    else:
        engine.stop()  # a clean shutdown stops the container itself (SIGTERM)
        # ... and answers `inspect` while it shuts down: a tick in that window sees the
        # container's exit 143 and rightly requeues the job before the engine is gone
        # (a loaded CI run saw it). It then waits, never ends or runs twice.
        allowed = frozenset({"RUNNING", "PENDING", "CONFIGURING"})
    stay_running_while_down(head, engine, job_id, allowed=allowed)
    engine.start()
    job = head.wait_state(job_id, "COMPLETED", timeout=30)
    final = int(job["attempt"])  # type: ignore[call-overload]
    assert [r for r in reasons(job) if r.startswith("retry")] == ["retry 1/1 after exit code 143"]
    assert head.run("logs", str(job_id), check=True).stdout.splitlines()[-1] == f"run {final}"
    if restart == "crash":
        assert final == 2
        assert_never_revived(engine, job_id, attempts=2)
        return
    # Requeued during the stop, the job may have been tried on the engine before it
    # came back: each such try started nothing and cost no retry (its reason says why).
    refused = [r for r in reasons(job) if "does not answer" in r]
    assert final == 2 + len(refused), reasons(job)
    assert_never_revived(engine, job_id, attempts=final, started={1, final})


@pytest.mark.parametrize(("exit_code", "state"), [(0, "COMPLETED"), (3, "FAILED")])
def test_a_job_that_ends_while_the_engine_is_down_keeps_its_own_exit_code(
    head: Head, engine: PrivateEngine, exit_code: int, state: str
) -> None:
    job_id = start_running(head, engine, f"sleep 2; exit {exit_code}")
    pid = engine.container_pid(container_name(job_id, 1))
    engine.crash()
    # The container ends meanwhile; its shim keeps the exit code.
    wait_for(lambda: is_gone(pid), 30, "the container to end while the engine is down")
    engine.start()
    job = head.wait_state(job_id, state, timeout=30)
    assert (job["exit_code"], job["attempt"]) == (exit_code, 1)
    assert_never_revived(engine, job_id, attempts=1)


def test_daemon_and_engine_down_together_reconcile_when_the_daemon_starts(
    head: Head, engine: PrivateEngine
) -> None:
    retried = start_running(head, engine, RUN_ONCE_LONG, "--retries", "1")
    ends_meanwhile = start_running(head, engine, "sleep 2")
    pid = engine.container_pid(container_name(ends_meanwhile, 1))
    stopped = submit(head, "sleep 300", "--gpus", "0")  # the last --gpus wins: none left
    head.wait_state(stopped, "RUNNING", timeout=60)
    head.stop()  # the jobs outlive the daemon, as designed
    engine.crash()
    wait_for(lambda: is_gone(pid), 30, "`ends_meanwhile` to end with both down")
    engine.start()
    head.start()  # reconciles the store with what the engine now says
    assert head.wait_state(retried, "COMPLETED", timeout=30)["attempt"] == 2
    done = head.wait_state(ends_meanwhile, "COMPLETED", timeout=30)
    assert (done["exit_code"], done["attempt"]) == (0, 1)
    failed = head.wait_state(stopped, "FAILED", timeout=30)
    assert (failed["exit_code"], failed["attempt"]) == (143, 1)
    assert_never_revived(engine, retried, attempts=2)
    assert_never_revived(engine, ends_meanwhile, attempts=1)
    assert_never_revived(engine, stopped, attempts=1)


def test_an_image_job_that_becomes_runnable_while_the_engine_is_down_waits_for_it(
    head: Head, engine: PrivateEngine
) -> None:
    job_id = submit(head, "echo ran", "--retries", "2", "--hold")
    engine.crash()
    head.run("scontrol", "release", str(job_id), check=True)
    time.sleep(QUIET_S)
    job = head.job(job_id)
    # At most the one launch that found the engine gone (the daemon's engine check is
    # cached); then it waits as NodeDown, and that launch cost it no retry.
    assert (job["state"], job["reason"]) == ("PENDING", "NodeDown")
    assert int(job["attempt"]) <= 1  # type: ignore[call-overload]
    assert not any(r.startswith(("retry", "launch failed")) for r in reasons(job)), reasons(job)
    engine.start()
    done = head.wait_state(job_id, "COMPLETED", timeout=30)
    assert done["attempt"] == int(job["attempt"]) + 1  # type: ignore[call-overload]
