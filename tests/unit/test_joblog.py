"""The job log writer and the container log followers: a log that cannot be written
never fails the job nor stops the copy, and the log says what was lost."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path

import pytest

from gbatch.nodes.joblog import (
    LogFollowers,
    LogWriter,
    StreamCut,
    mark_attempt_start,
    size_text,
    truncation_note,
)
from gbatch.site.config import Paths

NO_SPACE = os.strerror(errno.ENOSPC)


class Disk:
    """A log on a disk with `free` bytes left: writes what fits, then ENOSPC."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.data = b""

    def write(self, data: bytes) -> int:
        if self.free == 0:
            raise OSError(errno.ENOSPC, NO_SPACE)
        taken = bytes(data[: self.free])
        self.data += taken
        self.free -= len(taken)
        return len(taken)


def test_output_goes_to_the_log_while_there_is_room() -> None:
    disk = Disk(free=100)
    writer = LogWriter(disk.write)
    writer.write(b"hello\n")
    writer.write(b"world\n")
    writer.finish()
    assert disk.data == b"hello\nworld\n"
    assert writer.lost_bytes == 0 and writer.note() is None


def test_output_the_full_disk_refuses_is_dropped_then_reported_once_there_is_room() -> None:
    disk = Disk(free=4)
    writer = LogWriter(disk.write)
    writer.write(b"abcdef")  # 4 bytes fit, 2 are lost
    writer.write(b"ghij")  # all lost
    disk.free = 1000
    writer.write(b"back\n")
    assert disk.data == (
        b"abcd\n[gbatch: 6 bytes of output lost: log write failed: "
        + NO_SPACE.encode()
        + b"]\nback\n"
    )
    assert writer.note() == f"6 bytes of output lost: log write failed: {NO_SPACE}"


def test_a_loss_at_the_end_is_reported_by_finish_when_the_log_takes_it() -> None:
    disk = Disk(free=0)
    writer = LogWriter(disk.write)
    writer.write(b"lost\n")
    writer.finish()  # still full: nothing to say it with
    assert disk.data == b""
    disk.free = 1000
    writer.finish()
    writer.finish()  # said once
    assert (
        disk.data == f"\n[gbatch: 5 bytes of output lost: log write failed: {NO_SPACE}]\n".encode()
    )


def test_a_marker_that_does_not_fit_keeps_the_output_dropped_and_counted() -> None:
    disk = Disk(free=0)
    writer = LogWriter(disk.write)
    writer.write(b"12345")
    disk.free = 10  # room for a fragment of the marker, not all of it
    writer.write(b"678")
    assert writer.lost_bytes == 8
    disk.free = 1000
    writer.write(b"ok")
    # The marker counts everything lost since the log last said so.
    assert disk.data.endswith(
        b"[gbatch: 8 bytes of output lost: log write failed: " + NO_SPACE.encode() + b"]\nok"
    )


def cut_line(limit: int) -> bytes:
    return f"\n[gbatch: {truncation_note(limit)}]\n".encode()


def test_the_log_stops_at_its_limit_says_so_once_and_drops_the_rest() -> None:
    disk = Disk(free=10_000)
    writer = LogWriter(disk.write, limit=2048)
    writer.write(b"a" * 2000)
    writer.write(b"b" * 100)  # 48 fit
    writer.write(b"c" * 5000)
    writer.finish()
    assert disk.data == b"a" * 2000 + b"b" * 48 + cut_line(2048)
    assert writer.dropped_bytes == 52 + 5000
    assert writer.lost_bytes == 0 and writer.note() is None  # dropped by design, not lost


def test_the_limit_counts_what_the_log_held_before_this_attempt() -> None:
    disk = Disk(free=10_000)
    writer = LogWriter(disk.write, limit=2048, size=2040)
    writer.write(b"0123456789")
    assert disk.data == b"01234567" + cut_line(2048)
    # A log already past its limit (earlier attempts) takes only the line.
    disk.data = b""
    full = LogWriter(disk.write, limit=2048, size=4000)
    full.write(b"x")
    full.write(b"y")
    assert disk.data == cut_line(2048)


