"""GPU models as short types: `NVIDIA A100-SXM4-80GB` -> `a100`, as Slurm's gres types.

A job asks for a type (`--gres=gpu:a100:2`); the head gives each GPU its type from the
NVML name its node reports, by the admin's `gpu_types:` rules in config.yaml first, then
the built-in ones. A name neither knows (`Simulated GPU`) gives no type: such a GPU goes
only to jobs that ask for any GPU. Also the models GBATCH_SIMULATE_GPUS names.

Pure, and a leaf but for the standard library.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

# A type's spelling, in a module of its own (a submit's start-up).
from gbatch.core.gpuname import MAX_TYPE_CHARS as MAX_TYPE_CHARS
from gbatch.core.gpuname import TYPE_RE as TYPE_RE
from gbatch.core.gpuname import is_type_name as is_type_name

# Words of an NVML name that name the vendor or the product line, not the model.
_BRAND_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro"})
# A model word: letters then digits, then letters or digits (a100, h100, l40s, t4, gh200).
_MODEL_WORD = re.compile(r"[a-z]+[0-9]+[a-z0-9]*", re.ASCII)
# Product lines whose model is the next word (RTX 4090, RTX A6000, TITAN V), and the
# words after it that make another model (RTX 3090 Ti, RTX 6000 Ada Generation).
_LINES = frozenset({"rtx", "gtx", "titan"})
_SUFFIXES = frozenset({"ti", "super", "ada"})


def builtin_type(name: str) -> str:
    """The built-in short type of an NVML name, or "" when it names no model gbatch knows.

    `NVIDIA A100-SXM4-80GB` and `NVIDIA A100 80GB PCIe`: a100; `NVIDIA H100 80GB HBM3`:
    h100; `Tesla V100-SXM2-32GB`: v100; `NVIDIA L40S`: l40s; `NVIDIA GeForce RTX 4090`:
    rtx4090; `NVIDIA GeForce RTX 3090 Ti`: rtx3090ti; `NVIDIA RTX A6000`: rtxa6000;
    `NVIDIA RTX 6000 Ada Generation`: rtx6000ada.
    """
    words = [w for w in name.lower().split() if w not in _BRAND_WORDS]
    if not words:
        return ""
    first = words[0]
    if first in _LINES:
        if len(words) == 1:
            return ""
        model = first + re.sub(r"[^a-z0-9]", "", words[1])
        for word in words[2:]:
            if word not in _SUFFIXES:
                break
            model += word
        return model if is_type_name(model) else ""
    head = first.split("-")[0]
    return head if _MODEL_WORD.fullmatch(head) and is_type_name(head) else ""


# (pattern, type): an admin's rule, the pattern a shell-style glob over the NVML name,
# any case (`NVIDIA A100*80GB*`, or a name as nvidia-smi prints it).
Rule = tuple[str, str]


@lru_cache(maxsize=1024)
def gpu_type(name: str, rules: tuple[Rule, ...] = ()) -> str:
    """The short type of a GPU named `name`: the first rule's that matches, else built in.

    `rules` are tried in order; then builtin_type. Cached: a node's report names the
    same GPUs every second."""
    lowered = name.lower()
    for pattern, short in rules:
        if fnmatch.fnmatchcase(lowered, pattern.lower()):
            return short
    return builtin_type(name)


# -------------------------------------------------------------- MIG slices

# A MIG profile as NVML names it (`1g.10gb`, `3g.40gb`, `1c.2g.20gb` for a compute
# instance smaller than its GPU instance, `1g.10gb+me` spelt `1g.10gb-me` here: `+` is no
# type character). A slice's type is its card's type and its profile (Slurm's naming).
MIG_PROFILE_RE = re.compile(r"(?:[0-9]+c\.)?([1-8])g\.([0-9]+)gb(?:-[a-z0-9.]+)?", re.ASCII)


# A MIG device's UUID as NVML gives it (`MIG-<uuid>`; before driver R470,
# `MIG-GPU-<uuid>/<gi>/<ci>`): CUDA_VISIBLE_DEVICES and `docker --gpus device=` take it.
# Nothing else: it goes into a job's environment and docker's CSV device list.
MIG_UUID_RE = re.compile(r"MIG-[A-Za-z0-9/._-]{1,120}", re.ASCII)


def mig_profile(text: str) -> str:
    """A MIG profile in a type's spelling; "" when `text` is no MIG profile.

    Lowercase, `+` (and any other character a type may not hold) as `-`: `1g.10gb+me` is
    `1g.10gb-me`."""
    profile = re.sub(r"[^a-z0-9_.-]", "-", text.strip().lower())
    return profile if MIG_PROFILE_RE.fullmatch(profile) else ""


def slice_type(card_type: str, profile: str) -> str:
    """The type of a MIG slice: `a100_1g.10gb`; its profile alone on a card of no type."""
    return f"{card_type}_{profile}" if card_type else profile


@lru_cache(maxsize=1024)
def profile_of(kind: str) -> str:
    """The MIG profile a type ends in (`a100_1g.10gb`, `1g.10gb`: `1g.10gb`), else ""."""
    tail = kind.rpartition("_")[2]
    return tail if MIG_PROFILE_RE.fullmatch(tail) else ""


def type_matches(kind: str, wanted: str) -> bool:
    """Whether a GPU of type `kind` serves a job asking `wanted`.

    The same type; or a MIG profile alone (`1g.10gb`), which any slice of that profile
    serves on any card (`a100_1g.10gb`, `h100_1g.10gb`), as Slurm's `--gres=gpu:1g.10gb`.
    A card's type (`a100`) is never served by its slices."""
    return kind == wanted or profile_of(kind) == wanted


