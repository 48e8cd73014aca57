"""Every node's output of a job run on every node, joined into its one log as it
arrives (issue 32): whole lines only, every node's share against one max_log_bytes,
each line with its node's rank in the task log (`gbatch logs --label`), the -o file
the same lines, and a daemon restart neither loses nor doubles a line."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gbatch.nodes.joblog import (
    LogFollowers,
    NodeJoins,
    mark_attempt_start,
    node_label,
    node_log,
    truncation_note,
)
from gbatch.nodes.outfiles import OutputFiles
from gbatch.site.config import Paths

JOB, ATTEMPT = 7, 1


def started(tmp_path: Path, before: bytes = b"") -> Paths:
    """The head's files, the job's log holding `before` when its attempt starts."""
    paths = Paths(tmp_path)
    paths.logs.mkdir(parents=True)
    paths.job_log(JOB).write_bytes(before)
    mark_attempt_start(paths, JOB, ATTEMPT)
    return paths


def copied(paths: Paths, index: int, data: bytes) -> None:
    """Node `index`'s follower copied `data` to its part (appended)."""
    with open(node_log(paths, JOB, ATTEMPT, index), "ab") as part:
        part.write(data)


def test_lines_of_each_node_reach_the_log_while_the_job_runs_whole_never_mixed(
    tmp_path: Path,
) -> None:
    paths = started(tmp_path, b"attempt 0\n")
    join = NodeJoins(paths, None).of(JOB, ATTEMPT, 2)
    assert join is not None
    copied(paths, 0, b"rank 0 sta")
    join.pump(0)
    copied(paths, 1, b"rank 1 says hi\nrank 1 half")
    join.pump(1)
    copied(paths, 0, b"rts\n")
    join.pump(0)
    # Node 1's half line waits for its end; node 0's line is whole.
    assert paths.job_log(JOB).read_bytes() == b"attempt 0\nrank 1 says hi\nrank 0 starts\n"
    assert paths.task_log(JOB).read_bytes() == b"1: rank 1 says hi\n0: rank 0 starts\n"


def test_the_end_joins_every_nodes_last_line_ended_and_drops_the_parts(tmp_path: Path) -> None:
    paths = started(tmp_path)
    joins = NodeJoins(paths, None)
    copied(paths, 0, b"zero\n")
    copied(paths, 1, b"one no newline")
    copied(paths, 2, b"two\n")
    # No follower pumped (the daemon restarted after the runs ended): the parts whole.
    joins.finish(JOB, ATTEMPT, 3)
    assert paths.job_log(JOB).read_bytes() == b"zero\none no newline\ntwo\n"
    assert paths.task_log(JOB).read_bytes() == b"0: zero\n1: one no newline\n2: two\n"
    assert not any(node_log(paths, JOB, ATTEMPT, i).exists() for i in range(3))
    assert joins.of(JOB, ATTEMPT, 3) is None  # a late follower adds nothing


def test_a_node_flooding_its_output_is_cut_at_max_log_bytes_counted_with_the_others(
    tmp_path: Path,
) -> None:
    paths = started(tmp_path, b"x" * 100)  # an earlier attempt's output counts, as on one node
    join = NodeJoins(paths, 1000).of(JOB, ATTEMPT, 2)
    assert join is not None
    copied(paths, 0, b"a" * 99 + b"\n")
    join.pump(0)
    for _ in range(50):
        copied(paths, 1, b"b" * 99 + b"\n")
        join.pump(1)
    copied(paths, 0, b"late\n")
    join.pump(0)
    log = paths.job_log(JOB).read_bytes()
    cut = f"\n[gbatch: {truncation_note(1000)}]\n".encode()
    assert log == b"x" * 100 + b"a" * 99 + b"\n" + (b"b" * 99 + b"\n") * 8 + cut
    assert len(paths.task_log(JOB).read_bytes()) <= 1000 + len(cut)


def test_a_line_that_never_ends_is_joined_in_pieces(tmp_path: Path) -> None:
    from gbatch.nodes.joblog import LONGEST_LINE

    paths = started(tmp_path)
    join = NodeJoins(paths, None).of(JOB, ATTEMPT, 2)
    assert join is not None
    copied(paths, 1, b"p" * (LONGEST_LINE + 10))
    join.pump(1)
    assert paths.job_log(JOB).read_bytes() == b"p" * LONGEST_LINE + b"\n"


def test_a_restarted_daemon_rejoins_the_replayed_parts_without_loss_or_doubles(
    tmp_path: Path,
) -> None:
    paths = started(tmp_path, b"attempt 0\n")
    first = NodeJoins(paths, None).of(JOB, ATTEMPT, 2)
    assert first is not None
    copied(paths, 0, b"a1\n")
    first.pump(0)
    copied(paths, 1, b"b1\n")
    first.pump(1)
    copied(paths, 1, b"b2\n")  # copied, not yet joined, when the daemon died
    # A new daemon: each follower replays its run's whole output into its part.
    joins = NodeJoins(paths, None)
    for index, replay in ((0, b"a1\na2\n"), (1, b"b1\nb2\nb3\n")):
        node_log(paths, JOB, ATTEMPT, index).write_bytes(b"")
        again = joins.of(JOB, ATTEMPT, 2)
        assert again is not None
        copied(paths, index, replay)
        again.pump(index)
    joins.finish(JOB, ATTEMPT, 2)
    assert paths.job_log(JOB).read_bytes() == b"attempt 0\na1\na2\nb1\nb2\nb3\n"
    assert paths.task_log(JOB).read_bytes() == b"0: a1\n0: a2\n1: b1\n1: b2\n1: b3\n"


