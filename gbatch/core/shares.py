"""Shares of one GPU by memory (`--gpu-mem=20G`, Slurm's `--gres=shard:N`). Pure.

An admin marks GPUs shareable (`share_gpus:` per node in the inventory, or in
config.yaml for the embedded node) and keeps a headroom free on each. A shared job
asks for a budget of one card's memory; a card takes shared jobs while their budgets,
plus the memory of processes gbatch did not start, fit under its total less the
headroom. Shared jobs never sit beside an exclusive one (a job of whole GPUs), and a
card holding shares is never free for one.

`room` is the one reckoning of what a card may still take: the planner's view of a
node (Fleet.node_view) and every display (sinfo, the TUI, the web page, /metrics)
read it through Fleet, so they never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_HEADROOM_MIB = 0  # an admin sets one (share_headroom_mib); four 20G shares fill 80G

# `share_gpus:` as an admin writes it: true (every GPU of the node), false (none), or
# the indices of the shareable ones.
ShareGpus = bool | tuple[int, ...]


@dataclass(frozen=True)
class Sharing:
    """A node's sharing settings: which GPUs take shares, the headroom, and MPS."""

    gpus: ShareGpus = False
    headroom_mib: int = DEFAULT_HEADROOM_MIB
    # The node runs the CUDA MPS control daemon: each shared job's budget is set as its
    # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, which MPS enforces.
    mps: bool = False

    def shareable(self, index: int) -> bool:
        """Whether GPU `index` of the node takes shares."""
        gpus = self.gpus
        return gpus if isinstance(gpus, bool) else index in gpus

    @property
    def any(self) -> bool:
        """Whether any GPU of the node may take shares."""
        return bool(self.gpus)


def check_share_gpus(value: object) -> ShareGpus:
    """`share_gpus:` checked: true, false or a list of GPU indices; ValueError if none."""
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1024 for i in value
    ):
        return tuple(sorted(set(value)))
    raise ValueError(
        f"{value!r} is not true, false or a list of GPU indices. Write e.g. true, or [0, 1]"
    )


def room(total_mib: int, foreign_mib: int, budgets_mib: int, headroom_mib: int) -> int:
    """The MiB a new share may take on a card (it fits when its budget is at most this).

    A card of `total_mib`, with `foreign_mib` in use by processes gbatch did not start,
    whose shared jobs have budgets of `budgets_mib` in all, keeping `headroom_mib` free.
    """
    return total_mib - headroom_mib - foreign_mib - budgets_mib


def capacity(total_mib: int, headroom_mib: int) -> int:
    """The largest share a card could ever take: its memory less the headroom."""
    return total_mib - headroom_mib


@dataclass(frozen=True)
class CardShares:
    """One shareable GPU as a view shows it: its shares and its room (Fleet.card_shares).

    `room_mib` is what a new share may take now (room()); 0 when the card cannot take
    one at all: held by an exclusive job, or its last run's memory not yet released.
    `exclusive`: a job of whole GPUs holds it."""

    index: int
    total_mib: int
    foreign_mib: int
    jobs: tuple[int, ...]  # the ids of the shared jobs on it
    budgets_mib: int  # their budgets in all
    room_mib: int
    exclusive: bool = False


def mib_text(mib: int) -> str:
    """A size as Slurm's options write it: `20G` for whole GiB (and 0), else `1536M`."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def job_share_text(gpu_mem_mb: int, shards: int | None = None, gpu_type: str | None = None) -> str:
    """A shared job's request as squeue %b and scontrol's Gres and TresPerNode show it.

    Slurm's --gres=shard:2 as Slurm shows it, `shard:2` (`shard:a100:2` of a type);
    gbatch's --gpu-mem as `gpumem:20G` (`gpumem:a100:20G`)."""
    kind = f"{gpu_type}:" if gpu_type else ""
    return f"shard:{kind}{shards}" if shards else f"gpumem:{kind}{mib_text(gpu_mem_mb)}"


def card_text(card: CardShares) -> str:
    """One shareable GPU as sinfo --gpus, scontrol show node and the TUI show it.

    `1: 4 jobs 80G, room 0G`: its index, its shares and their budgets, its room (what a
    new share may take); `held whole` while a job of whole GPUs holds it."""
    if card.exclusive:
        return f"{card.index}: held whole"
    jobs = f"{len(card.jobs)} job{'' if len(card.jobs) == 1 else 's'}"
    return f"{card.index}: {jobs} {mib_text(card.budgets_mib)}, room {mib_text(card.room_mib)}"


def mps_limit(mib: int) -> str:
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for a budget of `mib` on the job's one device.

    NVIDIA's form: `<device ordinal>=<size>` with a unit (M or G); the job sees one GPU,
    its device 0 (CUDA_VISIBLE_DEVICES)."""
    return f"0={mib}M"


def node_share_text(cards: Sequence[CardShares]) -> str:
    """A node's shares as sinfo's GRES suffix: `(S:2)` where two cards are shareable."""
    return f"(S:{len(cards)})" if cards else ""