@lru_cache(maxsize=1024)
def types_served(kind: str) -> tuple[str, ...]:
    """Every request a GPU of type `kind` serves: itself, and its profile for a slice."""
    profile = profile_of(kind)
    return (kind,) if not profile or profile == kind else (kind, profile)


# -------------------------------------------------------------- simulated models


@dataclass(frozen=True)
class Model:
    """A GPU model a simulation may name: its NVML name and memory (MiB)."""

    name: str
    memory_mib: int


SIMULATED_MODELS: dict[str, Model] = {
    "a100-40gb": Model("NVIDIA A100-SXM4-40GB", 40960),
    "a100-80gb": Model("NVIDIA A100-SXM4-80GB", 81920),
    "h100-80gb": Model("NVIDIA H100 80GB HBM3", 81559),
    "h200": Model("NVIDIA H200", 143771),
    "l40s": Model("NVIDIA L40S", 46068),
    "l4": Model("NVIDIA L4", 23034),
    "a10": Model("NVIDIA A10", 23028),
    "t4": Model("Tesla T4", 15360),
    "v100-16gb": Model("Tesla V100-SXM2-16GB", 16384),
    "v100-32gb": Model("Tesla V100-SXM2-32GB", 32768),
    "rtx3090": Model("NVIDIA GeForce RTX 3090", 24576),
    "rtx4090": Model("NVIDIA GeForce RTX 4090", 24564),
    "rtxa6000": Model("NVIDIA RTX A6000", 49140),
    "rtx6000ada": Model("NVIDIA RTX 6000 Ada Generation", 49140),
}
# The short spellings of the models above that come in one size here.
SIMULATED_MODELS["a100"] = SIMULATED_MODELS["a100-80gb"]
SIMULATED_MODELS["h100"] = SIMULATED_MODELS["h100-80gb"]
SIMULATED_MODELS["v100"] = SIMULATED_MODELS["v100-32gb"]

# The simulated models that have a MIG mode (A100, H100, H200: 7 compute slices each).
MIG_MODELS = frozenset({"a100-40gb", "a100-80gb", "h100-80gb", "h200", "a100", "h100"})
MIG_COMPUTE_SLICES = 7

SIMULATE_FORMS = (
    "N, or models with counts such as a100-80gb:2,rtx4090:1, a MIG layout after a slash "
    "(a100-80gb:1/3g.40gb+2g.20gb+2x1g.10gb)"
)
MAX_SIMULATED = 64


