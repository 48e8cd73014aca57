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

# A type as jobs and rules spell it, lowercase: `a100`, `rtx4090`, `1g.10gb` (Slurm's MIG
# profiles start with a digit). Never all digits: `gpu:2` is a count.
TYPE_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}", re.ASCII)
MAX_TYPE_CHARS = 32


def is_type_name(text: str) -> bool:
    """Whether `text` (already lowercased) is a GPU type's spelling."""
    return bool(TYPE_RE.fullmatch(text)) and not text.isdigit()


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

SIMULATE_FORMS = "N, or models with counts such as a100-80gb:2,rtx4090:1"
MAX_SIMULATED = 64


def parse_simulated(text: str) -> tuple[str, ...]:
    """GBATCH_SIMULATE_GPUS's models, one per GPU ("" for a plain simulated GPU).

    `4`: four plain ones, as before models; `a100-80gb:2,rtx4090:1` (a model alone is
    one of it; models and plain counts may mix). ValueError naming the item that is
    none of these, with the models known.
    """
    models: list[str] = []
    for item in text.split(","):
        item = item.strip().lower()
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
        models.extend([model] * int(count))
        if len(models) > MAX_SIMULATED:
            raise ValueError(f"more than {MAX_SIMULATED} GPUs; simulate fewer")
    return tuple(models)


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