def test_the_truncation_line_names_the_setting_and_the_size() -> None:
    line = truncation_note(10 << 30)
    assert line.startswith("output truncated at 10.0 GiB (max_log_bytes); the job keeps running")
    assert "raises max_log_bytes in the head's config.yaml" in line
    assert [size_text(n) for n in (512, 1024, 1536 << 10, 1 << 40, 1 << 50)] == [
        "512 bytes",
        "1.0 KiB",
        "1.5 MiB",
        "1.0 TiB",
        "1024.0 TiB",
    ]


def test_a_truncation_line_the_full_disk_refuses_is_written_once_there_is_room() -> None:
    disk = Disk(free=1024)
    writer = LogWriter(disk.write, limit=1024)
    writer.write(b"z" * 2000)  # 1,024 fit, the line does not
    assert disk.data == b"z" * 1024
    writer.write(b"more")
    disk.free = 10_000
    writer.finish()
    assert disk.data == b"z" * 1024 + cut_line(1024)
    assert writer.dropped_bytes == 2000 - 1024 + 4


@contextmanager
def chunks_of(chunks: Iterator[bytes]) -> Iterator[Iterator[bytes]]:
    yield chunks


def follow_to_end(paths: Paths, job_id: int, attempt: int, *chunks: bytes) -> LogFollowers:
    """Follow a stream of `chunks` until the follower is done; asserts it read them all."""
    done = threading.Event()
    followers = LogFollowers(paths, done.set)
    mark_attempt_start(paths, job_id, attempt)
    stream = iter(chunks)
    followers.follow(job_id, attempt, lambda: chunks_of(stream))
    assert done.wait(10)
    followers.wait(job_id, attempt)
    assert next(stream, None) is None, "the follower stopped before the end of the stream"
    return followers


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the daemon's log says (gbatch.joblog logs to gbatchd's logger)."""
    return [r.getMessage() for r in caplog.records if r.name == "gbatchd"]


def test_a_follower_copies_the_stream_into_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = Paths(tmp_path)
    follow_to_end(paths, 7, 1, b"one\n", b"two\n")
    assert paths.job_log(7).read_bytes() == b"one\ntwo\n"
    assert warnings_of(caplog) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_follower_on_a_full_disk_reads_the_stream_to_its_end_and_says_what_was_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = Paths(tmp_path)
    paths.logs.mkdir()
    paths.job_log(7).symlink_to("/dev/full")  # every write: ENOSPC
    followers = follow_to_end(paths, 7, 1, b"one\n", b"two\n")
    assert followers.ended(7, 1) is False  # waited for and forgotten, not restarted
    # Once, at the first loss: not a line per chunk dropped.
    assert warnings_of(caplog) == [f"job 7: 4 bytes of output lost: log write failed: {NO_SPACE}"]


def test_a_follower_whose_log_cannot_be_opened_still_reads_the_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = Paths(tmp_path)
    mark_attempt_start(paths, 7, 1)
    paths.logs.write_text("not a directory")
    follow_to_end(paths, 7, 1, b"abc")
    (warning,) = warnings_of(caplog)
    assert warning.startswith("job 7: 3 bytes of output lost: log write failed: ")


def test_a_follower_stops_the_log_at_max_log_bytes_and_a_replay_writes_the_same_log(
    tmp_path: Path,
) -> None:
    paths = Paths(tmp_path)
    paths.logs.mkdir()
    paths.job_log(7).write_bytes(b"x" * 1000)  # attempt 1's output
    mark_attempt_start(paths, 7, 2)
    expected = b"x" * 1000 + b"y" * 1000 + b"z" * 48 + cut_line(2048)
    # The second follower is a restarted daemon's: it replays the container's output.
    for _ in range(2):
        done = threading.Event()
        followers = LogFollowers(paths, done.set, max_log_bytes=2048)
        stream = iter([b"y" * 1000, b"z" * 1000, b"w" * 1000])
        followers.follow(7, 2, partial(chunks_of, stream))
        assert done.wait(10)
        followers.wait(7, 2)
        assert next(stream, None) is None, "the follower stopped before the end of the stream"
        assert paths.job_log(7).read_bytes() == expected


def test_the_loops_wait_for_a_follower_never_waits_on_the_users_file_system(
    tmp_path: Path,
) -> None:
    """A follower whose open of the job's output file waits (a user's FUSE mount that
    does not answer) does not hold the loop's wait at the run's end; once the open
    ends, it copies the stream as always."""
    paths = Paths(tmp_path)
    mark_attempt_start(paths, 7, 1)
    opening, answer = threading.Event(), threading.Event()

    def open_files(say: object) -> None:
        opening.set()
        answer.wait(30)

    done = threading.Event()
    followers = LogFollowers(paths, done.set)
    followers.follow(7, 1, lambda: chunks_of(iter([b"out\n"])), open_files)
    assert opening.wait(10)
    began = time.monotonic()
    followers.wait(7, 1, timeout=5.0)
    assert time.monotonic() - began < 1.0
    answer.set()
    assert done.wait(10)
    assert paths.job_log(7).read_bytes() == b"out\n"


def test_a_follower_still_copying_after_a_timed_out_wait_is_not_started_twice(
    tmp_path: Path,
) -> None:
    # Under load a run's status check may stop waiting while the follower still copies;
    # a second check must wait on that one, never start a second copy beside it (both
    # would cut the log back and write: a CI run saw ['before', 'before', 'after']).
    paths = Paths(tmp_path)
    release, done = threading.Event(), threading.Event()
    followers = LogFollowers(paths, done.set)
    mark_attempt_start(paths, 7, 1)

    def slow() -> Iterator[bytes]:
        yield b"before\n"
        release.wait(10)
        yield b"after\n"

    opened: list[int] = []

    def stream() -> AbstractContextManager[Iterator[bytes]]:
        opened.append(1)
        return chunks_of(slow())

    followers.follow(7, 1, stream)
    assert followers.wait(7, 1, timeout=0.05) is True  # timed out: it still copies
    assert followers.copying(7, 1)
    followers.follow(7, 1, stream)
    release.set()
    assert done.wait(10)
    assert followers.wait(7, 1) is True
    assert opened == [1]
    assert paths.job_log(7).read_bytes() == b"before\nafter\n"


def test_a_follower_whose_stream_broke_says_so_once_and_a_replay_rewrites_the_log(
    tmp_path: Path,
) -> None:
    paths = Paths(tmp_path)
    done = threading.Event()
    followers = LogFollowers(paths, done.set)
    mark_attempt_start(paths, 7, 1)

    @contextmanager
    def broken() -> Iterator[Iterator[bytes]]:
        yield iter([b"before\n", b"error from daemon in stream\n"])
        raise StreamCut("docker logs exited 1")

    followers.follow(7, 1, broken)
    assert done.wait(10)
    assert followers.wait(7, 1) is False
    followers.follow(7, 1, lambda: chunks_of(iter([b"before\n", b"after\n"])))
    assert followers.wait(7, 1) is True
    assert paths.job_log(7).read_bytes() == b"before\nafter\n"


def test_an_ended_run_whose_output_is_still_copied_is_not_settled_till_it_is(
    tmp_path: Path,
) -> None:
    """A CI run found a job COMPLETED with an empty log: the status check's wait for its
    follower timed out under load and the run was reported final anyway."""
    paths = Paths(tmp_path)
    done = threading.Event()
    release = threading.Event()
    followers = LogFollowers(paths, done.set)
    mark_attempt_start(paths, 7, 1)

    def slow() -> Iterator[bytes]:
        yield b"before\n"
        release.wait(10)
        yield b"after\n"

    followers.follow(7, 1, lambda: chunks_of(slow()))
    assert followers.wait(7, 1, timeout=0.05) is True  # timed out: it still copies
    assert followers.settled(7, 1) is False  # so the run is not final yet
    started = time.monotonic()
    followers.wait(7, 1)  # asked again: a short look, not the whole wait
    assert time.monotonic() - started < 2
    assert followers.settled(7, 1, grace=0.0) is True  # a copy that never ends: given up
    release.set()
    assert done.wait(10)
    assert followers.wait(7, 1) is True
    assert followers.settled(7, 1) is True
    assert paths.job_log(7).read_bytes() == b"before\nafter\n"
