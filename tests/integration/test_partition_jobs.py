"""Partitions through the real CLI and daemon (issue 14, item 2): the embedded node's
partition, and an inventory's partitions with their default and maximum times."""

from __future__ import annotations

from pathlib import Path

from conftest import Head, make_head, wait_for

from gbatch.core.model import IMPLICIT_PARTITION


def test_the_embedded_node_is_in_one_default_partition_a_script_may_name(
    head: Head, tmp_path: Path
) -> None:
    sinfo = head.run("sinfo", "-N", check=True).stdout.split()
    assert sinfo[sinfo.index("local") + 2] == f"{IMPLICIT_PARTITION}*"
    script = tmp_path / "p.sh"
    script.write_text(
        f"#!/bin/sh\n#SBATCH -p {IMPLICIT_PARTITION}\n#SBATCH --gpus=0\necho $SLURM_JOB_PARTITION\n"
    )
    job_id = head.sbatch(str(script))
    job = head.wait_state(job_id, "COMPLETED")
    assert job["partition"] == IMPLICIT_PARTITION
    assert head.run("logs", str(job_id), check=True).stdout == f"{IMPLICIT_PARTITION}\n"
    squeue = head.run("squeue", "-t", "all", "-o", "%i %P", check=True).stdout
    assert f"{job_id} {IMPLICIT_PARTITION}" in squeue


def test_an_unknown_partition_is_refused_in_one_line_and_nothing_is_queued(head: Head) -> None:
    result = head.run("sbatch", "-p", "debug", "--wrap", "true")
    assert result.returncode == 2
    assert result.stderr == (
        'gbatch sbatch: error: partition: "debug" is not a partition here. Use one of: '
        f"{IMPLICIT_PARTITION}* (* is the default)\n"
    )
    listed = head.run("sbatch", "-p", "a,b,c", "--wrap", "true")
    assert listed.returncode == 2
    assert listed.stderr.startswith(
        'gbatch sbatch: error: -p/--partition: "a,b,c" names several partitions; gbatch takes one'
    )
    # Two: one of the lab's and one of a cluster's (-p gpu,uni), else refused by the head.
    pair = head.run("sbatch", "-p", f"{IMPLICIT_PARTITION},b", "--wrap", "true")
    assert pair.returncode == 2
    assert pair.stderr == (
        'gbatch sbatch: error: partition: "b" is not a partition here. Use one of: '
        f"{IMPLICIT_PARTITION}* (* is the default)\n"
    )
    assert head.run("squeue", "-h", "-t", "all", check=True).stdout == ""


INVENTORY = """\
nodes:
  # Nothing listens on port 1: the nodes stay down, and jobs wait for them.
  - {name: fast1, host: 127.0.0.1, port: 1, connect_timeout: 1}
  - {name: big1, host: 127.0.0.1, port: 1, connect_timeout: 1}
partitions:
  - {name: short, nodes: [fast1], default: true, default_time: 10, max_time: "1:00:00"}
  - {name: long, nodes: [fast1, big1]}
"""


def test_an_inventorys_partitions_give_default_and_maximum_times(tmp_path: Path) -> None:
    head = make_head(tmp_path / "home")
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    head.env["GBATCH_INVENTORY"] = str(tmp_path / "inventory.yaml")
    head.start()
    try:
        by_node = head.run("sinfo", "-N", "-h", "-o", "%N %P", check=True).stdout
        assert by_node == "fast1 short*\nfast1 long\nbig1 long\n"
        # Slurm's default layout: each partition's limit, its silent nodes grouped.
        down = [
            "short*",
            "up",
            "1:00:00",
            "1",
            "down*",
            "fast1",
            "long",
            "up",
            "infinite",
            "2",
            "down*",
            "fast1,big1",
        ]
        wait_for(lambda: head.run("sinfo", "-h").stdout.split() == down, 30, "both nodes down")
        only_long = head.run("sinfo", "-h", "-p", "long", "-o", "%R %D %N", check=True).stdout
        assert only_long == "long 2 fast1,big1\n"
        image = ("--container-image", "busybox:1.36")
        short = head.sbatch(*image, "--wrap", "true")
        assert head.job(short)["partition"] == "short"
        assert head.job(short)["time_limit"] == 600
        long_job = head.sbatch(*image, "-p", "long", "-t", "2-00:00:00", "--wrap", "true")
        assert head.job(long_job)["partition"] == "long"
        over = head.run("sbatch", *image, "-t", "2:00:00", "--wrap", "true")
        assert over.returncode == 2
        assert over.stderr == (
            "gbatch sbatch: error: time_limit: 2:00:00 is over partition short's max_time "
            "(1:00:00). Ask for at most that (-t), or use another partition\n"
        )
        shown = head.run("scontrol", "show", "job", str(long_job), check=True).stdout
        assert "   Partition=long\n" in shown
    finally:
        head.stop()


def test_more_nodes_than_a_partition_has_are_refused_at_submit_and_nothing_is_queued(
    tmp_path: Path,
) -> None:
    """Issue 32: `-N 3` on a 2-node partition is one line naming the partition and the
    fix, exit 2, nothing queued; so are -w naming a node the partition lacks and a node
    count past what -x leaves. Refused from the inventory alone: the nodes never report."""
    head = make_head(tmp_path / "home")
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    head.env["GBATCH_INVENTORY"] = str(tmp_path / "inventory.yaml")
    head.start()
    try:
        image = ("--container-image", "busybox:1.36")
        refusals = {
            ("-N", "3", "-p", "long"): (
                "nodes: 3 nodes requested (-N) but partition long has 2 (fast1,big1). Ask for "
                "at most 2 (-N 2), or use a partition with more nodes (-p)"
            ),
            ("-N", "2"): (
                "nodes: 2 nodes requested (-N) but partition short has 1 (fast1). Ask for at "
                "most 1 (-N 1), or use a partition with more nodes (-p)"
            ),
            ("-w", "big1"): (
                "nodelist: big1 is not a node of partition short (its nodes: fast1). Name "
                "nodes of it (-w), or use the partition big1 is in (-p)"
            ),
            ("-N", "2", "-p", "long", "-x", "big1"): (
                "nodes: 2 nodes requested (-N) but partition long has 1 not excluded (-x) "
                "(fast1). Ask for at most 1 (-N 1), or use a partition with more nodes (-p)"
            ),
        }
        for options, message in refusals.items():
            refused = head.run("sbatch", *image, *options, "--wrap", "hostname")
            assert refused.returncode == 2, refused
            assert refused.stderr == f"gbatch sbatch: error: {message}\n"
        script = tmp_path / "three.sh"
        script.write_text("#!/bin/bash\n#SBATCH -p long\n#SBATCH -N 3\nsrun hostname\n")
        refused = head.run("sbatch", *image, str(script))
        assert refused.returncode == 2
        assert refused.stderr.startswith(
            f"gbatch sbatch: error: {script}:3: #SBATCH nodes: 3 nodes requested (-N) but "
            "partition long has 2"
        ), refused.stderr
        assert head.run("squeue", "-h", "-t", "all", check=True).stdout == ""
        # What the partition holds is queued, waiting for its nodes.
        both = head.sbatch(*image, "-N", "2", "-p", "long", "--wrap", "hostname")
        assert head.job(both)["state"] == "PENDING"
    finally:
        head.stop()
