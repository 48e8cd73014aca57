"""Finished runs' directories are removed off the daemon loop's thread, and a path is
never written into again while its old directory is still being removed."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from gbatch.nodes import local
from gbatch.nodes.local import RunDirRemover
from gbatch.site.config import Config, Paths


def run_dir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir()
    for each in ("exit.json", "pids.json", "log_offset"):
        (path / each).write_text("{}")
    return path


def test_a_handed_over_directory_is_gone_once_flushed(tmp_path: Path) -> None:
    remover = RunDirRemover()
    dirs = [run_dir(tmp_path, f"{job}.1") for job in range(5)]
    for each in dirs:
        remover.remove(each)
    remover.flush()
    assert not any(each.exists() for each in dirs)


def test_waiting_for_a_path_returns_only_once_its_removal_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unblock = threading.Event()
    real = local.remove_run_dir

    def slow(path: Path) -> None:
        unblock.wait()
        real(path)

    monkeypatch.setattr(local, "remove_run_dir", slow)
    remover = RunDirRemover()
    doomed = run_dir(tmp_path, "7.2")
    remover.remove(doomed)
    seen: list[bool] = []

    def wait() -> None:
        remover.wait_gone(doomed)
        seen.append(doomed.exists())

    waiter = threading.Thread(target=wait)
    waiter.start()
    remover.wait_gone(tmp_path / "8.1")  # another path never waits on this one
    unblock.set()
    waiter.join()
    assert seen == [False]


def test_a_removal_that_fails_does_not_stop_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = local.remove_run_dir

    def first_fails(path: Path) -> None:
        if path.name == "1.1":
            raise PermissionError(13, "Permission denied")
        real(path)

    monkeypatch.setattr(local, "remove_run_dir", first_fails)
    remover = RunDirRemover()
    kept, removed = run_dir(tmp_path, "1.1"), run_dir(tmp_path, "2.1")
    remover.remove(kept)
    remover.remove(removed)
    remover.flush()
    assert kept.exists() and not removed.exists()  # the next daemon's sweep retries 1.1


def test_the_local_node_removes_a_finished_runs_directory_by_the_time_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unblock = threading.Event()
    real = local.remove_run_dir

    def gated(path: Path) -> None:
        unblock.wait()
        real(path)

    monkeypatch.setattr(local, "remove_run_dir", gated)
    paths = Paths(tmp_path)
    node = local.LocalNode(paths, Config(docker=str(tmp_path / "docker")), lambda: None)
    made = paths.make_run_dir(3, 1)
    (made / "exit.json").write_text("{}")
    node.cleanup(SimpleNamespace(id=3, spec=SimpleNamespace(image=None)), 1)  # type: ignore[arg-type]
    assert made.exists()  # handed over: the caller does not wait for the disk
    stopped = threading.Thread(target=node.stop)
    stopped.start()
    unblock.set()
    stopped.join()
    assert not made.exists()


def test_a_run_directory_removed_while_the_sessions_are_read_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The remover runs on its own thread: a run dir listed by the scan may be gone by the
    # time its steps are listed (a CI run saw FileNotFoundError end a loop step and a
    # submit). A dangling link that is_dir() calls a directory is such a run dir: listed,
    # then not there.
    paths = Paths(tmp_path)
    node = local.LocalNode(paths, Config(docker=str(tmp_path / "docker")), lambda: None)
    kept = paths.make_run_dir(3, 1)
    (kept / "pids.json").write_text('{"shim": 4242, "pgid": 4242}')
    paths.runs.joinpath("4.1").symlink_to(tmp_path / "removed")
    monkeypatch.setattr(Path, "is_dir", lambda self: True)
    assert node._gbatch_sessions() == {4242}
