"""The runner's turn path (:class:`runner.service.TurnRunner`, real Redis, a real
checkout cloned from and pushed to the loopback fake GitHub) with the real Claude Code
and Codex through ``harness.baseUrl`` to the scripted model server: the first turn writes
the artifact without its last section, which the exit chain's section rule blocks; the
repair turn resumes the same session and adds it. The reports the runner hands the
worker carry the turn's own cost and tokens, as the server billed them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.config.deployment import RunnerSettings
from foundation.events import TURN_EVENT, GitHubEvent
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import Keys
from foundation.settings import HarnessSettings
from foundation.settings.harness import harness_env
from foundation.turns import TurnContext, TurnKeys, TurnRecords
from graph.context import HookConfig
from graph.model import WorkItem
from graph.runtime import AdvanceResult, Runtime
from graph.state import MemoryStateStore
from graph.work import TurnOrder
from integrations.harness import build_harness
from runner.service import TurnRunner
from runner.workspace import branch_name
from tests.contract.conftest import BINARIES, forgetful, list_price
from tests.graph.test_validate_artifacts import Files
from tests.integrations.test_github_api import rsa_pem  # noqa: F401 (fixture)
from tests.modelserver.server import ModelServer, Script
from tests.workers.test_workspace import INSTALLATION, REPO, Env
from tests.workers.test_workspace import env as workspace_env  # noqa: F401 (fixture)
from the_loop.graphs import load_graph

REF = f"github:{REPO}#7"
ARTIFACT = "specs/7/requirements.md"
CONTEXT = TurnContext(REPO, 7, "Add a login page", "main", installation_id=INSTALLATION)
SESSION = "0b7c2f4e-1d1a-4c53-9a55-2f8f7f5f9f10"


def exit_chain(requirements: str) -> AdvanceResult:
    """The shipped graph's requirements node's exit chain on ``requirements`` as the
    work item's requirements.md (its ``validate-artifacts`` hook decides)."""
    config = HookConfig(files=Files({ARTIFACT: requirements}))
    return Runtime(load_graph(), MemoryStateStore()).enrol(
        WorkItem(REF, spec_dir="specs/7"), config, None)


def order(number: int, **kw: Any) -> TurnOrder:
    return TurnOrder(id=f"{REF}/requirements/1/turn/{number}", ref=REF, node="requirements",
                     visit=1, number=number, max_turns=5, session_id=SESSION,
                     command="create-requirements", stage="requirements",
                     artifacts=(ARTIFACT,),
                     checks=({"hook": "validate-artifacts",
                              "with": {"sections": ["Problem", "Requirements"]}},), **kw)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(Script(from_prompt=True)) as served:
        yield served


def runner(adapter: str, redis_ns: Any, env: Env, server: ModelServer,
           binary: Path | None = None) -> TurnRunner:
    base = server.base_url + ("/v1" if adapter == "codex" else "")
    settings = HarnessSettings(adapter=adapter, binary=str(binary or BINARIES[adapter]),
                               base_url=base,
                               env=harness_env(adapter, ("CLAUDE_CODE_MAX_RETRIES",), False))
    harness = build_harness(settings)
    assert harness is not None
    records = TurnRecords(redis_ns.client, TurnKeys(redis_ns.prefix),
                          f"{redis_ns.queue_name}-turns")
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    workspaces = env.workspaces()
    return TurnRunner(
        records, inbox, harness, settings,
        RunnerSettings(home_dir=str(env.root / "homes"), workspace_dir=str(env.root / "ws")),
        workspaces=lambda _installation: workspaces, github=None,
        environ={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "ANTHROPIC_API_KEY": "dummy",
                 "CLAUDE_CODE_MAX_RETRIES": "1", "CODEX_API_KEY": "dummy",
                 "OPENAI_API_KEY": "dummy"})


def run(turns: TurnRunner, redis_ns: Any, turn: TurnOrder) -> dict[str, Any]:
    """Queue ``turn``, run it as the runner's job does, and return the turn of the report
    it delivered to the work item's inbox (``TurnEnded.to_dict``)."""
    assert turns.records.order(turn, CONTEXT)
    status = turns.run(REF, turn.id)
    assert status == "completed", (record(turns), log_tail(turns))
    keys = Keys(redis_ns.prefix, redis_ns.queue_name)
    delivery = redis_ns.client.lrange(keys.inbox(REF), -1, -1)[0].decode()
    body = json.loads(redis_ns.client.hget(keys.delivery(delivery), "body"))
    reported = GitHubEvent.parse(TURN_EVENT, body).inbound(delivery).turn
    assert reported is not None and reported["id"] == turn.id
    return dict(reported)