def parse_simulated(text: str) -> tuple[str, ...]:
    """GBATCH_SIMULATE_GPUS's models, one per GPU ("" for a plain simulated GPU).

    `4`: four plain ones, as before models; `a100-80gb:2,rtx4090:1` (a model alone is
    one of it; models and plain counts may mix). A MIG layout follows a model's count
    after a slash, its slices' profiles joined by `+` (`2x` repeats one):
    `a100-80gb:1/3g.40gb+2g.20gb+2x1g.10gb`; such a GPU reads `MODEL/PROFILE+PROFILE...`
    (see simulated_layout). ValueError naming the item that is none of these, with the
    models known.
    """
    models: list[str] = []
    for item in text.split(","):
        item = item.strip().lower()
        item, slash, layout = item.partition("/")
        if ":" in item:
            model, _, count = item.rpartition(":")
            if not count.isdigit():
                raise ValueError(f"{item!r}: {count!r} is not a count; use {SIMULATE_FORMS}")
        elif item.isdigit():
            model, count = "", item
        else:
            model, count = item, "1"
        if model and model not in SIMULATED_MODELS:
            known = ", ".join(sorted(SIMULATED_MODELS))
            raise ValueError(f"{item!r} names no simulated model (known: {known})")
        if slash:
            model = f"{model}/{'+'.join(_mig_layout(model, layout))}"
        models.extend([model] * int(count))
        if len(models) > MAX_SIMULATED:
            raise ValueError(f"more than {MAX_SIMULATED} GPUs; simulate fewer")
    return tuple(models)


def _mig_layout(model: str, layout: str) -> list[str]:
    """The profiles of a simulated card's MIG layout (`3g.40gb+2x1g.10gb`), one per slice.

    ValueError naming what is wrong: no MIG on the model, a profile that is none, more
    compute slices or memory than the card has."""
    if model not in MIG_MODELS:
        mig = ", ".join(sorted(MIG_MODELS))
        raise ValueError(f"{model or 'a plain GPU'!r} has no MIG mode (MIG models: {mig})")
    profiles: list[str] = []
    for part in layout.split("+"):
        times, x, profile = part.partition("x")
        if not (x and times.isdigit()):
            times, profile = "1", part
        if not mig_profile(profile) or profile != mig_profile(profile):
            raise ValueError(
                f"{model}/{layout}: {profile!r} is not a MIG profile "
                "(such as 1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb)"
            )
        profiles.extend([profile] * int(times))
    card = SIMULATED_MODELS[model]
    sizes = [MIG_PROFILE_RE.fullmatch(p).groups() for p in profiles]  # type: ignore[union-attr]
    compute = sum(int(g) for g, _ in sizes)
    memory_gb = sum(int(gb) for _, gb in sizes)
    card_gb = -(-card.memory_mib // 1024)
    if compute > MIG_COMPUTE_SLICES or memory_gb > card_gb:
        raise ValueError(
            f"{model}/{layout}: the slices take {compute} compute slices and {memory_gb} GB, "
            f"more than the card's {MIG_COMPUTE_SLICES} and {card_gb} GB"
        )
    if not profiles or len(profiles) > MIG_COMPUTE_SLICES:
        raise ValueError(f"{model}/{layout}: a card has 1 to {MIG_COMPUTE_SLICES} slices")
    return profiles


def simulated_layout(model: str) -> tuple[str, tuple[str, ...]]:
    """One of parse_simulated's models as (model, its MIG slices' profiles; () without)."""
    name, _, layout = model.partition("/")
    return name, tuple(layout.split("+")) if layout else ()


def profile_memory_mib(profile: str) -> int:
    """The memory a simulated slice of `profile` has: its name's GB, in MiB."""
    match = MIG_PROFILE_RE.fullmatch(profile)
    return int(match.group(2)) * 1024 if match else 0


# -------------------------------------------------------------- as Slurm writes them


def gres_text(count: int, gpu_type: str | None) -> str:
    """A job's GPUs in Slurm's gres form: `gpu:a100:2`, `gpu:2` (any type)."""
    return f"gpu:{gpu_type}:{count}" if gpu_type else f"gpu:{count}"


def node_gres(types: Iterable[str], counted: Iterable[str] | None = None) -> str:
    """A node's GPUs by type, as sinfo's GRES and scontrol's Gres: `gpu:a100:2,gpu:rtx4090:1`.

    `types` are its GPUs' types ("": none; those read `gpu:N`), in index order; the
    groups come in the order their first GPU does. With `counted` (the types of some of
    those GPUs: the allocated ones, for GresUsed), each group counts those instead.
    """
    types = list(types)
    order = list(dict.fromkeys(types))
    counts = dict.fromkeys(order, 0)
    for kind in types if counted is None else counted:
        if kind in counts:
            counts[kind] += 1
    return ",".join(gres_text(counts[kind], kind) for kind in order)
