"""Start-up cost of the `gbatch` program, with no daemon to talk to.

Run: `.venv/bin/python bench/bench_startup.py [--quick]`.

Figures: the whole process `gbatch --help` (goal <= 60 ms); `gbatch squeue` with no
daemon (the error path, exit status 3); `python -c pass` with the same interpreter,
the floor every figure above stands on; the ten costliest imports of
`gbatch.cli._main` from `python -X importtime`; and which heavy libraries (textual,
paramiko, yaml) `gbatch squeue` imports, printed, not asserted.
"""

from __future__ import annotations

import argparse
import subprocess

from common import GBATCH, PYTHON, gbatch_env, machine_note, report_ms, temp_home, time_process

HELP_GOAL_MS = 60.0
NO_DAEMON_STATUS = 3
HEAVY = ("textual", "paramiko", "yaml")

# Run `gbatch squeue` in-process the way the console script does, then list which heavy
# top-level packages ended up in sys.modules. The exit status is the command's own.
_PROBE = """
import sys
from gbatch.cli._main import main
try:
    status = main(["squeue"])
finally:
    loaded = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))
    print("HEAVY:" + ",".join(loaded), file=sys.stderr)
"""


def import_costs(top: int) -> list[tuple[int, int, str]]:
    """(self us, cumulative us, module) of the `top` costliest imports by cumulative time."""
    done = subprocess.run(
        [str(PYTHON), "-X", "importtime", "-c", "import gbatch.cli._main"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        rows.append((int(self_us), int(cumulative_us), name.rstrip()))
    rows.sort(key=lambda row: row[1], reverse=True)
    return rows[:top]


def heavy_imports_of_squeue(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [str(PYTHON), "-c", _PROBE, *HEAVY], env=env, capture_output=True, text=True, check=False
    )
    for line in done.stderr.splitlines():
        if line.startswith("HEAVY:"):
            return [name for name in line.removeprefix("HEAVY:").split(",") if name]
    raise RuntimeError(f"the probe printed no HEAVY line: {done.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 10 if args.quick else 30
    print(machine_note())
    with temp_home() as home:
        env = gbatch_env(home)
        report_ms("`gbatch --help`", time_process([str(GBATCH), "--help"], env, runs), HELP_GOAL_MS)
        report_ms(
            "`gbatch squeue` with no daemon (error path, exit 3)",
            time_process([str(GBATCH), "squeue"], env, runs, expect_status=NO_DAEMON_STATUS),
        )
        report_ms(
            "`python -c pass` (same interpreter; the floor)",
            time_process([str(PYTHON), "-c", "pass"], env, runs),
        )
        report_ms(
            "`python -c 'import gbatch.cli._main'` (imports alone)",
            time_process([str(PYTHON), "-c", "import gbatch.cli._main"], env, runs),
        )
        print("top-10 imports of gbatch.cli._main by cumulative time (python -X importtime):")
        for self_us, cumulative_us, name in import_costs(10):
            print(
                f"  {cumulative_us / 1000:7.2f} ms cumulative, "
                f"{self_us / 1000:6.2f} ms self  {name}"
            )
        loaded = heavy_imports_of_squeue(env)
        print(
            f"heavy imports by `gbatch squeue` ({', '.join(HEAVY)}): "
            + (", ".join(loaded) if loaded else "none")
        )


if __name__ == "__main__":
    main()