def test_the_output_file_gets_every_nodes_lines_from_the_attempts_start(tmp_path: Path) -> None:
    paths = started(tmp_path, b"attempt 0\n")
    join = NodeJoins(paths, None).of(JOB, ATTEMPT, 2)
    assert join is not None
    copied(paths, 1, b"early from node 1\n")
    join.pump(1)
    out = tmp_path / "slurm-7.out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    join.attach(OutputFiles(fd, fd, str(out), str(out)))
    copied(paths, 0, b"from node 0\n")
    join.pump(0)
    join.finish()
    assert out.read_bytes() == b"early from node 1\nfrom node 0\n"


def test_the_label_is_the_nodes_rank_padded_as_srun_l_does() -> None:
    assert node_label(1, 2) == b"1: "
    assert node_label(3, 12) == b" 3: "


@contextmanager
def chunks_of(chunks: list[bytes], gate: threading.Event) -> Iterator[Iterator[bytes]]:
    def each() -> Iterator[bytes]:
        yield from chunks
        gate.wait(10)  # the run goes on until the test lets it end

    yield each()


def test_followers_of_two_nodes_join_their_lines_into_the_log_while_they_run(
    tmp_path: Path,
) -> None:
    paths = started(tmp_path)
    joins = NodeJoins(paths, 200)
    gate = threading.Event()
    followers = []

    def joined(*lines: bytes) -> bool:
        log = paths.job_log(JOB).read_bytes()
        return all(line in log for line in lines)

    # Node 0's line is joined before node 1 starts: node 1's long line then fills the
    # limit the nodes share (were it first, node 0's line would be dropped past it, as
    # it ought to: a loaded run's thread order made that happen).
    for index, chunks, lines in (
        (0, [b"zero ", b"here\n"], (b"zero here\n",)),
        (1, [b"one\n", b"y" * 300 + b"\n"], (b"zero here\n", b"one\n", b"truncated")),
    ):
        done = threading.Event()
        follower = LogFollowers(paths, done.set, 200, joins)
        follower.follow(JOB, ATTEMPT, lambda c=chunks: chunks_of(c, gate), part=(index, 2))
        followers.append((follower, done))
        # Waits on the state, up to a bound a loaded 2-core run keeps under (a helper's
        # full run at load 28 ran past 10 s).
        pause = threading.Event()
        deadline = time.monotonic() + 60
        while not joined(*lines) and time.monotonic() < deadline:
            pause.wait(0.05)
        assert joined(*lines)
    gate.set()
    for follower, done in followers:
        assert done.wait(10)
        follower.wait(JOB, ATTEMPT)
    joins.finish(JOB, ATTEMPT, 2)
    log = paths.job_log(JOB).read_bytes()
    assert len(log) <= 200 + len(f"\n[gbatch: {truncation_note(200)}]\n")
    # Each part was bounded too (the head's disk holds no more than the limit per node).
    assert not node_log(paths, JOB, ATTEMPT, 1).exists()


def test_the_loops_finish_of_a_join_never_waits_on_the_users_file_system(
    tmp_path: Path,
) -> None:
    import fcntl
    import time

    paths = started(tmp_path)
    joins = NodeJoins(paths, None)
    join = joins.of(JOB, ATTEMPT, 2)
    assert join is not None
    # An -o file that takes no more (a pipe nobody reads stands in for a stuck mount).
    reader, writer = os.pipe()
    fcntl.fcntl(writer, fcntl.F_SETFL, os.O_NONBLOCK)
    try:
        while True:
            os.write(writer, b"x" * 65536)
    except BlockingIOError:
        pass
    fcntl.fcntl(writer, fcntl.F_SETFL, 0)
    join.attach(OutputFiles(writer, writer, "stuck", "stuck"))
    copied(paths, 1, b"last words\n")
    began = time.monotonic()
    joins.finish(JOB, ATTEMPT, 2, timeout=0.2)
    assert time.monotonic() - began < 5
    assert paths.job_log(JOB).read_bytes() == b"last words\n"
    while os.read(reader, 65536 * 4).find(b"last words") < 0:
        pass  # drained: the join's own thread writes its line and ends
    os.close(reader)


def test_a_follower_started_again_alone_adds_only_what_its_node_had_not_joined(
    tmp_path: Path,
) -> None:
    paths = started(tmp_path)
    join = NodeJoins(paths, None).of(JOB, ATTEMPT, 2)
    assert join is not None
    copied(paths, 1, b"a\nb\n")
    join.pump(1)
    # Its SSH connection broke: the follower cuts its part back and replays it all.
    node_log(paths, JOB, ATTEMPT, 1).write_bytes(b"")
    for chunk in (b"a\n", b"b\nc", b"\n"):
        copied(paths, 1, chunk)
        join.pump(1)
    assert paths.job_log(JOB).read_bytes() == b"a\nb\nc\n"
