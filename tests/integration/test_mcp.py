"""`gbatch mcp serve` as a coding agent meets it: the server is a process of its own,
spoken to over its stdin/stdout in MCP's newline-delimited JSON-RPC, against a real
gbatchd; one test drives it with the official MCP SDK's stdio client."""

from __future__ import annotations

import itertools
import json
import os
import pwd
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from asuser import User, as_user, preload, run_cli
from conftest import GBATCH, Head, require_root, wait_for

INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


class Mcp:
    """One server process's pipes: a line out, a line back."""

    def __init__(self, to_server: IO[bytes], from_server: IO[bytes]) -> None:
        self.to_server = to_server
        self.from_server = from_server
        self.ids = itertools.count(1)

    def send(self, message: dict[str, Any] | bytes) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.to_server.write(line)
        self.to_server.flush()

    def receive(self) -> dict[str, Any]:
        ready, _, _ = select.select([self.from_server], [], [], 60)
        assert ready, "the server did not answer within 60 s"
        line = self.from_server.readline()
        assert line, "the server closed its stdout"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self.ids), "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        reply = self.receive()
        assert reply["id"] == message["id"]
        return reply

    def start(self) -> dict[str, Any]:
        result = self.request("initialize", INIT)["result"]
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def tool(self, name: str, /, **arguments: Any) -> tuple[bool, list[str]]:
        """(isError, the texts) of a call that the protocol took."""
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        result = reply["result"]
        return result["isError"], [item["text"] for item in result["content"]]


