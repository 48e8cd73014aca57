"""The bare-process shim as a real process: it copies the job's output into the log,
records the exit, never lets a full log fail the job, and waits out a full disk
before recording what the daemon needs."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gbatch import shim
from gbatch.nodes.joblog import MAX_LOG_BYTES_ENV, truncation_note
from gbatch.nodes.outfiles import OUT_FILES_ENV

NO_SPACE = os.strerror(errno.ENOSPC)


def run_shim(
    run_dir: Path,
    log: Path,
    script: str,
    timeout: float = 30,
    env: dict[str, str] | None = None,
) -> dict[str, object]:
    run_dir.mkdir(exist_ok=True)
    with open(log, "ab") as out:
        subprocess.run(
            [sys.executable, "-m", "gbatch.shim", str(run_dir), "--", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            timeout=timeout,
            check=True,
            env=None if env is None else {**os.environ, **env},
        )
    ended: dict[str, object] = json.loads((run_dir / "exit.json").read_text())
    return ended


def test_the_jobs_output_and_exit_status_are_recorded(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    ended = run_shim(tmp_path / "run", log, "echo out; echo err >&2; echo more; exit 3")
    assert log.read_text() == "out\nerr\nmore\n"
    assert ended["exit_code"] == 3 and ended["signal"] == 0 and "output_lost" not in ended
    pids = json.loads((tmp_path / "run" / "pids.json").read_text())
    assert set(pids) == {"shim", "pgid"}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_log_never_fails_the_jobs_own_writes(tmp_path: Path) -> None:
    # /dev/full refuses every write with ENOSPC, as a full disk does.
    ended = run_shim(
        tmp_path / "run", Path("/dev/full"), "echo one || exit 3; echo two >&2 || exit 4"
    )
    assert ended["exit_code"] == 0
    assert ended["output_lost"] == f"8 bytes of output lost: log write failed: {NO_SPACE}"


def test_output_past_max_log_bytes_is_dropped_while_the_job_runs_on(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    seen_env = tmp_path / "env"
    script = f"head -c 5000 /dev/zero | tr '\\0' a || exit 3; env > {seen_env}; echo end"
    cap = {MAX_LOG_BYTES_ENV: "2048"}
    ended = run_shim(tmp_path / "run1", log, script, env=cap)
    line = f"\n[gbatch: {truncation_note(2048)}]\n"
    assert ended["exit_code"] == 0 and "output_lost" not in ended
    assert log.read_text() == "a" * 2048 + line
    assert MAX_LOG_BYTES_ENV not in seen_env.read_text()  # the shim's, not the job's
    # A second attempt writes to the same log, already at its limit: only the line.
    ended = run_shim(tmp_path / "run2", log, script, env=cap)
    assert ended["exit_code"] == 0
    assert log.read_text() == "a" * 2048 + line + line


def test_a_process_the_job_leaves_behind_does_not_hold_up_the_jobs_end(tmp_path: Path) -> None:
    pid_file = tmp_path / "orphan.pid"
    started = time.monotonic()
    try:
        ended = run_shim(
            tmp_path / "run", tmp_path / "job.log", f"sleep 30 & echo $! > {pid_file}; echo done"
        )
        assert time.monotonic() - started < shim.OUTPUT_GRACE_SECONDS + 10
        assert ended["exit_code"] == 0
        assert (tmp_path / "job.log").read_text() == "done\n"
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), 9)


def test_a_command_that_cannot_start_is_recorded_as_127(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = tmp_path / "job.log"
    with open(log, "ab") as out:
        subprocess.run(
            [sys.executable, "-m", "gbatch.shim", str(run_dir), "--", "/no/such/program"],
            stdout=out,
            stderr=out,
            timeout=30,
        )
    assert json.loads((run_dir / "exit.json").read_text())["exit_code"] == 127
    assert "cannot start '/no/such/program'" in log.read_text()


def test_a_record_is_retried_while_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = [OSError(errno.ENOSPC, NO_SPACE), OSError(errno.EDQUOT, "quota")]
    written: list[dict[str, object]] = []

    def write(path: Path, data: dict[str, object], durable: bool = True) -> None:
        if refusals:
            raise refusals.pop(0)
        written.append(data)

    monkeypatch.setattr(shim, "write_atomically", write)
    sleeps: list[float] = []
    attempts: list[int] = []
    shim.write_when_possible(
        tmp_path / "exit.json",
        lambda: {"exit_code": 0},
        before_each=lambda: attempts.append(1),
        sleep=sleeps.append,
    )
    assert written == [{"exit_code": 0}]
    assert sleeps == [shim.RETRY_SECONDS] * 2 and len(attempts) == 3


def test_only_the_exit_record_waits_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exit.json is fsynced (a restarted machine's daemon reads it); pids.json, which
    matters only while the shim lives, is not (an fsync per job start)."""
    synced: list[int] = []
    monkeypatch.setattr(shim.os, "fsync", synced.append)
    shim.write_atomically(tmp_path / "pids.json", {"shim": 1}, durable=False)
    assert synced == [] and json.loads((tmp_path / "pids.json").read_text()) == {"shim": 1}
    shim.write_atomically(tmp_path / "exit.json", {"exit_code": 0})
    assert len(synced) == 1 and json.loads((tmp_path / "exit.json").read_text())

    durable: dict[str, bool] = {}

    def write(path: Path, make_data: Callable[[], dict[str, object]], **kwargs: object) -> None:
        durable[path.name] = bool(kwargs.get("durable", True))
        shim.write_atomically(path, make_data(), durable=False)

    monkeypatch.setattr(shim, "write_when_possible", write)
    monkeypatch.setattr(shim.signal, "signal", lambda *args: None)  # not pytest's own
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(tmp_path / "log", "w") as log:
        monkeypatch.setattr(sys, "stdout", log)
        assert shim.main([str(run_dir), "--", "true"]) == 0
    assert durable == {"pids.json": False, "exit.json": True}


