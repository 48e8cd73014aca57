"""Shares of a GPU by memory on a real daemon (issue 30): the local node simulating 80 GB
A100s (GBATCH_SIMULATE_GPUS=a100-80gb:2) made shareable in config.yaml. Four
`--gpu-mem=20G` jobs run at once on one card and a fifth waits (Resources); a job of
whole GPUs never lands on a card holding shares, nor a share on a card a whole-GPU job
holds; a card with memory in use by what gbatch did not start takes fewer shares; a
share no card could hold, and shards without a shard size, are refused at submit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for

SHARING = FAST_CONFIG + "share_gpus: true\n"
SHOW = 'echo "$CUDA_VISIBLE_DEVICES $GBATCH_GPU_MEM_MIB"; sleep 300'


def _head(tmp_path: Path, models: str, config: str, gpus: list[dict[str, object]] | None) -> Head:
    home = tmp_path / "home"
    made = make_head(home, config=config)
    made.env["GBATCH_SIMULATE_GPUS"] = models
    if gpus is not None:  # the simulated cards as the test wants them (kept by the node)
        (home / "simulated-gpus.json").write_text(json.dumps({"gpus": gpus}))
    made.start()
    return made


def _a100(used: int = 0) -> dict[str, object]:
    return {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_mib": 81920,
        "memory_used_mib": used,
        "utilization_pct": 50,
    }


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = _head(tmp_path, "a100-80gb:2", SHARING, None)
    try:
        yield made
    finally:
        made.stop()
        kill_leftover_jobs(made.home)


def _shared(head: Head, tmp_path: Path, name: str, *options: str) -> tuple[int, Path]:
    out = tmp_path / f"{name}.out"
    return head.sbatch(*options, "-J", name, "-o", str(out), "--wrap", SHOW), out


def _saw(out: Path) -> str:
    """What the job printed: its CUDA_VISIBLE_DEVICES and GBATCH_GPU_MEM_MIB."""
    wait_for(lambda: out.exists() and out.read_text().strip(), 30, f"{out.name}'s line")
    return out.read_text().strip()


def test_four_20g_shares_run_at_once_on_one_card_and_a_fifth_waits(
    head: Head, tmp_path: Path
) -> None:
    # A whole-GPU job first: it takes card 0, so the shares must all go onto card 1.
    whole = head.sbatch("--gpus=1", "--wrap", "sleep 300")
    assert head.wait_state(whole, "RUNNING")["gpus"] == [0]
    shares = [_shared(head, tmp_path, f"s{i}", "--gpu-mem=20G") for i in range(4)]
    for job, out in shares:
        assert head.wait_state(job, "RUNNING")["gpus"] == [1]
        assert _saw(out) == "1 20480"
    fifth, _ = _shared(head, tmp_path, "s4", "--gpu-mem=20G")
    assert head.wait_planned(fifth)["reason"] == "Resources"
    # A whole-GPU job may not take card 1 either: it holds shares.
    another = head.sbatch("--gpus=1", "--wrap", "sleep 300")
    assert head.wait_planned(another)["reason"] == "Resources"
    squeue = head.run("squeue", "-h", "-o", "%i %b", check=True).stdout.split("\n")
    assert f"{shares[0][0]} gres/gpumem:20G" in squeue
    # sinfo --gpus shows the card's shares and no room left; %G the shareable cards.
    gpus = head.run("sinfo", "--gpus", "-h", check=True).stdout
    assert "0: held whole; 1: 4 jobs 80G, room 0G" in gpus, gpus
    assert head.run("sinfo", "-N", "-h", "-o", "%G", check=True).stdout.strip() == (
        "gpu:a100:2(S:2)"
    )
    # Once a share ends, the fifth takes its room on the same card.
    head.run("scancel", str(shares[0][0]), check=True)
    assert head.wait_state(fifth, "RUNNING")["gpus"] == [1]
    assert head.job(another)["state"] == "PENDING"


def test_a_share_and_a_whole_gpu_job_never_share_a_card(head: Head, tmp_path: Path) -> None:
    share, out = _shared(head, tmp_path, "s", "--gpus=a100:1", "--gpu-mem=30G")
    assert head.wait_state(share, "RUNNING")["gpus"] == [0]  # best fit: ties by index
    assert _saw(out) == "0 30720"
    both = head.sbatch("--gpus=2", "--wrap", "sleep 300")  # card 0 holds a share
    assert head.wait_planned(both)["reason"] == "Resources"
    head.run("scancel", str(both), check=True)
    whole = head.sbatch("--gpus=1", "--wrap", "sleep 300")
    assert head.wait_state(whole, "RUNNING")["gpus"] == [1]
    # Card 0 has 50G left, card 1 is held whole: a 60G share waits, a 40G one runs.
    big, _ = _shared(head, tmp_path, "big", "--gpu-mem=60G")
    assert head.wait_planned(big)["reason"] == "Resources"
    fits, _ = _shared(head, tmp_path, "fits", "--gpu-mem=40G")
    assert head.wait_state(fits, "RUNNING")["gpus"] == [0]
    shown = head.run("scontrol", "show", "job", str(fits), check=True).stdout
    assert "TresPerNode=gres/gpumem:40G" in shown


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ("--gpu-mem=81G",),
            "gbatch sbatch: error: --gpu-mem: 81G of one GPU requested but the largest share a "
            "GPU takes is 80G (its memory less the admin's headroom). Ask for at most 80G, or "
            "for a whole GPU (--gpus=1)\n",
        ),
        (
            ("--gres=shard:2",),
            "gbatch sbatch: error: --gres: shard:2 asks for shards, but this cluster's admin set "
            "no shard size (shard_mib in config.yaml). Ask for GPU memory instead, e.g. "
            "--gpu-mem=20G\n",
        ),
        (
            ("--gpus=2", "--gpu-mem=20G"),
            "gbatch sbatch: error: --gpu-mem: a share of one GPU's memory, but --gpus asks for "
            "2 GPUs. Drop the GPU count (a share is of one GPU; --gpus=TYPE:1 names its "
            "model), or drop --gpu-mem for whole GPUs\n",
        ),
    ],
)
def test_a_share_no_card_could_hold_is_refused_at_submit(
    head: Head, options: tuple[str, ...], error: str
) -> None:
    result = head.run("sbatch", *options, "--wrap", "true")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", error)
    assert head.run("squeue", "-h", check=True).stdout == ""


def test_a_card_with_foreign_memory_takes_fewer_shares(tmp_path: Path) -> None:
    # 30000 MiB in use that gbatch did not start (no process listed: another namespace).
    made = _head(tmp_path, "a100-80gb:1", SHARING + "shard_mib: 10240\n", [_a100(30000)])
    try:
        first, _ = _shared(made, tmp_path, "a", "--gres=shard:2")  # 2 x 10G shards
        second, _ = _shared(made, tmp_path, "b", "--gpu-mem=20G")
        for job in (first, second):
            assert made.wait_state(job, "RUNNING")["gpus"] == [0]
        third, _ = _shared(made, tmp_path, "c", "--gpu-mem=20G")  # 51920 - 40960 < 20480
        assert made.wait_planned(third)["reason"] == "Resources"
        squeue = made.run("squeue", "-h", "-o", "%i %b", check=True).stdout.split("\n")
        assert f"{first} gres/shard:2" in squeue
        # A card with memory in use is no free GPU; a whole-GPU job waits.
        whole = made.sbatch("--gpus=1", "--wrap", "true")
        assert made.wait_planned(whole)["reason"] == "Resources"
    finally:
        made.stop()
        kill_leftover_jobs(made.home)
