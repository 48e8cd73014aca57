"""`gbatch mcp serve`'s protocol (gbatch/mcp/server.py) and its tools' argument
handling, without a daemon: one JSON-RPC line in, the reply out. The tools against a
real gbatchd, driven as a subprocess, are tests/integration/test_mcp.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gbatch.cli.context import Context
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.submit import request_for_text
from gbatch.mcp.server import PROTOCOL_VERSION, Server
from gbatch.mcp.tools import (
    SUBMIT_OPTIONS,
    SUBMIT_SCHEMA,
    ToolRefused,
    check_arguments,
    make_tools,
    queue,
    submit_words,
)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Server:
    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))  # no daemon answers there
    return Server(make_tools(Context()))


def ask(server: Server, message: object) -> Any:
    line = message if isinstance(message, bytes) else json.dumps(message).encode()
    return server.handle(line)


def call(server: Server, ident: int, method: str, params: object = None) -> Any:
    message: dict[str, object] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        message["params"] = params
    return ask(server, message)


def test_initialize_answers_the_revision_spoken_here_whatever_the_client_asked(
    server: Server,
) -> None:
    for asked in ("2024-11-05", "2025-06-18", "2099-01-01"):
        reply = call(server, 1, "initialize", {"protocolVersion": asked, "capabilities": {}})
        result = reply["result"]
        assert (reply["id"], result["protocolVersion"]) == (1, PROTOCOL_VERSION)
        assert result["capabilities"] == {"tools": {"listChanged": False}}
        assert result["serverInfo"]["name"] == "gbatch"
    missing = call(server, 2, "initialize", {"capabilities": {}})
    assert missing["error"]["code"] == -32602 and "protocolVersion" in missing["error"]["message"]


def test_notifications_and_responses_get_no_reply_and_ping_an_empty_result(
    server: Server,
) -> None:
    assert ask(server, {"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert ask(server, {"jsonrpc": "2.0", "method": "notifications/cancelled"}) is None
    assert ask(server, {"jsonrpc": "2.0", "id": 9, "result": {}}) is None
    assert ask(server, b"  \n") is None
    assert call(server, "p", "ping") == {"jsonrpc": "2.0", "id": "p", "result": {}}


def test_protocol_faults_are_json_rpc_errors(server: Server) -> None:
    assert ask(server, b'{"jsonrpc": "2.0", "id": 1, "method"\n')["error"]["code"] == -32700
    assert ask(server, b"\xff\xfe\n")["error"]["code"] == -32700
    batch = ask(server, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    assert (batch["id"], batch["error"]["code"]) == (None, -32600)
    no_version = ask(server, {"id": 3, "method": "ping"})
    assert (no_version["id"], no_version["error"]["code"]) == (3, -32600)
    null_id = ask(server, {"jsonrpc": "2.0", "id": None, "method": "ping"})
    assert null_id["error"]["code"] == -32600
    unknown = call(server, 4, "resources/list")
    assert unknown["error"] == {"code": -32601, "message": "Method not found: resources/list"}
    assert call(server, 5, "tools/list", [1])["error"]["code"] == -32602


def test_tools_list_gives_each_tool_a_closed_json_schema_object(server: Server) -> None:
    tools = call(server, 1, "tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == [
        "submit",
        "queue",
        "why-pending",
        "logs",
        "cluster-status",
        "cancel",
    ]
    for tool in tools:
        schema = tool["inputSchema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema.get("required", ())) <= set(schema["properties"])
        for prop in schema["properties"].values():
            assert prop["type"] in ("string", "integer", "boolean", "array")
            assert prop["description"]
        assert tool["description"] and tool["title"]
    read_only = {t["name"]: t["annotations"]["readOnlyHint"] for t in tools}
    assert read_only == {
        "submit": False,
        "queue": True,
        "why-pending": True,
        "logs": True,
        "cluster-status": True,
        "cancel": False,
    }


def test_arguments_off_the_schema_are_invalid_params_naming_the_field(server: Server) -> None:
    def problem(name: str, arguments: object) -> str:
        reply = call(server, 1, "tools/call", {"name": name, "arguments": arguments})
        assert reply["error"]["code"] == -32602, reply
        message: str = reply["error"]["message"]
        return message

    assert problem("logs", {}) == "Invalid arguments for tool logs: job: required"
    assert "gpus: expected an integer, got a string" in problem("submit", {"gpus": "2"})
    assert "gpus: -1 is below the least, 0" in problem("submit", {"wrap": "x", "gpus": -1})
    assert "hold: expected true or false, got an integer" in problem("submit", {"hold": 1})
    assert "jobs: give at least 1" in problem("cancel", {"jobs": []})
    assert "jobs: item 1: expected a string, got an integer" in problem(
        "cancel", {"jobs": ["1", 2]}
    )
    assert "color: not an argument of this tool" in problem("queue", {"color": "red"})
    assert "arguments: give an object" in problem("queue", ["me"])
    # Each fits, together they do not: still the fields' names.
    assert "script, wrap: give one of them" in problem("submit", {"script": "a", "wrap": "b"})
    assert "script, wrap: give one of them" in problem("submit", {"gpus": 1})
    assert "tail_lines, offset" in problem("logs", {"job": "1", "tail_lines": 3, "offset": 0})
    unknown = call(server, 2, "tools/call", {"name": "rm", "arguments": {}})
    assert (
        unknown["error"]["code"] == -32602 and "Unknown tool: 'rm'" in unknown["error"]["message"]
    )


def test_a_refused_call_is_a_result_with_is_error_and_gbatchs_one_line(server: Server) -> None:
    reply = call(
        server, 1, "tools/call", {"name": "submit", "arguments": {"wrap": "x", "time": "zz"}}
    )
    result = reply["result"]
    assert result["isError"] is True
    (text,) = [c["text"] for c in result["content"]]
    assert text.startswith('gbatch sbatch: error: -t/--time: "zz" is not a time limit.')
    # No daemon answers: the CLI's line and hint.
    queue = call(server, 2, "tools/call", {"name": "queue", "arguments": {}})["result"]
    assert queue["isError"] is True
    assert queue["content"][0]["text"].startswith("gbatch squeue: error: no gbatch daemon answers")
    assert queue["content"][0]["text"].endswith("Start one with `gbatch daemon start`")
    bad_id = call(server, 3, "tools/call", {"name": "logs", "arguments": {"job": "1x"}})["result"]
    assert bad_id["isError"] is True
    assert bad_id["content"][0]["text"].startswith("gbatch logs: error: job: '1x' is not a job id")


def test_values_that_look_like_options_stay_values() -> None:
    words = submit_words({"name": "-H", "wrap": "--hold", "gpus": 1})
    assert words == ["--job-name=-H", "--gpus=1", "--wrap=--hold"]
    with pytest.raises(ToolRefused, match="gbatch squeue: error: Invalid user: -t"):
        queue(Context(), {"users": ["-t", "b"], "me": True})  # a user's name, not -t
    with pytest.raises(BadSubmit, match='-J/--job-name: "-H" is not a valid job name'):
        request_for_text(None, "mcp", words)  # the name, refused as one: not --hold
    request = request_for_text(None, "mcp", submit_words({"wrap": "--hold"}))
    assert request.held is False and "--hold" in str(request.spec["command"])
    assert set(SUBMIT_OPTIONS) < set(SUBMIT_SCHEMA["properties"])


def test_request_for_text_takes_sbatchs_options_over_a_scripts_lines() -> None:
    script = "#!/bin/bash\n#SBATCH -J fromscript --gpus=1 -t 10\necho hi\n"
    request = request_for_text(script, "mcp", ["--job-name=mine", "--hold"])
    assert (request.spec["name"], request.spec["gpus"], request.held) == ("mine", 1, True)
    yaml = request_for_text("command: python train.py\ngpus: 2\n", "mcp", ["--gpus=1"])
    assert (yaml.spec["name"], yaml.spec["gpus"]) == ("mcp", 1)
    with pytest.raises(BadSubmit, match="'extra' is not an option"):
        request_for_text(None, "mcp", ["--wrap=true", "extra"])
    with pytest.raises(BadSubmit, match="unrecognized arguments: --gpu=1"):
        request_for_text(None, "mcp", ["--wrap=true", "--gpu=1"])
    with pytest.raises(BadSubmit, match="--wrap: mcp is given too"):
        request_for_text(script, "mcp", ["--wrap=true"])


def test_check_arguments_passes_what_fits() -> None:
    assert check_arguments(SUBMIT_SCHEMA, {"wrap": "x", "gpus": 0, "options": ["--hold"]}) is None


def test_serve_answers_line_by_line_and_refuses_an_oversized_message_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from gbatch.mcp import server as mcp_server

    monkeypatch.setenv("GBATCH_HOME", str(tmp_path))
    monkeypatch.setattr(mcp_server, "MAX_LINE_BYTES", 64)
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    big = b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"x": "' + b"y" * 200 + b'"}}\n'
    out = io.BytesIO()
    assert mcp_server.serve(Context(), io.BytesIO(ping + big + ping), out) == 0
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r.get("id") for r in replies] == [1, None, 1]
    assert replies[1]["error"]["code"] == -32600 and "over" in replies[1]["error"]["message"]


class _LogClient:
    """ReadLog's replies over `log`, `chunk` bytes at a time (the daemon's 256 KiB)."""

    def __init__(self, log: bytes, chunk: int, done: bool) -> None:
        self.log, self.chunk, self.done = log, chunk, done

    def call(self, request: Any) -> dict[str, Any]:
        data = self.log[request.offset : request.offset + self.chunk]
        end = request.offset + len(data)
        final = self.done and end == len(self.log)
        return {"data": data.decode(), "offset": end, "done": final, "state": "RUNNING"}


def test_logs_gives_the_last_lines_or_a_byte_range_and_says_where_to_read_on() -> None:
    from types import SimpleNamespace

    from gbatch.mcp.tools import read_log

    log = b"".join(b"line %d\n" % i for i in range(1, 1001))  # 8,893 bytes
    ctx: Any = SimpleNamespace(client=_LogClient(log, 100, done=False))
    where, text = read_log(ctx, {"job": "7", "tail_lines": 2})
    assert text == "line 999\nline 1000\n"
    assert where == (
        f"job 7 RUNNING: bytes {len(log) - 19}-{len(log)} of its log; next offset "
        f"{len(log)} (the job is not over: more may come)"
    )
    where, text = read_log(ctx, {"job": "7", "tail_lines": 500, "max_bytes": 10})
    assert text == "line 1000\n"  # the lines asked for, cut to max_bytes
    where, text = read_log(ctx, {"job": "7", "offset": 7, "max_bytes": 250})
    assert text == log[7:257].decode()
    assert where == "job 7 RUNNING: bytes 7-257 of its log; next offset 257 (more follows)"
    ctx.client.done = True
    where, text = read_log(ctx, {"job": "7", "offset": len(log) - 9})
    assert text == "line 1000\n"[1:] and where.endswith("(the job has ended: that is all)")


def test_whatever_else_writes_to_fd_1_goes_to_stderr_not_into_the_protocol(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    import gbatch

    stray = """
