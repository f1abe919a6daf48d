"""End to end, sessions that follow the work item across two runner "nodes": two
``the-loop runner`` processes, each with its own ``runner.homeDir`` and
``runner.workspaceDir`` (the harness session of a work item lives in the HOME of the
runner that ran its turn), with the receiver, a worker, the real Redis, the loopback fake
GitHub and the fake Claude Code CLI (tests/harnesses/claude).

The repair turn of an item goes back to the runner holding its session (the same HOME,
``--resume`` of the first turn's session); when that runner is SIGKILLed mid-repair, the
other one takes the turn over once the holder's liveness key is gone, finds no session in
its HOME (``No conversation found``), starts a fresh session seeded with the artifacts
and the pending feedback -- the turn record names the lost session and the turn that
started the new one, and the work item's state takes the new session -- and the item
still reaches its gate.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.test_agent_loop import (
    BIN,
    HARNESSES,
    REF,
    build_stack,
    item_home,
    turns,
    untrusted_enrol,
)
from tests.e2e.test_end_to_end import post, wait_until
from tests.support.processes import start, stop

pytestmark = pytest.mark.e2e


def _second_runner_config(tmp_path: Path, first: Path) -> tuple[Path, Path]:
    """A copy of the stack's configuration with a HOME and workspaces of its own (the
    second "node"); returns (its file, its homeDir)."""
    config = json.loads(first.read_text())
    home = tmp_path / "home-b"
    home.mkdir()
    config["runner"] = {**config["runner"], "homeDir": str(home),
                        "workspaceDir": str(tmp_path / "workspaces-b")}
    path = tmp_path / "cli-config-b.yaml"
    path.write_text(json.dumps(config))
    return path, home


def _arg(call: dict, flag: str) -> str | None:
    argv = call["argv"]
    return argv[argv.index(flag) + 1] if flag in argv else None


def _record(loop) -> dict[str, str]:
    raw = loop.store.redis.hgetall(f"{loop.env['THE_LOOP_REDIS_PREFIX']}:turn:{REF}")
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_the_repair_goes_back_to_the_sessions_runner_and_a_dead_ones_turn_starts_a_seeded_session(  # noqa: E501
        redis_ns, tmp_path):
    loop, stop_fake = build_stack(redis_ns, tmp_path, HARNESSES["claude-code"])
    try:
        config_b, home_b = _second_runner_config(tmp_path, Path(loop.env["THE_LOOP_CONFIG"]))
        env_b = {**loop.env, "THE_LOOP_CONFIG": str(config_b)}
        loop.procs["runner-b"] = start([str(BIN / "the-loop"), "runner"], env_b,
                                       loop.logs / "runner-b.out")
        homes = {"runner": loop.home, "runner-b": home_b}
        for home in homes.values():  # a resumed session's turn blocks on its holder
            knobs = item_home(home) / ".fake-harness" / "knobs.json"
            knobs.parent.mkdir(parents=True, exist_ok=True)
            knobs.write_text(json.dumps({"sleep_resumed": 300}))

        r, _ = post(loop.url, "issues", untrusted_enrol())
        assert r.status_code == 202
        holder = wait_until(lambda: next((n for n, h in homes.items() if len(turns(h)) >= 2),
                                         None), timeout=120, what="the repair turn started")
        other = "runner-b" if holder == "runner" else "runner"

        # The repair is on the runner that ran the first turn, resuming its session.
        first, repair = turns(homes[holder])
        assert turns(homes[other]) == []
        assert repair["env"]["THE_LOOP_TURN"] == "2"
        lost = first["env"]["THE_LOOP_SESSION_ID"]
        assert _arg(first, "--session-id") == lost
        assert _arg(repair, "--resume") == lost
        record = wait_until(lambda: (r := _record(loop)).get("status") == "running" and r,
                            timeout=30, what="the repair's record running")
        assert record["pid"] == str(loop.procs[holder].pid)
        holder_id = record["runner"]
        prefix = loop.env["THE_LOOP_REDIS_PREFIX"]
        assert loop.store.redis.get(f"{prefix}:affinity:{REF}").decode() == holder_id

        # The holder dies mid-repair; the other runner takes the turn over.
        os.killpg(loop.procs[holder].pid, signal.SIGKILL)
        loop.procs[holder].wait(timeout=10)
        try:
            wait_until(lambda: (s := loop.state()) and s.current_node ==
                       "requirements-approval" and s.status == "waiting", timeout=180,
                       what="the work item at its gate on the other runner")
        except AssertionError:
            print(loop.logs_text())
            raise

        # It found no session in its HOME and started a fresh one, seeded.
        taken = turns(homes[other])
        assert [c["env"]["THE_LOOP_TURN"] for c in taken] == ["2", "2"]
        gone, fresh = taken
        assert _arg(gone, "--resume") == lost  # "No conversation found" in this HOME
        new = _arg(fresh, "--session-id")
        assert new and new != lost and _arg(fresh, "--resume") is None
        assert "read these files in the checkout first" in fresh["stdin"]
        assert "specs/1/requirements.md" in fresh["stdin"]
        assert "has no 'Requirements' section" in fresh["stdin"]  # the pending feedback
        record = _record(loop)  # the repair's: recorded as a new session
        assert record["id"].endswith("/turn/2") and record["status"] == "completed"
        assert record["fresh_session_at"] == record["id"]
        assert record["lost_session"] == lost
        assert record["session_id"] == new
        assert loop.state().sessions["requirements"]["id"] == new
        assert record["runner"] != holder_id
        assert record["pid"] == str(loop.procs[other].pid)
        assert loop.store.redis.get(f"{prefix}:affinity:{REF}").decode() == record["runner"]
        assert len(turns(homes[holder])) == 2  # the dead runner's HOME saw nothing more
    finally:
        for proc in loop.procs.values():
            stop(proc)
        stop_fake()
