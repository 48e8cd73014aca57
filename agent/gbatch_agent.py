#!/usr/bin/env python3
"""gbatch-agent: report this host's GPUs to the gbatch head as JSON lines.

    python3 gbatch_agent.py probe [--simulation-file PATH] [--log-dir DIR] [--docker CMD]
    python3 gbatch_agent.py watch --interval S [--simulation-file PATH] [--log-dir DIR]
                                  [--docker CMD] [--lease S --node NAME]
    python3 gbatch_agent.py fence --lease-file PATH --node NAME --docker CMD

One self-contained file, copied to each GPU host: standard library and pynvml only, no
import of gbatch, runs on Python >= 3.9. The report format (schema 1) is documented in
README.md next to this file; gbatch.nodes.report is the head's parser of it.
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import datetime
import fcntl
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

try:
    import pynvml
except ImportError as _import_error:  # the report says why; the simulation path still works
    pynvml = None
    _PYNVML_MISSING = f"pynvml is not installed ({_import_error})"
else:
    _PYNVML_MISSING = ""

AGENT_VERSION = "0.1.0"
SCHEMA_VERSION = 1
_MIB = 1024 * 1024

# pynvml error classes that mean "this device or driver cannot tell", not "broken".
_NOT_AVAILABLE_ERROR_NAMES = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_NoData",
    "NVMLError_NoPermission",
)

# A docker container's cgroup path, from the host's view of /proc/<pid>/cgroup:
# cgroup v1 ".../docker/<id>", cgroup v2 with systemd ".../docker-<id>.scope".
_DOCKER_CGROUP = re.compile(r"/docker[-/]([0-9a-f]{64})(?:\.scope)?(?:/|$)")

# gbatch's container labels (gbatch/nodes/docker.py sets them on every job container).
_LABEL_JOB = "gbatch.job"
_LABEL_ATTEMPT = "gbatch.attempt"
_LABEL_USER = "gbatch.user"
_LABEL_NODE = "gbatch.node"
_DOCKER_TIMEOUT_S = 10
# Docker's container states that come with a meaningful exit code.
_FINISHED_STATES = frozenset({"exited", "dead"})
# RFC 3339: docker writes UTC "Z" and up to nine fraction digits; offsets are accepted too.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:[Zz]|([+-])(\d{2}):(\d{2}))\Z"
)
_DECIMAL = re.compile(r"[0-9]+\Z")

_SIM_GPU_KEYS = frozenset(
    {"name", "uuid", "memory_total_mib", "memory_used_mib", "utilization_pct", "processes", "mig"}
)
_SIM_MIG_KEYS = frozenset({"profile", "uuid", "memory_total_mib", "memory_used_mib", "processes"})
# A MIG profile as NVML names it: `1g.10gb`, `3g.40gb`, `1c.2g.20gb`, `1g.10gb+me`.
_MIG_PROFILE = re.compile(r"(?:[0-9]+c\.)?[1-8]g\.([0-9]+)gb(?:\+[a-z0-9.]+)?\Z")
_SIM_PROCESS_KEYS = frozenset({"pid", "used_memory_mib", "sid", "container"})


class _NotAvailable:
    """The sentinel nvml_query returns for a value the device does not report."""

    def __repr__(self) -> str:
        return "NA"


NA = _NotAvailable()


def _not_available_errors() -> tuple[type[BaseException], ...]:
    if pynvml is None:
        return ()
    found = (getattr(pynvml, name, None) for name in _NOT_AVAILABLE_ERROR_NAMES)
    return tuple(cls for cls in found if cls is not None)


def nvml_query(fn: Callable[..., Any], *args: Any) -> Any:
    """Call one pynvml function; every NVML call in this file goes through here.

    Returns NA when the device or driver does not support the query (or refuses it):
    the report writes that as null. Any other NVML error propagates.
    """
    try:
        return fn(*args)
    except _not_available_errors():
        return NA


def start_nvml() -> str | None:
    """Initialise NVML once for this process; return why it is unavailable, or None."""
    if pynvml is None:
        return "NVML unavailable: " + _PYNVML_MISSING
    try:
        nvml_query(pynvml.nvmlInit)
    except pynvml.NVMLError as error:
        return f"NVML unavailable: {error}"
    return None


def stop_nvml() -> None:
    if pynvml is None:
        return
    with contextlib.suppress(pynvml.NVMLError):  # exiting anyway; the OS releases the rest
        nvml_query(pynvml.nvmlShutdown)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def process_session(pid: int) -> int | None:
    """The session id of a local process, or None when it is gone or hidden."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


