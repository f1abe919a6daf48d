"""The whole stack a deployment runs, with the real Claude Code and Codex: gunicorn, an
RQ worker and ``the-loop runner`` as real processes (the helpers of
:mod:`tests.e2e.test_agent_loop`), the real Redis, the loopback fake GitHub backed by a
bare git repository, and each real CLI through ``harness.baseUrl`` to the scripted model
server (:mod:`tests.modelserver.server`).

- Label -> the first requirements turn writes the artifact without its last section ->
  the exit chain blocks -> the repair resumes the same session (the model server
  answers its first request(s) with 500s, which the CLI retries: Codex says so in an
  ``error`` event, kept as a warning in the turn's record) -> pass -> the gate.
- A response that hangs past ``harness.turnTimeout``: the turn is killed and reported
  ``timeout``; the exit chain blocks on it (``turn-timeout``, retriable) and the next
  turn of the visit goes on to the gate (docs/harness.md, "When a turn fails").
- Persistent 500s: the CLI retries, then gives up; the turn is recorded ``failed`` with
  what the CLI said, nothing completed, and with ``maxTurns: 1`` the work item escalates.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.contract.conftest import BINARIES
from tests.contract.test_local_run import VERSIONS
from tests.e2e.test_agent_loop import REF, REPO, Loop, branch_of, build_stack, untrusted_enrol
from tests.e2e.test_end_to_end import post, wait_until
from tests.modelserver.server import ModelServer, Script
from tests.support.processes import group_alive, stop

pytestmark = pytest.mark.e2e

ARTIFACT = "specs/1/requirements.md"
#: What the CLIs are given besides their key: one retry of a failed request (Claude
#: Code), no traffic but the model's.
ENV = ["CLAUDE_CODE_MAX_RETRIES", "DISABLE_TELEMETRY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]


@pytest.fixture
def real_stack(request: pytest.FixtureRequest, redis_ns: Any,
               tmp_path: Path) -> Iterator[tuple[Loop, ModelServer, str]]:
    """The stack with the real CLI ``request.param[0]`` against a model server with
    script ``request.param[1]`` and ``harness`` settings ``request.param[2]``; yields
    the stack, the server and the adapter's name."""
    adapter, script, harness = request.param
    with ModelServer(script) as server:
        base = server.base_url + ("/v1" if adapter == "codex" else "")
        loop, stop_fake = build_stack(redis_ns, tmp_path, {
            "adapter": adapter, "binary": str(BINARIES[adapter]),
            "version": VERSIONS[adapter], "baseUrl": base, "env": ENV, **harness,
        }, env={"ANTHROPIC_API_KEY": "dummy", "CODEX_API_KEY": "dummy",
                "CLAUDE_CODE_MAX_RETRIES": "1", "DISABLE_TELEMETRY": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
        try:
            yield loop, server, adapter
        except BaseException:
            print(loop.logs_text())
            raise
        finally:
            for proc in loop.procs.values():
                stop(proc)
            stop_fake()
            if os.environ.get("THE_LOOP_E2E_SHOW_LOGS"):
                print(loop.logs_text())


def cases(script: dict[str, Any], harness: dict[str, Any] | None = None,
          faults: dict[str, list[int]] | None = None) -> list[Any]:
    """One :func:`real_stack` parameter per CLI (``faults``: the script's per CLI)."""
    return [pytest.param((adapter, Script(from_prompt=True, **script,
                                          faults=list((faults or {}).get(adapter, []))),
                          harness or {}), id=adapter)
            for adapter in sorted(BINARIES)]


def turn_record(loop: Loop) -> dict[str, str]:
    raw = loop.store.redis.hgetall(f"{loop.env['THE_LOOP_REDIS_PREFIX']}:turn:{REF}")
    return {k.decode(): v.decode() for k, v in raw.items()}


def ended(loop: Loop) -> list[dict[str, Any]]:
    """The data of the work item's ``turn.completed`` events, in order."""
    return [e.data for e in loop.store.events(REF) if e.type == "turn.completed"]


def exit_chains(loop: Loop) -> list[str]:
    return [e.data["status"] for e in loop.store.events(REF) if e.type == "chain.completed"
            and e.data["node"] == "requirements" and e.data["boundary"] == "exit"]


def at_the_gate(loop: Loop) -> bool:
    state = loop.state()
    return bool(state and state.current_node == "requirements-approval"
                and state.status == "waiting")


#: The repair's first requests fail: Claude Code (CLAUDE_CODE_MAX_RETRIES=1) retries one
#: 500; Codex retries five silently... after the fourth it emits an ``error`` event
#: ("Reconnecting... 1/5") and goes on.
TRANSIENT = {"claude-code": [500], "codex": [500] * 5}


@pytest.mark.parametrize("real_stack", cases({"faults_at_repair": True}, faults=TRANSIENT),
                         indirect=True)
def test_label_block_repair_in_the_same_session_then_the_gate(
        real_stack: tuple[Loop, ModelServer, str]) -> None:
    loop, server, adapter = real_stack
    assert post(loop.url, "issues", untrusted_enrol())[0].status_code == 202
    wait_until(lambda: at_the_gate(loop), timeout=150, what="requirements repaired")

    assert exit_chains(loop) == ["block", "pass"]
    first, repair = ended(loop)
    assert (first["status"], repair["status"]) == ("completed", "completed")
    state = loop.state()
    assert state.spend["turns"] == 2
    assert state.sessions["requirements"]["id"] == first["session"] == repair["session"]
    # The repair resumed the CLI's own session (Claude Code's --session-id, Codex's thread).
    assert state.sessions["requirements"]["resume"] == turn_record(loop)["harness_session"]
    assert server.script.faults == []  # every fault answered a request, and was retried
    text = loop.fake.file(REPO, ARTIFACT, branch_of(loop))
    assert "## Problem" in text and "## Requirements" in text

    record = turn_record(loop)
    assert (record["status"], record["id"]) == ("completed", f"{REF}/requirements/1/turn/2")
    warnings = json.loads(record["warnings"])
    if adapter == "codex":
        # Codex's error event of the retried 500s is the turn's warning, not a failure.
        assert any(w.startswith("Reconnecting... 1/5") for w in warnings), warnings
        assert repair["warnings"] >= 1
    else:
        assert warnings == []


# The timeout also bounds the turns after the hang: a real CLI's start on a busy machine
# (the suite runs 4 processes on 2 CPUs) can take several seconds, so not a tight one.
@pytest.mark.parametrize("real_stack", cases({"hangs": 1}, {"turnTimeout": 20}), indirect=True)
def test_a_response_hung_past_the_turn_timeout_is_reported_and_the_next_turn_goes_on(
        real_stack: tuple[Loop, ModelServer, str]) -> None:
    loop, server, adapter = real_stack
    post(loop.url, "issues", untrusted_enrol())
    first = wait_until(lambda: (r := turn_record(loop)).get("pgid") and r.get("id", "")
                       .endswith("/turn/1") and r, timeout=60, what="turn 1 started")
    wait_until(lambda: at_the_gate(loop), timeout=150, what="the gate after the timeout")
    assert not group_alive(int(first["pgid"]))  # the hung CLI was killed, group and all

    turns = ended(loop)
    assert turns[0]["status"] == "timeout"
    assert [t["status"] for t in turns[1:]] == ["completed"] * (len(turns) - 1)
    assert exit_chains(loop)[0] == "block" and exit_chains(loop)[-1] == "pass"
    # The block's message (the turn ended on its timeout) was the next turn's input.
    told = [r for r in server.requests
            if "turn ended without completing (timeout" in json.dumps(r["body"])]
    assert told, "no request carried the timed-out turn's block"
    assert server.script.hangs == 0


@pytest.mark.parametrize("real_stack", cases({}, {"maxTurns": 1}, faults={
    "claude-code": [500] * 1000, "codex": [500] * 1000}), indirect=True)
def test_persistent_500s_fail_the_turn_with_what_the_cli_said_and_escalate(
        real_stack: tuple[Loop, ModelServer, str]) -> None:
    loop, server, adapter = real_stack
    post(loop.url, "issues", untrusted_enrol())
    wait_until(lambda: (s := loop.state()) and s.status == "escalated", timeout=150,
               what="the failed turn escalated (maxTurns 1)")

    record = turn_record(loop)
    assert record["status"] == "failed", record
    said = {"claude-code": "API Error: 500", "codex": "high demand"}
    assert said[adapter] in record["detail"], record["detail"]
    assert [t["status"] for t in ended(loop)] == ["failed"]
    assert server.billed == []  # no answer was ever served
    state = loop.state()
    assert "used its 1 agent turns" in state.escalated["reason"]
    assert "turn-failed" in json.dumps(state.results["requirements"])
    assert said[adapter] in json.dumps(state.results["requirements"])