@pytest.fixture
def mcp(head: Head, tmp_path: Path) -> Iterator[Mcp]:
    with (tmp_path / "mcp.err").open("wb") as errors:
        server = subprocess.Popen(
            [*GBATCH, "mcp", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=head.env,
            cwd=tmp_path,
        )
        assert server.stdin is not None and server.stdout is not None
        session = Mcp(server.stdin, server.stdout)
        session.start()
        yield session
        server.stdin.close()  # end of input: the server ends
        assert server.wait(timeout=30) == 0
    assert (tmp_path / "mcp.err").read_text() == ""


def submitted(text: str) -> int:
    assert text.startswith("Submitted batch job "), text
    return int(text.split()[-1])


def test_an_agent_submits_a_job_sees_it_queued_and_reads_its_log(
    head: Head, mcp: Mcp, tmp_path: Path
) -> None:
    tools = mcp.request("tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == [
        "submit",
        "queue",
        "why-pending",
        "logs",
        "cluster-status",
        "cancel",
    ]
    assert tools[0]["inputSchema"]["properties"]["wrap"]["type"] == "string"
    failed, (clusters,) = mcp.tool("cluster-status")  # this head has no cluster partition
    assert not failed and clusters.startswith("PARTITION") and "no links" in clusters

    failed, (text,) = mcp.tool(
        "submit", wrap="for i in 1 2 3 4; do echo line $i; done; sleep 30", name="agentjob"
    )
    assert not failed
    job_id = submitted(text)
    failed, (listing,) = mcp.tool("queue", jobs=[str(job_id)])
    assert not failed
    header, row = listing.splitlines()
    cli = head.run("squeue", "-j", str(job_id), check=True).stdout.splitlines()
    # squeue's own listing (ST and TIME may have moved on meanwhile)
    assert header == cli[0] and row.split()[:4] == cli[1].split()[:4]
    assert row.split()[2] == "agentjob"
    # The job starts where the server runs, as `gbatch sbatch` from there would.
    assert head.job(job_id)["workdir"] == str(tmp_path)

    wait_for(lambda: "line 4" in mcp.tool("logs", job=str(job_id))[1][-1], what="the log")
    assert mcp.tool("cancel", jobs=[str(job_id)])[0] is False
    head.wait_state(job_id, "CANCELLED")

    failed, (where, text) = mcp.tool("logs", job=str(job_id), tail_lines=2)
    assert not failed and text == "line 3\nline 4\n"
    assert where.startswith(f"job {job_id} CANCELLED: bytes 14-28 of its log; next offset 28")
    failed, (where, text) = mcp.tool("logs", job=str(job_id), offset=7, max_bytes=7)
    assert (where.split(":")[1].strip(), text) == (
        "bytes 7-14 of its log; next offset 14 (more follows)",
        "line 2\n",
    )


def test_a_yaml_job_file_and_a_batch_script_are_taken_as_text(head: Head, mcp: Mcp) -> None:
    failed, (text,) = mcp.tool("submit", script="command: echo from-yaml\nname: yamljob\n")
    assert not failed
    yaml_job = submitted(text)
    script = "#!/bin/bash\n#SBATCH -J fromscript\necho from-script\n"
    failed, (text,) = mcp.tool("submit", script=script, options=["--hold"])
    script_job = submitted(text)
    assert head.job(yaml_job)["name"] == "yamljob"
    held = head.job(script_job)
    assert (held["name"], held["state"], held["reason"]) == ("fromscript", "PENDING", "JobHeldUser")
    head.wait_state(yaml_job, "COMPLETED")
    assert mcp.tool("logs", job=str(yaml_job))[1][1] == "from-yaml\n"
    failed, (why,) = mcp.tool("why-pending", job=str(script_job))
    assert not failed
    assert "JobState=PENDING Reason=JobHeldUser" in why
    assert "gbatch scontrol release ID" in why and "Queue: not among the jobs" in why
    head.run("scancel", str(script_job), check=True)


def test_why_pending_gives_squeues_reason_and_the_place_in_the_queue(head: Head, mcp: Mcp) -> None:
    hog = submitted(mcp.tool("submit", wrap="sleep 60", gpus=2, name="hog")[1][0])
    head.wait_state(hog, "RUNNING")
    first = submitted(mcp.tool("submit", wrap="true", gpus=1, name="first")[1][0])
    second = submitted(mcp.tool("submit", wrap="true", gpus=1, name="second")[1][0])
    for job in (first, second):
        wait_for(lambda job=job: head.job(job)["reason"] in ("Resources", "Priority"))
    shown = head.run("squeue", "-h", "-j", str(second), "-o", "%r", check=True).stdout.strip()

    failed, (why,) = mcp.tool("why-pending", job=str(second))
    assert not failed
    lines = why.splitlines()
    assert lines[0] == f"JobId={second} JobName=second UserId=root JobState=PENDING Reason={shown}"
    assert lines[1].startswith("Waits for: ")
    assert lines[2] == "Asks for: 1 GPU(s) on one node in gpu."
    assert lines[3].startswith("Queue: place 2 of 2 pending jobs in the scheduler's order")
    assert lines[3].endswith(f"ahead of it: {first} (root).")

    failed, (running,) = mcp.tool("why-pending", job=str(hog))
    assert "JobState=RUNNING" in running and "Not pending: it is RUNNING on node local" in running
    failed, (unknown,) = mcp.tool("why-pending", job="999")
    assert (failed, unknown) == (True, "gbatch scontrol: error: Invalid job id specified: 999")
    head.run("scancel", str(hog), str(first), str(second), check=True)


def test_protocol_faults_get_json_rpc_errors_and_the_server_carries_on(mcp: Mcp) -> None:
    mcp.send(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"\n')
    assert mcp.receive()["error"]["code"] == -32700
    unknown = mcp.request("tools/delete")
    assert unknown["error"] == {"code": -32601, "message": "Method not found: tools/delete"}
    bad = mcp.request("tools/call", {"name": "submit", "arguments": {"wrap": "x", "gpus": "two"}})
    assert bad["error"]["code"] == -32602
    assert bad["error"]["message"].endswith("gpus: expected an integer, got a string")
    refused = mcp.tool("submit", wrap="x", time="forever")
    assert refused[0] is True and refused[1][0].startswith("gbatch sbatch: error: -t/--time:")
    assert mcp.request("ping")["result"] == {}


def test_an_older_clients_version_is_answered_with_the_one_spoken_here(head: Head) -> None:
    server = subprocess.Popen(
        [*GBATCH, "mcp", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=head.env
    )
    old = {**INIT, "protocolVersion": "2024-11-05"}
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": old}
    out, _ = server.communicate(json.dumps(message).encode() + b"\n", timeout=60)
    (reply,) = [json.loads(line) for line in out.splitlines()]
    assert reply["result"]["protocolVersion"] == "2025-06-18"
    assert server.returncode == 0


def serve_as(user: User, home: Path) -> tuple[Mcp, int]:
    """`gbatch mcp serve` in a child that became `user` (the venv's interpreter may not
    be theirs to run: fork, as asuser does); the session and the child's pid."""
    preload(("gbatch.cli._main", "gbatch.cli.mcp", "gbatch.cli.scancel", "gbatch.cli.context"))
    preload(("gbatch.mcp.server", "gbatch.mcp.tools", "gbatch.protocol.requests"))
    preload(("gbatch.protocol.codec", "gbatch.core.jobids"))
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the user for good, then serve on the pipes
        try:
            os.dup2(to_child, 0)
            os.dup2(from_child, 1)
            for fd in (to_child, from_parent, to_parent, from_child):
                os.close(fd)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            os.environ["GBATCH_HOME"] = str(home)
            from gbatch.cli._main import main

            os._exit(main(["mcp", "serve"]))
        finally:
            os._exit(70)
    os.close(to_child)
    os.close(from_child)
    return Mcp(os.fdopen(from_parent, "wb"), os.fdopen(to_parent, "rb")), pid


@pytest.fixture
def as_root() -> None:
    require_root("to act as another user")


def test_another_users_agent_cannot_cancel_my_job_and_is_told_as_scancel_tells(
    as_root: None, shared_head: Head
) -> None:
    entry = pwd.getpwnam("nobody")
    nobody = User("nobody", entry.pw_uid, entry.pw_gid)
    job_id = shared_head.sbatch("--wrap", "sleep 60")
    shared_head.wait_state(job_id, "RUNNING")

    session, pid = serve_as(nobody, shared_head.home)
    try:
        session.start()
        refused, (text,) = session.tool("cancel", jobs=[str(job_id)])
        failed_log, (log_text,) = session.tool("logs", job=str(job_id))
        listed, (listing,) = session.tool("queue")
    finally:
        session.to_server.close()
        os.waitpid(pid, 0)
    cli = as_user(nobody, lambda: run_cli(shared_head.home, "scancel", str(job_id)))
    assert cli["rc"] == 1
    assert refused is True and text == cli["err"].strip()
    assert text == (
        f"gbatch scancel: error: Kill job error on job id {job_id}: "
        f"Access/permission denied for job {job_id}"
    )
    assert failed_log is True and log_text.startswith(
        "gbatch logs: error: Access/permission denied"
    )
    assert listed is False and str(job_id) in listing  # everyone sees the queue, as in Slurm
    assert shared_head.state(job_id) == "RUNNING"
    audit = (shared_head.home / "gbatchd.log").read_text()
    assert f"user=nobody uid={nobody.uid}" in audit
    shared_head.run("scancel", str(job_id), check=True)


def test_the_official_mcp_sdk_client_initializes_lists_and_calls(
    head: Head, tmp_path: Path
) -> None:
    """Interop: the reference client (the `mcp` package, in the test extra) against
    the hand-written server."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def session() -> tuple[dict[str, Any], list[str], dict[str, Any], dict[str, Any]]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "gbatch", "mcp", "serve"],
            env=head.env,
            cwd=tmp_path,
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            init = await client.initialize()
            tools = await client.list_tools()
            done = await client.call_tool("submit", {"wrap": "echo sdk", "name": "sdk"})
            refused = await client.call_tool("cancel", {"jobs": ["4x"]})
            return (
                init.model_dump(by_alias=True, mode="json"),
                [tool.name for tool in tools.tools],
                done.model_dump(by_alias=True, mode="json"),
                refused.model_dump(by_alias=True, mode="json"),
            )

    init, names, done, refused = anyio.run(session)
    assert init["protocolVersion"] == "2025-06-18"
    assert names == ["submit", "queue", "why-pending", "logs", "cluster-status", "cancel"]
    assert done["isError"] is False
    job_id = submitted(done["content"][0]["text"])
    head.wait_state(job_id, "COMPLETED")
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith("gbatch scancel: error: JOBID: '4x'")
