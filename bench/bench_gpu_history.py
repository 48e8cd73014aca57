"""The GPUs' sample history (gbatch/head/gpuhistory.py) under a day of 1-s samples.

Run: `python bench/bench_gpu_history.py [--quick] [--gpus 100] [--seconds 86400]`.
Feeds GpuHistory.record, as the daemon's GPU step does at each node report, with
`--seconds` of one report a second from `--gpus` simulated GPUs (10 per node), then
prints: the bytes on disk (allocated, and the files' size, which is the bound: each GPU's
ring is of a fixed size), the head's CPU per GPU sample and per node report, and the
time to read one GPU's last hour (each second) and its last day (each minute), as the
Nodes page and a job's page ask.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine_note, quick_help

from gbatch.head.gpuhistory import FILE_SIZE, GpuHistory

PER_NODE = 10


class Gpu(NamedTuple):
    index: int
    memory_used_mib: int
    utilization_pct: int | None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help("600 s of 20 GPUs"))
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=86400)
    args = parser.parse_args()
    gpus, seconds = (20, 600) if args.quick else (args.gpus, args.seconds)
    nodes = [f"gpu{n:02d}" for n in range((gpus + PER_NODE - 1) // PER_NODE)]
    print(machine_note())
    with tempfile.TemporaryDirectory(prefix="gbatch-bench-history-") as directory:
        history = GpuHistory(Path(directory))
        start = 1_767_225_600
        began = time.process_time()
        for s in range(seconds):
            for n, node in enumerate(nodes):
                count = min(PER_NODE, gpus - n * PER_NODE)
                util = (s * 7 + n) % 101
                history.record(
                    node, [Gpu(i, 20_000 + (s + i) % 4096, util) for i in range(count)], start + s
                )
        cpu = time.process_time() - began
        now = start + seconds
        began = time.perf_counter()
        hour = history.series(nodes[0], 0, now - 3600, now, now)
        read_hour = time.perf_counter() - began
        began = time.perf_counter()
        day = history.series(nodes[0], 0, now - 86400, now, now)
        read_day = time.perf_counter() - began
        history.close()
        files = list(Path(directory).iterdir())
        allocated = sum(os.stat(f).st_blocks * 512 for f in files)
        size = sum(f.stat().st_size for f in files)
    samples = gpus * seconds
    print(f"{gpus} GPUs on {len(nodes)} nodes, {seconds:,} s of 1-s samples ({samples:,} samples)")
    print(
        f"  on disk: {allocated:,} bytes allocated, {size:,} bytes of files "
        f"(the bound: {FILE_SIZE:,} bytes a GPU, {FILE_SIZE * gpus:,} for {gpus})"
    )
    print(
        f"  head CPU: {cpu / samples * 1e6:.2f} us per GPU sample, "
        f"{cpu / (seconds * len(nodes)) * 1e6:.1f} us per node report of {PER_NODE} GPUs"
    )
    print(f"  read one GPU's last hour: {read_hour * 1e3:.1f} ms ({len(hour):,} points)")
    print(f"  read one GPU's last day: {read_day * 1e3:.1f} ms ({len(day):,} points)")


if __name__ == "__main__":
    main()
