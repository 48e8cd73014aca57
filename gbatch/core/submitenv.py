"""The submitting shell's variables a job takes with it (Slurm's --export): names and size.

Which names a job may carry, and how large the whole may be. The one definition for
sbatch (both its paths), gbatch.jobspec.spec and the daemon; it imports nothing of
gbatch's, so that sbatch's everyday `--wrap` path loads neither the model nor spec
(start-up)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_SUBMIT_ENV_BYTES = 128 * 1024
# A variable's name, [A-Za-z_][A-Za-z0-9_]* in ASCII, checked without `re` (which, with
# the enum and functools it loads, slows sbatch's start: bench/bench_startup.py).
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def is_env_name(name: str) -> bool:
    """Whether `name` may name an environment variable: [A-Za-z_][A-Za-z0-9_]*."""
    return name[:1] not in "0123456789" and all(c in _NAME_CHARS for c in name)


def reserved_env_reason(name: str) -> str | None:
    """Why gbatch keeps `name` for itself, or None when a job may set it."""
    if name.startswith("NVIDIA_"):
        return "NVIDIA_* variables decide which GPUs a container sees, so gbatch sets them"
    if name.endswith("_VISIBLE_DEVICES"):
        return "*_VISIBLE_DEVICES variables are set by gbatch from the GPUs it allocates"
    if name.startswith("GBATCH_"):
        return "GBATCH_* variables are reserved for what gbatch tells the job"
    return None


def filter_submit_env(env: Mapping[str, str]) -> dict[str, str]:
    """spec.exported_env's filter; the daemon applies it again to what a client sends."""
    return {
        name: value
        for name, value in env.items()
        if isinstance(name, str)
        and isinstance(value, str)
        and is_env_name(name)
        and reserved_env_reason(name) is None
        and not name.startswith("SLURM_")
        and not ("\0" in value or "\n" in value or "\r" in value)
    }


def submit_env_bytes(env: Mapping[str, str]) -> int:
    """What `env` weighs against MAX_SUBMIT_ENV_BYTES: each NAME=value and its end."""
    return sum(
        len(n.encode("utf-8", "surrogatepass")) + len(v.encode("utf-8", "surrogatepass")) + 2
        for n, v in env.items()
    )
