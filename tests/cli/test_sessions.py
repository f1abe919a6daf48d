"""``the-loop sessions list|show|logs|cancel|resume|attach``: the runner's turn records
(written through :class:`foundation.turns.TurnRecords` in the test Redis, under a unique
prefix) and the work items' state, read and acted on by the commands."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from foundation.turns import TurnContext, TurnKeys, TurnRecords
from graph.state import WorkItemState
from graph.work import TurnOrder
from the_loop.cli import main
from workers.state import RedisStateStore

REF = "github:acme/widgets#7"
OTHER = "github:acme/widgets#8"
SESSION = "0b7d1e8a-3f0c-4d55-9f61-2a0e8c1b9e11"


def order_for(ref: str, number: int = 1, node: str = "requirements") -> TurnOrder:
    return TurnOrder(id=f"{ref}/{node}/1/turn/{number}", ref=ref, node=node, visit=1,
                     number=number, max_turns=5, session_id=SESSION,
                     command="create-requirements", artifacts=("specs/7/requirements.md",))


@pytest.fixture
def deployment(monkeypatch, redis_ns, tmp_path):
    """The commands' settings point at the namespace; returns the records and the
    state store the runner and the worker would write."""
    monkeypatch.setenv("REDIS_URL", redis_ns.url)
    monkeypatch.setenv("THE_LOOP_REDIS_PREFIX", redis_ns.prefix)
    monkeypatch.setenv("THE_LOOP_QUEUE", redis_ns.queue_name)
    monkeypatch.setenv("THE_LOOP_GITHUB_TRANSPORT", "none")
    config = tmp_path / "cli-config.yaml"
    config.write_text("version: 2\nharness: {adapter: command, argv: [agent], "
                      "version: '1.0'}\n")
    monkeypatch.setenv("THE_LOOP_CONFIG", str(config))
    records = TurnRecords(redis_ns.client, TurnKeys(redis_ns.prefix),
                          f"{redis_ns.queue_name}-turns")
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    context = TurnContext("acme/widgets", 7, "Login page", "main")
    return records, store, context, config


def cli(*args: str):
    return CliRunner().invoke(main, ["sessions", *args])


def envelope(out) -> dict:
    doc = json.loads(out.output)
    assert doc["schemaVersion"] == 1
    return doc


def with_state(store, ref: str, *, cost: float = 0.42) -> WorkItemState:
    state = WorkItemState.new(ref, "digest", "requirements")
    state.status = "working"
    state.sessions["requirements"] = {"id": SESSION, "runner": "harness", "resume": "h-1"}
    state.session = state.sessions["requirements"]
    state.turns = {"requirements": 2}
    state.spend = {"cost_usd": cost, "input_tokens": 300, "output_tokens": 80, "turns": 2,
                   "seconds": 95.0}
    store.save(state)
    return state


def test_list_has_one_line_per_work_item_with_its_turn_status_session_and_cost(deployment):
    records, store, context, _ = deployment
    records.order(order_for(REF, 2), context)
    records.order(order_for(OTHER), TurnContext("acme/widgets", 8, "x", "main"))
    with_state(store, REF, cost=0.42)
    out = cli("list")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines == [
        f"{REF}  requirements  turn 2 of 5  queued  {SESSION}  $0.42",
        f"{OTHER}  requirements  turn 1 of 5  queued  {SESSION}  $0.00",
    ]
    doc = envelope(cli("list", "--json"))
    assert (doc["action"], doc["ok"], doc["status"]) == ("sessions.list", True, "ok")
    assert [(s["ref"], s["number"], s["status"], s["cost_usd"]) for s in doc["sessions"]] \
        == [(REF, 2, "queued", 0.42), (OTHER, 1, "queued", 0.0)]


def test_show_gives_the_record_the_session_binding_and_the_spend(deployment):
    records, store, context, _ = deployment
    records.order(order_for(REF, 2), context)
    with_state(store, REF)
    doc = envelope(cli("show", REF, "--json"))
    assert (doc["action"], doc["ok"], doc["status"]) == ("sessions.show", True, "queued")
    assert doc["record"]["order"]["id"] == f"{REF}/requirements/1/turn/2"
    assert doc["record"]["context"]["repository"] == "acme/widgets"
    assert doc["state"]["session"] == {"id": SESSION, "runner": "harness", "resume": "h-1"}
    assert doc["state"]["turns"] == {"requirements": 2}
    assert doc["state"]["spend"]["cost_usd"] == 0.42
    text = cli("show", REF)
    assert text.exit_code == 0
    assert f"session of requirements: {SESSION} (resume h-1)" in text.output
    assert "spend: $0.42, 2 turns, 300 in / 80 out tokens, 95 s" in text.output


def test_every_command_refuses_a_ref_without_a_turn_record_in_one_line(deployment):
    for command in ("show", "logs", "cancel", "resume", "attach"):
        out = cli(command, "github:acme/widgets#99")
        assert out.exit_code == 1, (command, out.output)
        assert out.output.strip().splitlines() == [
            "Error: github:acme/widgets#99 has no agent turn recorded (no turn was ever "
            "ordered for it, or its record expired)"]
    doc = json.loads(cli("show", "github:acme/widgets#99", "--json").output)
    assert (doc["ok"], doc["status"]) == (False, "unknown")


def test_logs_prints_the_log_file_on_this_host_else_the_tail_kept_in_redis(deployment,
                                                                            tmp_path):
    records, _, context, _ = deployment
    records.order(order_for(REF), context)
    log = tmp_path / "requirements-1-1-1.log"
    log.write_bytes(b'{"type": "result"}\nagent says \x1b[2Jhello\n')
    records.update(REF, log=str(log))
    out = cli("logs", REF)
    assert out.exit_code == 0
    assert out.output == '{"type": "result"}\nagent says \ufffd[2Jhello\n'  # no escapes
    log.unlink()  # the runner's host is another machine: the tail in Redis is shown
    missing = cli("logs", REF)
    assert missing.exit_code == 1 and "no log of its turn on this host" in missing.output
    records.redis.set(records.keys.turn_log(REF), b"the tail\n")
    doc = envelope(cli("logs", REF, "--json"))
    assert (doc["action"], doc["source"], doc["log"]) == ("sessions.logs", "redis",
                                                          "the tail\n")
    follow = cli("logs", REF, "--follow")
    assert follow.exit_code == 1 and "--follow needs the turn's log file" in follow.output


def test_logs_follow_prints_until_the_turn_ends(deployment, tmp_path):
    records, _, context, _ = deployment
    records.order(order_for(REF), context)
    log = tmp_path / "turn.log"
    log.write_text("line 1\n")
    records.update(REF, log=str(log), status="completed")
    out = cli("logs", REF, "--follow")
    assert out.exit_code == 0 and out.output == "line 1\n"


def test_cancel_asks_the_runner_to_stop_a_live_turn_and_refuses_an_ended_one(deployment):
    records, _, context, _ = deployment
    records.order(order_for(REF), context)
    doc = envelope(cli("cancel", REF, "--json"))
    assert (doc["ok"], doc["status"]) == (True, "cancel-requested")
    assert records.get(REF)["cancel"] == "1"
    records.update(REF, status="completed")
    out = cli("cancel", REF)
    assert out.exit_code == 1
    assert "its turn is completed, not queued or running: nothing to cancel" in out.output


def test_resume_queues_an_interrupted_turn_again_and_refuses_ended_or_running(deployment):
    records, _, context, _ = deployment
    records.order(order_for(REF), context)
    records.update(REF, status="interrupted")
    doc = envelope(cli("resume", REF, "--json"))
    assert (doc["ok"], doc["status"]) == (True, "queued")
    record = records.get(REF)
    assert (record["attempt"], record["status"]) == ("2", "interrupted")
    assert record["detail"] == "resumed by an operator"
    assert len(records.queue.get_job_ids()) == 2

    records.update(REF, status="running", host="elsewhere", pid=4242,
                   lease_until=time.time() + 30)
    running = cli("resume", REF)
    assert running.exit_code == 1 and "is running on elsewhere (pid 4242)" in running.output

    records.update(REF, status="completed")
    ended = cli("resume", REF)
    assert ended.exit_code == 1
    assert "its turn ended (completed); an ended turn is not run again" in ended.output
    assert len(records.queue.get_job_ids()) == 2


def test_resume_takes_back_a_running_turn_whose_runner_died(deployment):
    records, _, context, _ = deployment
    records.order(order_for(REF), context)
    records.update(REF, status="running", host="gone", lease_until=time.time() - 5)
    out = cli("resume", REF)
    assert out.exit_code == 0, out.output
    assert records.get(REF)["detail"] == "resumed by an operator: its runner stopped mid-turn"


def test_attach_says_the_runner_mode_is_process(deployment):
    records, _, context, _ = deployment
    records.order(order_for(REF), context)
    records.update(REF, status="running")
    out = cli("attach", REF)
    assert out.exit_code == 1
    assert "the runner mode is process" in out.output
    assert f"the-loop sessions logs {REF}" in out.output


def test_attach_in_tmux_mode_refuses_a_turn_that_is_not_running(deployment):
    records, _, context, config = deployment
    config.write_text(config.read_text() + "runner: {mode: tmux}\n")
    records.order(order_for(REF), context)
    out = cli("attach", REF)
    assert out.exit_code == 1
    assert "its turn is queued, not running: no tmux session to attach to" in out.output