def test_a_record_that_fails_for_another_reason_is_not_retried(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        shim.write_when_possible(
            tmp_path / "gone" / "exit.json", lambda: {"exit_code": 0}, sleep=pytest.fail
        )


def test_the_shim_reads_whom_to_run_as() -> None:
    run_dir, identity, command = shim.parse_args(
        ["/run/7.1", "--as", "1001", "1001", "27,100", "/home/alice", "--", "sh", "-c", "id"]
    ) or (None, None, None)
    assert run_dir == Path("/run/7.1") and command == ["sh", "-c", "id"]
    assert identity == shim.Identity(1001, 1001, (27, 100), "/home/alice")
    assert identity.popen_options()["extra_groups"] == [27, 100, 1001]
    assert identity.popen_options()["umask"] == 0o022
    assert shim.parse_args(["/run/7.1", "--", "true"]) == (Path("/run/7.1"), None, ["true"])
    assert shim.parse_args(["/run/7.1", "--as", "1001", "--", "true"]) is None
    assert shim.parse_args(["/run/7.1"]) is None


def run_shim_with_files(tmp_path: Path, script: str, out: str, err: str | None) -> Path:
    """The shim told of the job's own output files, as the daemon tells it; the log."""
    run_dir, log = tmp_path / "run", tmp_path / "job.log"
    run_dir.mkdir()
    plan = {"job": 5, "paths": [out] if err is None else [out, err], "truncate": True}
    env = {**os.environ, OUT_FILES_ENV: json.dumps(plan)}
    with open(log, "ab") as handle:
        subprocess.run(
            [sys.executable, "-m", "gbatch.shim", str(run_dir), "--", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=handle,
            timeout=30,
            check=True,
            env=env,
        )
    return log


def test_the_jobs_output_files_get_stdout_and_stderr_apart_besides_the_log(
    tmp_path: Path,
) -> None:
    out, err = tmp_path / "o", tmp_path / "e"
    seen = tmp_path / "seen"
    script = f"echo out; echo err >&2; env | grep -c GBATCH_OUT_FILES > {seen}; true"
    log = run_shim_with_files(tmp_path, script, str(out), str(err))
    assert (out.read_text(), err.read_text()) == ("out\n", "err\n")
    assert sorted(log.read_text().splitlines()) == ["err", "out"]
    assert seen.read_text() == "0\n"  # the files are the shim's


def test_without_e_stderr_goes_to_the_output_file(tmp_path: Path) -> None:
    out = tmp_path / "o"
    log = run_shim_with_files(tmp_path, "echo out; echo err >&2", str(out), None)
    assert out.read_text() == log.read_text() == "out\nerr\n"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_output_file_that_is_not_a_regular_one_is_refused_and_the_job_runs_on(
    tmp_path: Path, kind: str
) -> None:
    if kind == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)  # nobody reads it: an open without O_NONBLOCK would wait
        what = "a FIFO"
    else:  # /dev/full: it would refuse every write, as a full disk does
        target, what = "/dev/full", "a device"
    log = run_shim_with_files(tmp_path, "echo one || exit 3; echo two", target, None)
    assert log.read_text().splitlines() == [
        f"[gbatch: the output file is not written ({target} is {what}; a job writes only "
        "to a regular file or /dev/null); this attempt's output is in `gbatch logs 5` only]",
        "one",
        "two",
    ]
    assert json.loads((tmp_path / "run" / "exit.json").read_text())["exit_code"] == 0