import os, sys
import gbatch.mcp.tools as tools
queue = tools.queue
def noisy(ctx, args):
    os.write(1, b"stray bytes on fd 1\\n")
    print("a stray print")
    return queue(ctx, args)
tools.queue = noisy
from gbatch.cli._main import main
sys.exit(main(["mcp", "serve"]))
"""
    call = {"name": "queue", "arguments": {}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    source = str(Path(gbatch.__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", stray],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
        env={"GBATCH_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": source},
    )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [reply["id"] for reply in replies] == [1, 2]
    assert "stray bytes on fd 1\na stray print\n" in done.stderr


def test_submit_asks_for_a_gpu_model_and_node_features_as_sbatch_does() -> None:
    """issue 30: gpu_type and constraint go through sbatch's --gpus=TYPE:N and -C."""
    words = submit_words({"wrap": "true", "gpus": 2, "gpu_type": "a100", "constraint": "ib"})
    spec = request_for_text(None, "mcp", words).spec
    assert (spec["gpus"], spec["gpu_type"], spec["constraint"]) == (2, "a100", "ib")
    one = request_for_text(None, "mcp", submit_words({"wrap": "true", "gpu_type": "h100"})).spec
    assert (one["gpus"], one["gpu_type"]) == (1, "h100")


def test_submit_names_a_qos_as_sbatch_q_does() -> None:
    """issue 33: qos goes through sbatch's --qos; the daemon checks who may use it."""
    spec = request_for_text(None, "mcp", submit_words({"wrap": "true", "qos": "high"})).spec
    assert spec["qos"] == "high"