def record(turns: TurnRunner) -> dict[str, str]:
    """The work item's turn record in Redis."""
    found = turns.records.get(REF)
    assert found is not None
    return found


def log_tail(turns: TurnRunner) -> str:
    log = record(turns).get("log") or ""
    return Path(log).read_text(errors="replace")[-3000:] if Path(log).is_file() else log


@pytest.mark.parametrize("adapter", sorted(BINARIES))
def test_the_runner_blocks_then_repairs_in_the_same_session_with_the_real_cli(
        adapter: str, redis_ns: Any, workspace_env: Env,  # noqa: F811
        server: ModelServer) -> None:
    turns = runner(adapter, redis_ns, workspace_env, server)
    api = "anthropic" if adapter == "claude-code" else "openai"
    branch = branch_name(7, CONTEXT.title)

    first = run(turns, redis_ns, order(1))
    blocked = exit_chain(workspace_env.show(f"{branch}:{ARTIFACT}"))
    assert (blocked.status, [m.code for m in blocked.messages]) == (
        "blocked", ["section-missing"])
    assert first["head_sha"] == workspace_env.tip(branch)
    billed = server.billed_for(api)
    assert (first["input_tokens"], first["output_tokens"]) == billed
    assert record(turns)["status"] == "completed"

    block = {"hook": "validate-artifacts", "messages": [m.to_dict() for m in blocked.messages]}
    second = run(turns, redis_ns, order(2, resume=first["harness_session"],
                                        feedback={"block": block}, totals=first["totals"]))
    assert second["status"] == "completed", second
    assert second["harness_session"] == first["harness_session"]
    assert second["session_id"] == first["session_id"] == SESSION
    passed = exit_chain(workspace_env.show(f"{branch}:{ARTIFACT}"))
    assert (passed.status, passed.node) == ("waiting", "requirements-approval")
    total = server.billed_for(api)
    # The repair's own figures, not the session's running totals.
    assert (second["input_tokens"], second["output_tokens"]) == (
        total[0] - billed[0], total[1] - billed[1])
    kept = record(turns)
    assert (kept["status"], kept["harness_session"]) == (
        "completed", first["harness_session"])
    if adapter == "claude-code":  # Codex reports no cost
        assert len(server.billed) == 4, server.billed  # two a turn: the Write, the end
        assert first["cost_usd"] == list_price(server.billed[:2])
        assert second["cost_usd"] == list_price(server.billed[2:])
        assert float(kept["cost_usd"]) == second["cost_usd"]


@pytest.mark.parametrize("adapter", sorted(BINARIES))
def test_a_session_lost_before_the_repair_is_replaced_by_a_fresh_seeded_one(
        adapter: str, redis_ns: Any, workspace_env: Env,  # noqa: F811
        server: ModelServer) -> None:
    turns = runner(adapter, redis_ns, workspace_env, server,
                   forgetful(workspace_env.root, adapter))
    branch = branch_name(7, CONTEXT.title)
    first = run(turns, redis_ns, order(1))
    blocked = exit_chain(workspace_env.show(f"{branch}:{ARTIFACT}"))
    block = {"hook": "validate-artifacts", "messages": [m.to_dict() for m in blocked.messages]}

    second = run(turns, redis_ns, order(2, resume=first["harness_session"],
                                        feedback={"block": block}, totals=first["totals"]))
    # The resume found no session: a fresh one, recorded as the node's session, did the
    # repair from the seeded input (the artifact already written, no lost history).
    assert second["status"] == "completed", second
    assert second["session_id"] != SESSION
    assert second["harness_session"] != first["harness_session"]
    assert record(turns)["session_id"] == second["session_id"]
    seeded = [r for r in server.requests if "continues earlier work" in str(r["body"])]
    assert seeded and "Written by the scripted model" not in str(seeded[0]["body"])
    passed = exit_chain(workspace_env.show(f"{branch}:{ARTIFACT}"))
    assert (passed.status, passed.node) == ("waiting", "requirements-approval")
