"""A secret env value end to end: the job's container sees it, and nothing else shows
it: not the store (any column, the database and WAL bytes), not squeue, sacct,
scontrol or the TUI job view, not the daemon's log or the job logs, not `ps` on the
head or in a GPU host, and not the env-file on disk once the container has started.

Not checked, on purpose: `docker inspect` (Config.Env holds every env-file value; it is
docker's, readable by root and the docker group only) and /proc/PID/environ of a bare
process (readable by its own user and root only).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GBATCH, Head, kill_leftover_jobs, make_head, wait_for
from dockerenv import ensure_test_image, require_docker
from fleet import Fleet, build_fleet, teardown_fleet

from gbatch.nodes.docker import container_name

pytestmark = pytest.mark.docker

# The job hashes the value it sees, so its log proves it arrived without showing it.
HASH_JOB = 'printf %s "$TOKEN" | sha256sum'


def new_secret() -> str:
    return "gbts-" + secrets.token_hex(16)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def sbatch_with_secret(head: Head, secret: str, *args: str) -> int:
    """`gbatch sbatch --secret-env TOKEN`, the value in the submitter's environment only
    (never the daemon's: its bare jobs would inherit it)."""
    result = subprocess.run(
        [*GBATCH, "sbatch", "--parsable", "--secret-env", "TOKEN", *args],
        env={**head.env, "TOKEN": secret},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=head.home,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def assert_absent(secret: str, text: str | bytes, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    assert secret.encode() not in data, f"the secret value appears in {where}"


def cli_outputs(head: Head, job_ids: list[int]) -> dict[str, str]:
    outputs = {}
    for args in (["squeue"], ["squeue", "--json"], ["sacct"], ["sacct", "--json"]):
        outputs[" ".join(args)] = head.run(*args, check=True).stdout
    for job_id in job_ids:
        for extra in ([], ["--json"]):
            args = ["scontrol", "show", "job", str(job_id), *extra]
            outputs[" ".join(args)] = head.run(*args, check=True).stdout
    return outputs


def assert_store_holds_no_plain_secret(home: Path, secret: str, secret_jobs: int) -> None:
    """Every cell of every table, read raw; the database and WAL bytes, before and after a
    checkpoint."""
    db = home / "gbatch.db"
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in raw.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    cell_bytes = cell if isinstance(cell, bytes) else str(cell).encode()
                    assert_absent(secret, cell_bytes, f"table {table}")
        sealed = raw.execute("SELECT count(*) FROM job_secrets").fetchone()[0]
        assert sealed == secret_jobs
    finally:
        raw.close()
    wal = db.with_name(db.name + "-wal")
    if wal.exists():
        assert_absent(secret, wal.read_bytes(), "the store's WAL")
    writer = sqlite3.connect(db)
    try:
        writer.execute("PRAGMA wal_checkpoint(FULL)")
    finally:
        writer.close()
    if wal.exists():
        assert_absent(secret, wal.read_bytes(), "the store's WAL after a checkpoint")
    assert_absent(secret, db.read_bytes(), "the store's file")
    key = home / "secrets.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def assert_no_file_holds(root: Path, secret: str) -> None:
    """Every file under the head's home: daemon log, job logs, run dirs, the store."""
    checked = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_socket():
            assert_absent(secret, path.read_bytes(), str(path))
            checked += 1
    assert checked > 0


def ps_args() -> str:
    return subprocess.run(
        ["ps", "-eo", "args"], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def docker_top(name: str) -> str:
    result = subprocess.run(
        ["docker", "top", name, "-eo", "pid,args"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def tui_job_view_text(head: Head, job_id: int) -> str:
    """What the TUI's job view shows of `job_id`: its record and title widgets, and the
    whole screen as exported (SVG)."""
    # Deferred: textual is only for this part of the test.
    from textual.widgets import Static

    from gbatch.tui.app import make_app
    from gbatch.tui.jobview import JobScreen

    app = make_app(head.home / "gbatchd.sock", user="root", refresh_seconds=0.2)
    seen: dict[str, str] = {}

    async def main() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await app.push_screen(JobScreen(app.services, job_id))
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                record = str(app.screen.query_one("#record", Static).content)
                if "Events:" in record:
                    break
                await pilot.pause(0.05)
            await pilot.pause(0.3)
            seen["record"] = str(app.screen.query_one("#record", Static).content)
            seen["title"] = str(app.screen.query_one("#title", Static).content)
            seen["screen"] = app.export_screenshot()

    asyncio.run(main())
    assert "Events:" in seen["record"], "the job view never showed the job"
    return "\n".join(seen.values())


# -- the embedded local node ----------------------------------------------------------


@pytest.fixture
def submitted() -> list[int]:
    """Job ids a test queued: its containers are removed at teardown."""
    return []


@pytest.fixture
def docker_head(tmp_path: Path, submitted: list[int]) -> Iterator[Head]:
    require_docker()
    ensure_test_image()
    head = make_head(tmp_path / "home", gpus=2)
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)
    for job_id in submitted:
        name = container_name(job_id, 1)
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def test_secret_reaches_the_job_and_shows_nowhere_on_the_local_node(
    docker_head: Head, submitted: list[int]
) -> None:
    head = docker_head
    secret = new_secret()
    image = ensure_test_image()
    hashed = sbatch_with_secret(head, secret, "-J", "hashed", "--image", image, "--wrap", HASH_JOB)
    bare = sbatch_with_secret(head, secret, "-J", "bare", "--wrap", HASH_JOB)
    sleeper = sbatch_with_secret(
        head, secret, "-J", "sleeper", "--gpus", "1", "--image", image, "--wrap", "sleep 120"
    )
    bare_sleeper = sbatch_with_secret(head, secret, "-J", "bare-sleeper", "--wrap", "sleep 120")
    ids = [hashed, bare, sleeper, bare_sleeper]
    submitted.extend(ids)

    for job_id in (hashed, bare):
        head.wait_state(job_id, "COMPLETED", timeout=60)
        log = head.run("logs", str(job_id), check=True).stdout
        assert digest(secret) in log, f"job {job_id} did not see the value: {log!r}"
    for job_id in (sleeper, bare_sleeper):
        head.wait_state(job_id, "RUNNING", timeout=60)

    # The processes, while they run: argv on the head, and inside the container.
    assert_absent(secret, ps_args(), "`ps -eo args` on the head")
    assert "sleep 120" in docker_top(container_name(sleeper, 1))
    assert_absent(secret, docker_top(container_name(sleeper, 1)), "`docker top`")
    inside = subprocess.run(
        ["docker", "exec", container_name(sleeper, 1), "ps", "-o", "args"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert inside.returncode == 0 and "sleep 120" in inside.stdout, inside.stderr
    assert_absent(secret, inside.stdout, "`ps` inside the container")
    # The env-file went once docker had read it.
    assert not (head.home / "run" / f"{sleeper}.1" / "env").exists()

    outputs = cli_outputs(head, ids)
    for what, text in outputs.items():
        assert_absent(secret, text, what)
    assert "TOKEN=<secret>" in outputs[f"scontrol show job {sleeper}"]
    tui_text = tui_job_view_text(head, sleeper)
    assert "TOKEN=<secret>" in tui_text
    assert_absent(secret, tui_text, "the TUI job view")

    assert_store_holds_no_plain_secret(head.home, secret, secret_jobs=len(ids))
    for job_id in (sleeper, bare_sleeper):
        head.run("scancel", str(job_id), check=True)
        head.wait_state(job_id, "CANCELLED", timeout=60)
    assert_no_file_holds(head.home, secret)
    assert (head.home / "gbatchd.log").exists()


def test_secret_env_from_a_job_file_and_bad_ones_refused(
    docker_head: Head, submitted: list[int]
) -> None:
    head = docker_head
    secret = new_secret()
    job_file = head.home.parent / "job.yaml"
    job_file.write_text(f'command: {HASH_JOB!r}\nsecret_env:\n  TOKEN: "{secret}"\n')
    job_id = head.sbatch(str(job_file))
    submitted.append(job_id)
    head.wait_state(job_id, "COMPLETED", timeout=60)
    assert digest(secret) in head.run("logs", str(job_id), check=True).stdout

    clash = head.run("sbatch", "--secret-env", "TOKEN", "--wrap", "true")
    assert clash.returncode != 0
    assert clash.stderr.startswith("gbatch sbatch: error: --secret-env: TOKEN is not set")
    assert "Traceback" not in clash.stderr
    both = head.home.parent / "both.yaml"
    both.write_text(f'command: "true"\nenv:\n  TOKEN: x\nsecret_env:\n  TOKEN: "{secret}"\n')
    refused = head.run("sbatch", str(both))
    assert refused.returncode != 0
    assert "secret_env: TOKEN is set in both env and secret_env" in refused.stderr
    assert_absent(secret, refused.stderr, "the refusal")
    assert head.run("squeue", "-h", check=True).stdout.strip() == ""
    assert_no_file_holds(head.home, secret)


# -- a GPU host over SSH --------------------------------------------------------------


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, {f"gbts{os.getpid() % 10000}": 1})
    yield built
    teardown_fleet(built)


def test_secret_reaches_a_remote_job_and_shows_nowhere_on_its_host(fleet: Fleet) -> None:
    head = fleet.head
    [(name, host)] = fleet.hosts.items()
    wait_for(lambda: " idle " in f" {head.run('sinfo', '-h').stdout} ", 30, "the host to report")
    secret = new_secret()
    hashed = sbatch_with_secret(head, secret, "--image", fleet.image, "--wrap", HASH_JOB)
    head.wait_state(hashed, "COMPLETED", timeout=60)
    assert digest(secret) in head.run("logs", str(hashed), check=True).stdout
    sleeper = sbatch_with_secret(
        head, secret, "--gpus", "1", "--image", fleet.image, "--wrap", "sleep 120"
    )
    head.wait_state(sleeper, "RUNNING", timeout=60)

    in_host = subprocess.run(
        ["docker", "exec", host.container.get_container_id(), "ps", "-eo", "args"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert in_host.returncode == 0, in_host.stderr
    assert "gbatch_agent.py" in in_host.stdout  # the host's processes, not an empty list
    assert_absent(secret, in_host.stdout, f"`ps -eo args` in host {name}")
    assert_absent(secret, ps_args(), "`ps -eo args` on the head")
    assert_absent(secret, docker_top(container_name(sleeper, 1)), "`docker top`")
    # The env-file (in the host's agent_dir, shared with this machine) is gone.
    run_dir = fleet.agent_dirs[name] / "run"
    assert not list(run_dir.glob(f"{sleeper}.*.env")), sorted(run_dir.iterdir())
    for path in fleet.agent_dirs[name].rglob("*"):
        if path.is_file():
            assert_absent(secret, path.read_bytes(), str(path))

    for what, text in cli_outputs(head, [hashed, sleeper]).items():
        assert_absent(secret, text, what)
    assert_store_holds_no_plain_secret(head.home, secret, secret_jobs=2)
    head.run("scancel", str(sleeper), check=True)
    head.wait_state(sleeper, "CANCELLED", timeout=60)
    assert_no_file_holds(head.home, secret)