def process_container(pid: int, proc_root: str = "/proc") -> str | None:
    """The full id of the docker container a local process runs in, or None."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        # "hierarchy-id:controllers:path"; the path may itself contain ':'
        path = line.split(":", 2)[-1]
        match = _DOCKER_CGROUP.search(path)
        if match:
            return match.group(1)
    return None


def _process_row(pid: int, used_memory_mib: int | None) -> dict[str, Any]:
    return {
        "pid": pid,
        "sid": process_session(pid),
        "used_memory_mib": used_memory_mib,
        "container": process_container(pid),
    }


class _GpuUnreadable(Exception):
    pass


def _required(value: Any, what: str) -> Any:
    if value is NA:
        raise _GpuUnreadable(what + " not supported")
    return value


def _nvml_processes(handle: Any) -> list[dict[str, Any]]:
    processes = nvml_query(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    rows = []
    for process in [] if processes is NA else processes:
        used = process.usedGpuMemory  # None when the driver cannot tell (pynvml maps it)
        rows.append(_process_row(int(process.pid), None if used is None else int(used) // _MIB))
    return rows


def _read_nvml_gpu(index: int, problems: list[str]) -> dict[str, Any]:
    handle = nvml_query(pynvml.nvmlDeviceGetHandleByIndex, index)
    _required(handle, "device handle")
    uuid = _text(_required(nvml_query(pynvml.nvmlDeviceGetUUID, handle), "UUID"))
    name = nvml_query(pynvml.nvmlDeviceGetName, handle)
    memory = _required(nvml_query(pynvml.nvmlDeviceGetMemoryInfo, handle), "memory info")
    utilization = nvml_query(pynvml.nvmlDeviceGetUtilizationRates, handle)
    gpu = {
        "index": index,
        "uuid": uuid,
        "name": "unknown" if name is NA else _text(name),
        "memory_total_mib": int(memory.total) // _MIB,
        "memory_used_mib": int(memory.used) // _MIB,
        "utilization_pct": None if utilization is NA else int(utilization.gpu),
        "simulated": False,
        "processes": _nvml_processes(handle),
    }
    mode = nvml_query(pynvml.nvmlDeviceGetMigMode, handle)  # [current, pending]
    if mode is not NA and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
        gpu["mig_enabled"] = True
        gpu["mig"] = _read_mig_devices(handle, index, problems)
    return gpu


# The profile at the end of a MIG device's NVML name: "NVIDIA A100-SXM4-80GB MIG 1g.10gb".
_MIG_NAME = re.compile(r"\bMIG\s+(\S+)\s*\Z")


def _mig_profile(name: Any, handle: Any) -> str:
    """A MIG device's profile (`1g.10gb`): from its name, else from its slice counts."""
    match = _MIG_NAME.search("" if name is NA else _text(name))
    if match:
        return match.group(1).lower()
    attributes = nvml_query(pynvml.nvmlDeviceGetAttributes, handle)
    if attributes is NA:
        return "unknown"
    gpu_slices = int(attributes.gpuInstanceSliceCount)
    compute_slices = int(attributes.computeInstanceSliceCount)
    gib = -(-int(attributes.memorySizeMB) // 1024)  # NVIDIA's names round the size up
    prefix = f"{compute_slices}c." if 0 < compute_slices < gpu_slices else ""
    return f"{prefix}{gpu_slices}g.{gib}gb"


def _read_mig_devices(card: Any, index: int, problems: list[str]) -> list[dict[str, Any]]:
    """The MIG devices of the card `card` (index `index`), in slot order.

    Empty slots are skipped; a device that cannot be read is left out and named in
    `problems`, so that the card's other slices still reach the head."""
    count = nvml_query(pynvml.nvmlDeviceGetMaxMigDeviceCount, card)
    devices: list[dict[str, Any]] = []
    for slot in range(0 if count is NA else int(count)):
        try:
            handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(card, slot)
        except pynvml.NVMLError_NotFound:
            continue  # no MIG device in this slot
        except pynvml.NVMLError as error:
            problems.append(f"GPU {index} MIG slot {slot}: {error}")
            continue
        try:
            uuid = _text(_required(nvml_query(pynvml.nvmlDeviceGetUUID, handle), "UUID"))
            memory = _required(nvml_query(pynvml.nvmlDeviceGetMemoryInfo, handle), "memory info")
            devices.append(
                {
                    "uuid": uuid,
                    "profile": _mig_profile(nvml_query(pynvml.nvmlDeviceGetName, handle), handle),
                    "memory_total_mib": int(memory.total) // _MIB,
                    "memory_used_mib": int(memory.used) // _MIB,
                    "processes": _nvml_processes(handle),
                }
            )
        except (pynvml.NVMLError, _GpuUnreadable) as error:
            problems.append(f"GPU {index} MIG slot {slot}: {error}")
    return devices


def read_nvml_gpus() -> tuple[list[dict[str, Any]], str]:
    """Every GPU NVML sees, and a note naming those it could not read (NVML is started)."""
    try:
        count = _required(nvml_query(pynvml.nvmlDeviceGetCount), "device count")
    except (pynvml.NVMLError, _GpuUnreadable) as error:
        return [], f"NVML error: {error}"
    gpus: list[dict[str, Any]] = []
    problems: list[str] = []
    for index in range(count):
        # One lost or odd GPU must not hide the others from the head.
        try:
            gpus.append(_read_nvml_gpu(index, problems))
        except (pynvml.NVMLError, _GpuUnreadable) as error:
            problems.append(f"GPU {index}: {error}")
    if count == 0:
        problems.append("NVML found no GPUs")
    return gpus, "; ".join(problems)


class SimulationError(ValueError):
    pass


def _sim_int(
    entry: dict[str, Any], key: str, default: int | None, where: str, nullable: bool = False
) -> Any:
    value = entry.get(key, default)
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimulationError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def _sim_process(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise SimulationError(where + ": expected an object")
    unknown = sorted(set(entry) - _SIM_PROCESS_KEYS)
    if unknown:
        raise SimulationError("{}: unknown keys {}".format(where, ", ".join(unknown)))
    pid = _sim_int(entry, "pid", None, where)
    row = _process_row(pid, _sim_int(entry, "used_memory_mib", None, where, nullable=True))
    # Explicit values let a test describe a process that does not exist on this host.
    if "sid" in entry:
        row["sid"] = _sim_int(entry, "sid", None, where, nullable=True)
    if "container" in entry:
        container = entry["container"]
        if container is not None and not isinstance(container, str):
            raise SimulationError(where + ".container: expected a string or null")
        row["container"] = container
    return row


def _sim_object(entry: Any, where: str, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise SimulationError(where + ": expected an object")
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise SimulationError("{}: unknown keys {}".format(where, ", ".join(unknown)))
    return entry


def _sim_str(entry: dict[str, Any], key: str, default: str, where: str) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise SimulationError(f"{where}.{key}: expected a string")
    return value


def _sim_processes(entry: dict[str, Any], where: str) -> list[dict[str, Any]]:
    processes = entry.get("processes", [])
    if not isinstance(processes, list):
        raise SimulationError(where + ".processes: expected a list")
    return [_sim_process(p, f"{where}.processes[{i}]") for i, p in enumerate(processes)]


def _sim_mig(entry: Any, where: str, uuid: str) -> dict[str, Any]:
    entry = _sim_object(entry, where, _SIM_MIG_KEYS)
    profile = entry.get("profile")
    match = _MIG_PROFILE.match(profile) if isinstance(profile, str) else None
    if match is None:
        raise SimulationError(
            f"{where}.profile: expected a MIG profile such as 1g.10gb or 3g.40gb, got {profile!r}"
        )
    return {
        "uuid": _sim_str(entry, "uuid", uuid, where),
        "profile": profile,
        # A profile's name gives its memory: 1g.10gb has 10 GiB.
        "memory_total_mib": _sim_int(entry, "memory_total_mib", int(match.group(1)) * 1024, where),
        "memory_used_mib": _sim_int(entry, "memory_used_mib", 0, where),
        "processes": _sim_processes(entry, where),
    }


def _sim_gpu(entry: Any, index: int, hostname: str) -> dict[str, Any]:
    where = f"gpus[{index}]"
    entry = _sim_object(entry, where, _SIM_GPU_KEYS)
    gpu = {
        "index": index,
        "uuid": _sim_str(entry, "uuid", f"GPU-sim-{hostname}-{index}", where),
        "name": _sim_str(entry, "name", "Simulated GPU", where),
        "memory_total_mib": _sim_int(entry, "memory_total_mib", 81920, where),
        "memory_used_mib": _sim_int(entry, "memory_used_mib", 0, where),
        "utilization_pct": _sim_int(entry, "utilization_pct", 0, where, nullable=True),
        "simulated": True,
        "processes": _sim_processes(entry, where),
    }
    if "mig" in entry:  # the card is in MIG mode: these are its MIG devices, in slot order
        layout = entry["mig"]
        if not isinstance(layout, list):
            raise SimulationError(where + ".mig: expected a list of MIG devices")
        devices = [
            _sim_mig(device, f"{where}.mig[{slot}]", f"MIG-sim-{hostname}-{index}-{slot}")
            for slot, device in enumerate(layout)
        ]
        gpu["mig_enabled"] = True
        gpu["mig"] = devices
        if "memory_used_mib" not in entry:  # as NVML: the card's is its slices' sum
            gpu["memory_used_mib"] = sum(d["memory_used_mib"] for d in devices)
    return gpu


def read_simulated_gpus(path: str, hostname: str) -> tuple[list[dict[str, Any]], str]:
    """The GPUs a simulation file describes, or none and a note naming what is wrong.

    Read afresh on every call so that a test may edit the file while the agent runs.
    """
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
        if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
            raise SimulationError('expected an object with a "gpus" list')
        return [_sim_gpu(entry, i, hostname) for i, entry in enumerate(data["gpus"])], ""
    except (OSError, ValueError) as error:  # ValueError covers JSON and SimulationError
        return [], f"simulation file {path}: {error}"


class DockerError(Exception):
    """Why the agent could not list gbatch's containers; its text becomes `docker_note`."""


def parse_docker_time(text: str) -> float | None:
    """Seconds since the epoch for an RFC 3339 time as docker writes it; None for "not yet".

    Docker writes `2026-01-01T12:00:00.123456789Z`, and Go's zero time (year 1) for
    "not yet". Raises ValueError for anything else.
    """
    match = _RFC3339.match(text)
    if not match:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if year <= 1:
        return None
    # datetime only validates the fields (month 13 is an error); timegm does the arithmetic
    # in whole seconds so that the fraction is not rounded through a datetime.
    datetime.datetime(year, month, day, hour, minute, second)
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    fraction, sign, offset_hours, offset_minutes = match.group(7, 8, 9, 10)
    if sign is not None:
        offset = int(offset_hours) * 3600 + int(offset_minutes) * 60
        seconds -= offset if sign == "+" else -offset
    return seconds + (float("0." + fraction) if fraction else 0.0)


def _label_int(labels: dict[str, Any], key: str) -> int:
    value = labels.get(key)
    if not isinstance(value, str) or not _DECIMAL.match(value):
        raise ValueError(f"label {key}: expected a decimal integer, got {value!r}")
    return int(value)


def container_entry(raw: Any) -> dict[str, Any]:
    """One object of `docker inspect` output as a report entry (see README.md).

    Raises ValueError naming what is missing or malformed.
    """
    if not isinstance(raw, dict):
        raise ValueError("expected an object")
    state = raw.get("State")
    config = raw.get("Config")
    if not isinstance(state, dict) or not isinstance(config, dict):
        raise ValueError("State or Config missing")
    container_id, name = raw.get("Id"), raw.get("Name")
    if not isinstance(container_id, str) or not container_id:
        raise ValueError(f"Id: expected a string, got {container_id!r}")
    if not isinstance(name, str):
        raise ValueError(f"Name: expected a string, got {name!r}")
    labels = config.get("Labels") or {}
    user = labels.get(_LABEL_USER) if isinstance(labels, dict) else None
    if not isinstance(user, str):
        raise ValueError(f"label {_LABEL_USER}: expected a string, got {user!r}")
    status = state.get("Status")
    exit_code = state.get("ExitCode")
    oom_killed = state.get("OOMKilled")
    if not isinstance(status, str):
        raise ValueError(f"State.Status: expected a string, got {status!r}")
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        raise ValueError(f"State.ExitCode: expected an integer, got {exit_code!r}")
    if not isinstance(oom_killed, bool):
        raise ValueError(f"State.OOMKilled: expected true or false, got {oom_killed!r}")
    times = {}
    for key in ("StartedAt", "FinishedAt"):
        text = state.get(key)
        if not isinstance(text, str):
            raise ValueError(f"State.{key}: expected a string, got {text!r}")
        times[key] = parse_docker_time(text)
    return {
        "id": container_id,
        "name": name.lstrip("/"),  # docker keeps the name as a path: "/gbatch-42-1"
        "job": _label_int(labels, _LABEL_JOB),
        "attempt": _label_int(labels, _LABEL_ATTEMPT),
        "user": user,
        # Optional: the node the head started it for (absent on the embedded node).
        "node": labels.get(_LABEL_NODE) if isinstance(labels.get(_LABEL_NODE), str) else None,
        "state": status,
        # Docker says 0 for a container that has not finished; that is not a success.
        "exit_code": exit_code if status in _FINISHED_STATES else None,
        "oom_killed": oom_killed,
        "started_at": times["StartedAt"],
        "finished_at": times["FinishedAt"],
    }


def _run_docker(docker: list[str], args: list[str], partial_ok: bool = False) -> str:
    """Run one docker command and return its standard output, or raise DockerError.

    With `partial_ok`, a failed command's output is still returned when there is some:
    `docker inspect` exits 1 but prints the rest when a container vanished meanwhile.
    """
    what = "docker " + args[0]
    try:
        # stdin is the head's channel to this agent: docker must never read from it.
        done = subprocess.run(
            docker + args,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_DOCKER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DockerError(f"{what}: no answer within {_DOCKER_TIMEOUT_S} s") from None
    except OSError as error:
        raise DockerError(f"{what}: cannot run {docker[0]}: {error.strerror or error}") from None
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 and not (partial_ok and out.strip()):
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DockerError(
            f"{what} failed (exit {done.returncode}): {lines[-1] if lines else 'no message'}"
        )
    return out


def read_docker_containers(docker: list[str]) -> tuple[list[dict[str, Any]], str]:
    """gbatch's containers (those labelled gbatch.job) in any state, and a note.

    The note says why the list is empty (docker missing, not answering, refusing) or
    names the containers left out because their labels or state could not be read; it
    is "" when all went well. Never raises: the watch loop must outlive docker.
    """
    try:
        listed = _run_docker(
            docker,
            ["ps", "-a", "--no-trunc", "--filter", f"label={_LABEL_JOB}", "--format", "{{.ID}}"],
        )
        ids = listed.split()
        if not ids:
            return [], ""
        # One inspect for all: one process per report, however many jobs the host runs.
        data = json.loads(_run_docker(docker, ["inspect", *ids], partial_ok=True))
        if not isinstance(data, list):
            raise DockerError("docker inspect: expected a JSON list")
    except ValueError as error:  # JSON
        return [], f"docker inspect: unreadable output: {error}"
    except DockerError as error:
        return [], str(error)
    containers: list[dict[str, Any]] = []
    problems: list[str] = []
    for raw in data:
        try:
            containers.append(container_entry(raw))
        except ValueError as error:
            known = (raw.get("Name") or raw.get("Id")) if isinstance(raw, dict) else None
            problems.append(f"container {_text(known or '?').lstrip('/')}: {error}")
    return containers, "; ".join(problems)


def disk_free_bytes(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def host_cpus() -> int | None:
    """How many CPUs this process may run on: its affinity, a container's or cpuset's share.

    Where the affinity cannot be read, os.cpu_count(): every CPU of the machine, or None
    when even that is unknown.
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def host_memory_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemTotal of /proc/meminfo in bytes, or None when it cannot be read."""
    try:
        with open(meminfo) as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def build_report(
    *,
    nvml_problem: str | None,
    simulation_file: str | None,
    log_dir: str,
    docker: list[str] | None = None,
) -> dict[str, Any]:
    """One report (schema 1). A simulation file, when named, wins over NVML.

    `docker` is the argv prefix of the docker client; None leaves `containers` empty and
    the report without `docker_note`.
    """
    hostname = socket.gethostname()
    if simulation_file is not None:
        source = "simulation"
        gpus, note = read_simulated_gpus(simulation_file, hostname)
    elif nvml_problem is None:
        source = "nvml"
        gpus, note = read_nvml_gpus()
    else:
        source, gpus, note = "none", [], nvml_problem
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "time": time.time(),
        "host": hostname,
        "source": source,
        "note": note,
        "gpus": gpus,
        "containers": [],
        "facts": {
            "disk_free_bytes": disk_free_bytes(log_dir),
            "cpus": host_cpus(),
            "memory_bytes": host_memory_bytes(),
        },
    }
    if docker is not None:
        report["containers"], report["docker_note"] = read_docker_containers(docker)
    return report


def emit(report: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(report, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated()


def _wait_for_head(seconds: float, on_line: Callable[[bytes], None]) -> str:
    """Wait up to `seconds` for the head: "eof" when it hung up, "poke" when it sent an
    empty line (it wants a report now, e.g. right after a GPU was released), else
    "timeout". Other lines (lease renewals) go to `on_line` and do not end the wait."""
    fd = sys.stdin.fileno()
    deadline = time.monotonic() + seconds
    pending = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                return "eof"
            pending += data
            poked = False
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line.strip():
                    on_line(line.strip())
                else:
                    poked = True
            if poked:
                return "poke"


def watch(
    interval: float,
    make_report: Callable[[bool], dict[str, Any]],
    lease: Lease | None = None,
) -> None:
    """Emit a report, then one per interval or when the head asks, until stdin's EOF or SIGTERM.

    The head asks with an empty line, and the report goes at once. make_report(poked) is
    told whether the head asked for this report (it wants fresh GPU state, and wants it
    fast).

    With a lease, each report carries `seq` and the lease's state, and a line
    `renew <seq>` from the head renews the lease from the moment report `seq` was
    emitted (see Lease).
    """
    signal.signal(signal.SIGTERM, _raise_terminated)
    emitted: dict[int, float] = {}  # report seq -> monotonic time it was emitted
    seq = 0

    def on_line(line: bytes) -> None:
        words = line.split()
        if lease is None or len(words) != 2 or words[0] != b"renew" or not words[1].isdigit():
            return
        at = emitted.get(int(words[1]))
        if at is not None:
            lease.renew(at)

    try:
        poked = False
        while True:
            report = make_report(poked)
            if lease is not None:
                seq += 1
                report["seq"] = seq
                report["lease"] = lease.state()
                emitted[seq] = time.monotonic()
                emitted.pop(seq - 64, None)  # renewals answer recent reports only
            emit(report)
            woke = _wait_for_head(interval, on_line)
            if woke == "eof":
                return
            poked = woke == "poke"
    except _Terminated:
        return


# -- the lease: a host stops gbatch's runs by itself when the head is gone ------------
#
# The head answers each report it receives with `renew <seq>`. The lease then runs to
# (when report <seq> was emitted) + lease seconds, on CLOCK_MONOTONIC, which every
# process on the host shares. Since the head received that report after it was
# emitted, a head that has heard nothing for `lease` seconds knows the lease has run
# out, however late a renewal was delivered. A separate `fence` process (it outlives
# the SSH session) kills this node's gbatch containers once the lease has run out, so
# the head may requeue their jobs without ever running one twice.

_FENCE_POLL_S = 0.5
_LEASE_FILE_BYTES = 1024  # the lease file's fixed size (JSON padded with spaces)


def boot_id() -> str:
    """Monotonic times mean nothing across a reboot: the lease file names its boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


class Lease:
    """The lease file, which only `watch` writes (atomically) and `fence` reads.

    Its content: {"boot": boot id, "expires": CLOCK_MONOTONIC seconds, "seconds", "node",
    "docker"}.
    """

    def __init__(self, path: str, seconds: float, node: str, docker: list[str]) -> None:
        self.path = path
        self.seconds = seconds
        self.node = node
        self.docker = docker
        # A restarted watch keeps what an earlier one granted: never shorten a lease.
        self._expires = float(read_lease(path).get("expires", 0.0))
        self.problem = ""

    def renew(self, emitted_at: float) -> None:
        expires = emitted_at + self.seconds
        if expires <= self._expires:
            return
        data = {
            "boot": boot_id(),
            "expires": expires,
            "seconds": self.seconds,
            "node": self.node,
            "docker": self.docker,
        }
        # Padded to a fixed size: on a full disk the file is overwritten in place (in
        # one write, which needs no new block) rather than lost with the lease.
        text = json.dumps(data).ljust(_LEASE_FILE_BYTES).encode()
        try:
            tmp = f"{self.path}.tmp"
            with open(tmp, "wb") as f:
                f.write(text)
            os.replace(tmp, self.path)
        except OSError:
            try:
                fd = os.open(self.path, os.O_WRONLY)
                try:
                    os.pwrite(fd, text, 0)
                finally:
                    os.close(fd)
            except OSError as error:
                # The head sees the lease not renewed in the next report and says so;
                # the watch itself must outlive a full disk.
                self.problem = f"cannot renew the lease file {self.path}: {error}"
                return
        self._expires = expires
        self.problem = ""
        with contextlib.suppress(OSError):
            ensure_fence(self.path, self.node, self.docker)

    def state(self) -> dict[str, Any]:
        remaining = self._expires - time.monotonic() if self._expires else None
        state: dict[str, Any] = {"seconds": self.seconds, "remaining": remaining}
        if self.problem:
            state["problem"] = self.problem
        return state


def read_lease(path: str) -> dict[str, Any]:
    """The lease file's content, or {} when it is missing, unreadable or of another boot."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("boot") != boot_id():
        return {}
    if not isinstance(data.get("expires"), (int, float)):
        return {}
    return data


def lease_expired(path: str, now: float) -> bool:
    """Whether a lease was granted on this boot and has run out by monotonic `now`."""
    data = read_lease(path)
    return bool(data) and now >= float(data["expires"])


def running_containers(docker: list[str], node: str) -> list[str]:
    """Ids of this node's running gbatch containers (label gbatch.node=<node>)."""
    out = _run_docker(
        docker,
        [
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            f"label={_LABEL_JOB}",
            "--filter",
            f"label={_LABEL_NODE}={node}",
            "--filter",
            "status=running",
        ],
    )
    return out.split()


def fence_now(docker: list[str], node: str, log_path: str) -> int:
    """SIGKILL every running gbatch container of `node`; how many. Raises DockerError."""
    ids = running_containers(docker, node)
    if ids:
        _run_docker(docker, ["kill", *ids], partial_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"{stamp} lease expired: killed {len(ids)} container(s): {' '.join(ids)}\n")
    return len(ids)


def _lock_path(lease_file: str) -> str:
    return f"{lease_file}.lock"


def fence_running(lease_file: str) -> bool:
    """Whether a fence process holds the lease's lock."""
    try:
        fd = os.open(_lock_path(lease_file), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we got
    return False


def ensure_fence(lease_file: str, node: str, docker: list[str]) -> None:
    """Start the fence process unless one runs; it detaches from this session."""
    if fence_running(lease_file):
        return
    argv = [sys.executable, os.path.abspath(__file__), "fence", "--lease-file", lease_file]
    argv += ["--node", node, "--docker", shlex.join(docker)]
    subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def fence(lease_file: str, node: str, docker: list[str]) -> int:
    """Kill this node's gbatch containers whenever the lease has run out, until none runs.

    The fence guards the lease until it has run out and nothing of `node` runs. One per
    lease file: where another fence already guards it, this one returns at once. It
    also returns once the lease file is gone or from another boot.
    """
    fd = os.open(_lock_path(lease_file), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another fence guards this lease
    log_path = os.path.join(os.path.dirname(os.path.abspath(lease_file)), "fence.log")
    while True:
        if not read_lease(lease_file):
            return 0  # removed, or from another boot: nothing to guard
        if lease_expired(lease_file, time.monotonic()):
            try:
                fence_now(docker, node, log_path)
                if not running_containers(docker, node):
                    return 0  # a new watch starts another fence on its next renewal
            except DockerError:
                pass  # docker not answering: try again
        time.sleep(_FENCE_POLL_S)


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _command(text: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not argv:
        raise argparse.ArgumentTypeError("must name a command, e.g. docker")
    return argv


def _host_path(text: str) -> str:
    # A leading `~` is the home of the user running the agent: the head's argv reaches
    # us quoted for the remote shell, which leaves `~` as written.
    return os.path.expanduser(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gbatch-agent", description="Report this host's GPUs to gbatch as JSON lines."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"gbatch-agent {AGENT_VERSION} (report schema {SCHEMA_VERSION})",
    )
    commands = parser.add_subparsers(dest="command", metavar="probe|watch|fence")
    commands.required = True
    probe = commands.add_parser("probe", help="print one report and exit")
    watch_ = commands.add_parser("watch", help="print a report every interval until stdin EOF")
    watch_.add_argument("--interval", type=_positive_float, required=True, metavar="S")
    watch_.add_argument(
        "--lease",
        type=_positive_float,
        metavar="S",
        help="stop this node's gbatch containers when the head has not renewed the lease "
        "for S seconds (needs --node and --docker); the lease file is <log-dir>/lease.json",
    )
    watch_.add_argument("--node", help="this host's name in the head's inventory")
    fence_ = commands.add_parser(
        "fence", help="kill this node's gbatch containers once the lease runs out (internal)"
    )
    fence_.add_argument("--lease-file", type=_host_path, required=True, metavar="PATH")
    fence_.add_argument("--node", required=True)
    fence_.add_argument("--docker", type=_command, required=True, metavar="CMD")
    for command in (probe, watch_):
        command.add_argument(
            "--simulation-file",
            type=_host_path,
            metavar="PATH",
            help="report the GPUs this JSON file describes",
        )
        command.add_argument(
            "--log-dir",
            type=_host_path,
            default=".",
            metavar="DIR",
            help="where free disk space is measured (and the lease kept)",
        )
        command.add_argument(
            "--docker",
            type=_command,
            metavar="CMD",
            help="docker client to list gbatch's containers with (split like a shell "
            "would, e.g. 'sudo -n docker'); without it no containers are reported",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "fence":
        return fence(args.lease_file, args.node, args.docker)
    lease = None
    if args.command == "watch" and args.lease is not None:
        if args.node is None or args.docker is None:
            parser.error("--lease needs --node and --docker")
        lease_file = os.path.join(args.log_dir, "lease.json")
        lease = Lease(lease_file, args.lease, args.node, args.docker)
        if lease_expired(lease_file, time.monotonic()):
            # A head that lost this host has waited the lease out and may have started
            # these jobs elsewhere: stop them before the head hears from us again.
            with contextlib.suppress(DockerError, OSError):
                fence_now(args.docker, args.node, os.path.join(args.log_dir, "fence.log"))
    nvml_problem = start_nvml() if args.simulation_file is None else "simulation requested"
    try:
        # The containers as last listed: a poked report reuses them, since listing
        # takes two docker calls (tens of ms) and the head pokes for GPU state.
        listed: list[tuple[list[dict[str, Any]], str]] = []

        def make_report(poked: bool = False) -> dict[str, Any]:
            reuse = poked and bool(listed)
            report = build_report(
                nvml_problem=nvml_problem,
                simulation_file=args.simulation_file,
                log_dir=args.log_dir,
                docker=None if reuse else args.docker,
            )
            if args.docker is not None:
                if reuse:
                    report["containers"], report["docker_note"] = listed[-1]
                else:
                    listed[:] = [(report["containers"], report["docker_note"])]
            return report

        if args.command == "probe":
            emit(make_report())
        else:
            watch(args.interval, make_report, lease)
    except BrokenPipeError:
        # The head is gone; keep Python from complaining while flushing at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        return 130
    finally:
        if nvml_problem is None:
            stop_nvml()
    return 0


if __name__ == "__main__":
    sys.exit(main())
