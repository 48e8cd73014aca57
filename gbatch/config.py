"""Where gbatch keeps its files, and the head's configuration.

`GBATCH_HOME` (default: the user's data dir, e.g. ~/.local/share/gbatch) holds
config.yaml, the store, the socket, job logs and per-run state. Environment
variables override config.yaml (`GBATCH_SIMULATE_GPUS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path


class ConfigError(Exception):
    """A bad setting; `str()` names the file, the key and the fix."""


@dataclass(frozen=True)
class Paths:
    home: Path

    @property
    def config_file(self) -> Path:
        return self.home / "config.yaml"

    @property
    def store(self) -> Path:
        return self.home / "gbatch.db"

    @property
    def socket(self) -> Path:
        return self.home / "gbatchd.sock"

    @property
    def lock(self) -> Path:
        return self.home / "gbatchd.lock"

    @property
    def daemon_log(self) -> Path:
        return self.home / "gbatchd.log"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def runs(self) -> Path:
        return self.home / "run"

    def job_log(self, job_id: int) -> Path:
        return self.logs / f"{job_id}.log"

    def run_dir(self, job_id: int, attempt: int) -> Path:
        return self.runs / f"{job_id}.{attempt}"

    @property
    def simulation_file(self) -> Path:
        return self.home / "simulated-gpus.json"


def resolve_paths(environ: Mapping[str, str]) -> Paths:
    home = environ.get("GBATCH_HOME")
    if home:
        return Paths(Path(home).expanduser().absolute())
    # platformdirs is imported here only: most commands are given GBATCH_HOME or run
    # on a path that needs no lookup, and start-up time is a feature.
    import platformdirs

    return Paths(Path(platformdirs.user_data_dir("gbatch", appauthor=False)))


@dataclass(frozen=True)
class Config:
    tick_seconds: float = 1.0  # the daemon's loop wakes at least this often
    report_interval: float = 1.0  # seconds between the agent's GPU reports
    half_life_days: float = 7.0  # fair-share usage decay
    kill_grace_seconds: float = 30.0  # SIGTERM -> SIGKILL (Slurm's KillWait)
    simulate_gpus: int | None = None  # N simulated GPUs on the local node
    gpu_memory_threshold_mib: int = 512  # a GPU using more is not handed out
    socket_mode: int = 0o600
    admins: tuple[str, ...] = ()  # user names allowed to act on any job (root always)
    docker: str = "docker"
    # A node silent this long is down (Slurm's SlurmdTimeout); before that it is suspect.
    node_down_seconds: float = 300.0
    # A host kills its own gbatch containers when the head has not renewed its lease for
    # this long (the agent's fence). The head requeues a down node's jobs only once this
    # lease has surely run out, so a job never runs twice; a head that is itself away
    # longer than this stops every host's runs.
    node_lease_seconds: float = 300.0

    @property
    def half_life_seconds(self) -> float:
        return self.half_life_days * 86400.0


_INT_KEYS = {"simulate_gpus", "gpu_memory_threshold_mib", "socket_mode"}
_FLOAT_KEYS = {
    "tick_seconds",
    "report_interval",
    "half_life_days",
    "kill_grace_seconds",
    "node_down_seconds",
    "node_lease_seconds",
}


def load_config(paths: Paths, environ: Mapping[str, str]) -> Config:
    """Read config.yaml (optional) and apply environment overrides."""
    raw: dict[str, object] = {}
    if paths.config_file.exists():
        import yaml  # deferred: only the daemon and sbatch read config

        try:
            loaded = yaml.safe_load(paths.config_file.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{paths.config_file}: cannot read it ({err}). Fix the file") from err
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{paths.config_file}: the top level must be a mapping of settings")
        raw = dict(loaded or {})
    config = _validate(raw, str(paths.config_file))
    if environ.get("GBATCH_SIMULATE_GPUS"):
        simulate = _coerce("simulate_gpus", environ["GBATCH_SIMULATE_GPUS"], "environment")
        config = replace(config, simulate_gpus=simulate)  # type: ignore[arg-type]
    return config


def _validate(raw: Mapping[str, object], source: str) -> Config:
    known = {f.name for f in fields(Config)}
    values: dict[str, object] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or key not in known:
            import difflib

            near = difflib.get_close_matches(str(key), known, n=1)
            hint = (
                f'Did you mean "{near[0]}"?' if near else f"Valid keys: {', '.join(sorted(known))}"
            )
            raise ConfigError(f'{source}: unknown setting "{key}". {hint}')
        values[key] = _coerce(key, value, source)
    return Config(**values)  # type: ignore[arg-type]


def _coerce(key: str, value: object, source: str) -> object:
    def bad(what: str) -> ConfigError:
        where = "GBATCH_SIMULATE_GPUS" if source == "environment" else f"{source}: {key}"
        return ConfigError(f"{where}: {value!r} is not {what}. Fix the value")

    if key == "simulate_gpus" and value is None:
        return None

    if key == "admins":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of user names")
        return tuple(value)
    if key == "docker":
        if not isinstance(value, str) or not value:
            raise bad("a command name")
        return value
    if key in _INT_KEYS:
        if isinstance(value, bool):
            raise bad("an integer")
        try:
            if key == "socket_mode" and not isinstance(value, str):
                # YAML reads 660 as decimal and 0660 as octal: only a string is clear.
                raise bad("a quoted octal mode like '660'")
            number = int(str(value), 8) if key == "socket_mode" else int(str(value))
        except ValueError as err:
            raise bad("an octal mode like '660'" if key == "socket_mode" else "an integer") from err
        if key == "socket_mode" and number > 0o777:
            raise bad("a permission mode (at most 777)")
        if number < 0:
            raise bad("zero or more")
        return number
    if key in _FLOAT_KEYS:
        try:
            number_f = float(str(value))
        except ValueError as err:
            raise bad("a number") from err
        if not math.isfinite(number_f) or number_f <= 0:
            raise bad("a finite number greater than zero")
        return number_f
    raise AssertionError(key)
