"""The GPUs' bounded sample history: 1-s samples for the last hour, 1-min figures for 30 days.

One ring file per GPU (`gpu-history/<node>.<index>.ring` in the daemon's home), of a
fixed size, so the history survives a restart and never grows:

  header      16 bytes: magic, version
  seconds   3,600 slots x  9 bytes: second (u32), utilisation % (u8, 255 unknown), MiB used (u32)
  minutes  43,200 slots x 14 bytes: minute (u32), mean and max utilisation (u8 each),
                                    mean and max MiB used (u32 each)

637,216 bytes a GPU (62 MiB for 100 GPUs), allocated whole when a ring is made. A slot is
the time modulo the ring's length; its stamp tells a current slot from one a lap old.
The minute under way is summed in memory and written when the next begins (a daemon
stopped mid-minute loses that minute). The daemon's loop is the only writer; handlers
read under the same lock. Bench: bench/bench_gpu_history.py.

A full disk: a ring's space is had when it is made or not at all (posix_fallocate),
so a GPU's samples are kept whole or dropped till the space is there, said once in
gbatchd.log. The files are read and written with pread/pwrite, never mapped: a mapped
page of a sparse ring on a full disk took the daemon down with SIGBUS, and so did a
mapped read past the end of a ring someone cut short, which now reads as no samples.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

MAGIC = b"gbhist01"
HEADER = struct.Struct("<8sQ")
SECOND = struct.Struct("<IBI")
MINUTE = struct.Struct("<IBBII")
SECONDS = 3600
MINUTES = 30 * 1440
FINE_OFFSET = HEADER.size
COARSE_OFFSET = FINE_OFFSET + SECONDS * SECOND.size
FILE_SIZE = COARSE_OFFSET + MINUTES * MINUTE.size
UNKNOWN = 255

log = logging.getLogger("gbatchd")


class Reading(Protocol):
    """One GPU as a node report reads it (nodes.report.GpuReport)."""

    @property
    def index(self) -> int: ...
    @property
    def memory_used_mib(self) -> int: ...
    @property
    def utilization_pct(self) -> int | None: ...


class Point(NamedTuple):
    """A GPU's figures over one step of a series.

    Utilisation mean and max (None: not told), memory used mean and max (MiB)."""

    time: float
    util: float | None
    util_max: int | None
    mem_mib: float
    mem_max_mib: int


class _Minute:
    __slots__ = ("mem_max", "mem_sum", "minute", "n", "util_max", "util_n", "util_sum")

    def __init__(self, minute: int) -> None:
        self.minute = minute
        self.util_n = self.util_sum = self.util_max = 0
        self.n = self.mem_sum = self.mem_max = 0

    def add(self, util: int | None, mem: int) -> None:
        if util is not None:
            self.util_n += 1
            self.util_sum += util
            self.util_max = max(self.util_max, util)
        self.n += 1
        self.mem_sum += mem
        self.mem_max = max(self.mem_max, mem)

    def point(self) -> Point:
        util = self.util_sum / self.util_n if self.util_n else None
        return Point(
            self.minute * 60.0,
            util,
            self.util_max if self.util_n else None,
            self.mem_sum / self.n if self.n else 0.0,
            self.mem_max,
        )


class _Ring:
    """One GPU's ring file, open for pread and pwrite."""

    def __init__(self, path: Path, allocate: bool) -> None:
        """The ring at `path`, made if need be; `allocate`: every block of it had now
        (OSError where the disk is full), for a ring about to be written."""
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self.minute: _Minute | None = None
        self.allocated = False
        try:
            if os.fstat(self.fd).st_size != FILE_SIZE:
                os.ftruncate(self.fd, 0)  # another layout or a torn file: start again
                os.ftruncate(self.fd, FILE_SIZE)
            if allocate:
                self.allocate()
        except BaseException:
            os.close(self.fd)
            raise

    def allocate(self) -> None:
        """Take every block of the ring now, and write its header; OSError on a full disk.

        A no-op for a ring made whole: no write needs a block later."""
        os.posix_fallocate(self.fd, 0, FILE_SIZE)
        if os.pread(self.fd, len(MAGIC), 0) != MAGIC:
            os.pwrite(self.fd, HEADER.pack(MAGIC, 1), 0)
        self.allocated = True

    def record(self, second: int, util: int | None, mem: int) -> None:
        """One second's sample; OSError (a full disk) where it cannot be written."""
        slot = FINE_OFFSET + (second % SECONDS) * SECOND.size
        os.pwrite(self.fd, SECOND.pack(second, UNKNOWN if util is None else util, mem), slot)
        minute = second // 60
        if self.minute is not None and self.minute.minute != minute:
            self._flush()
        if self.minute is None:
            self.minute = _Minute(minute)
        self.minute.add(util, mem)

    def _flush(self) -> None:
        done = self.minute
        if done is None or not done.n:
            return
        self.minute = None  # written or not: a minute is not summed twice
        p = done.point()
        slot = COARSE_OFFSET + (done.minute % MINUTES) * MINUTE.size
        util = UNKNOWN if p.util is None else round(p.util)
        util_max = UNKNOWN if p.util_max is None else p.util_max
        packed = MINUTE.pack(done.minute, util, util_max, round(p.mem_mib), p.mem_max_mib)
        os.pwrite(self.fd, packed, slot)

    def _slots(
        self, offset: int, layout: struct.Struct, length: int, first: int, count: int
    ) -> list[tuple[int, ...]]:
        """`count` slots of a ring from time `first` on (wrapping), in one pass each part."""
        begin = first % length
        head = min(count, length - begin)
        parts = [(begin, head), (0, count - head)] if count > head else [(begin, head)]
        out: list[tuple[int, ...]] = []
        for at, n in parts:
            size = n * layout.size
            # Short where the file was cut under us: the rest reads as empty slots.
            data = os.pread(self.fd, size, offset + at * layout.size).ljust(size, b"\0")
            out.extend(layout.iter_unpack(data))
        return out

    def seconds(self, start: int, end: int) -> list[Point]:
        first = max(start, end - SECONDS)
        if end <= first:
            return []
        out = []
        for second, (stamp, util, mem) in enumerate(
            self._slots(FINE_OFFSET, SECOND, SECONDS, first, end - first), first
        ):
            if stamp == second and stamp:
                told = None if util == UNKNOWN else util
                out.append(Point(float(second), told, told, float(mem), mem))
        return out

    def minutes(self, start: int, end: int) -> list[Point]:
        first, last = max(start // 60, end // 60 - MINUTES + 1), (end + 59) // 60
        if last <= first:
            return []
        out = []
        slots = self._slots(COARSE_OFFSET, MINUTE, MINUTES, first, last - first)
        for minute, (stamp, util, util_max, mem, mem_max) in enumerate(slots, first):
            if stamp == minute and stamp:
                out.append(
                    Point(
                        minute * 60.0,
                        None if util == UNKNOWN else float(util),
                        None if util_max == UNKNOWN else util_max,
                        float(mem),
                        mem_max,
                    )
                )
            elif self.minute is not None and self.minute.minute == minute:
                out.append(self.minute.point())
        return out

    def close(self) -> None:
        try:
            self._flush()
        finally:
            os.close(self.fd)


class GpuHistory:
    """Every GPU's ring, by (node, index), in `directory` (made 0700 on first use)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._rings: dict[tuple[str, int], _Ring] = {}
        self._lock = threading.Lock()
        # The GPUs whose last write failed: said once in the log as the first fails,
        # once again when the last of them writes.
        self._failing: set[tuple[str, int]] = set()

    def _ring(self, node: str, index: int, create: bool) -> _Ring | None:
        key = (node, index)
        ring = self._rings.get(key)
        if ring is None:
            path = self.directory / f"{urllib.parse.quote(node, safe='')}.{index}.ring"
            if not create and not path.exists():
                return None
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            ring = self._rings[key] = _Ring(path, allocate=create)
        elif create and not ring.allocated:  # opened to be read, now to be written
            ring.allocate()
        return ring

    def record(self, node: str, readings: Iterable[Reading], now: float) -> None:
        """One report's readings of `node`'s GPUs at `now` (a second's slot: the latest wins)."""
        second = int(now)
        with self._lock:
            failed: OSError | None = None
            was_failing = bool(self._failing)
            for gpu in readings:
                util = gpu.utilization_pct
                try:
                    ring = self._ring(node, gpu.index, create=True)
                    assert ring is not None
                    ring.record(
                        second,
                        None if util is None else min(max(util, 0), 100),
                        gpu.memory_used_mib,
                    )
                except OSError as err:  # a full disk: the history is a feed, the loop goes on
                    failed = err
                    self._failing.add((node, gpu.index))
                else:
                    self._failing.discard((node, gpu.index))
            if failed is not None and not was_failing:
                log.error("GPU history: cannot write (%s); samples dropped till it can", failed)
            elif was_failing and not self._failing:
                log.info("GPU history: writes again")

    def series(self, node: str, index: int, start: float, end: float, now: float) -> list[Point]:
        """The GPU's points in [start, end); [] for a GPU never sampled.

        Each second's where the range lies within the last hour, else each minute's."""
        with self._lock:
            ring = self._ring(node, index, create=False)
            if ring is None:
                return []
            if start >= now - SECONDS:
                return ring.seconds(int(start), int(end))
            return ring.minutes(int(start), int(end))

    def close(self) -> None:
        with self._lock:
            for ring in self._rings.values():
                try:
                    ring.close()
                except OSError as err:  # its last minute is lost, as a stop mid-minute's
                    log.error("GPU history: cannot write its last minute (%s)", err)
            self._rings.clear()


def bucketed(points: Sequence[Point], start: float, end: float, buckets: int) -> list[Point]:
    """`points` merged into at most `buckets` equal steps of [start, end).

    Each step's means and maxima, at its start; steps without a point are left out."""
    if len(points) <= buckets:
        return list(points)
    width = (end - start) / buckets
    groups: dict[int, list[Point]] = {}
    for p in points:
        groups.setdefault(min(int((p.time - start) // width), buckets - 1), []).append(p)
    out = []
    for step in sorted(groups):
        group = groups[step]
        utils = [p.util for p in group if p.util is not None]
        maxima = [p.util_max for p in group if p.util_max is not None]
        out.append(
            Point(
                start + step * width,
                sum(utils) / len(utils) if utils else None,
                max(maxima) if maxima else None,
                sum(p.mem_mib for p in group) / len(group),
                max(p.mem_max_mib for p in group),
            )
        )
    return out