class _StatusClient:
    """A daemon that answers ClusterStatus alone, keeping what it was asked."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def call(self, request: Any) -> dict[str, Any]:
        self.asked.append(request)
        return {
            "partitions": [
                {
                    "name": "uni",
                    "identity": "per_user",
                    "login": "login.uni.example:22",
                    "state": "down",
                    "reason": "login node unreachable",
                }
            ],
            "links": [
                {
                    "partition": "uni",
                    "user": "alice",
                    "login": "ab123",
                    "state": "ok",
                    "reason": "",
                    "since": None,
                    "linked": 1.0,
                    "public": "ssh-ed25519 AAAA gbatch:uni:alice",
                }
            ],
        }


def test_cluster_status_sends_the_clis_request_and_prints_its_text() -> None:
    from types import SimpleNamespace

    from gbatch.protocol.requests import ClusterStatus
    from gbatch.render.clusterstatus import cluster_status_text

    client = _StatusClient()
    tool = make_tools(SimpleNamespace(client=client))["cluster-status"]  # type: ignore[arg-type]
    (text,) = tool.run({})
    assert text == cluster_status_text(client.call(ClusterStatus()))
    assert "uni          per_user  down  login.uni.example:22" in text
    assert "uni          alice        ab123            ok" in text and "ssh-ed25519" not in text
    tool.run({"all": True})
    assert [r.all_users for r in client.asked] == [False, False, True]
