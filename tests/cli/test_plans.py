"""``the-loop tasks plan`` (same input, same bytes; every finding, exit 1) and, on a local
checkout, a graph change reported by ``the-loop check`` and moved by ``the-loop state
migrate REF --to-current [--dry-run]``."""

from __future__ import annotations

import json

from tests.cli.test_drivers import REF, checkout, cli, state_file  # noqa: F401
from the_loop.graphs import default_graph_path
from the_loop.stores import FileStateStore

TASKS = ("# Tasks\n\n## Tasks\n\n```yaml\ntasks:\n"
         "  - {id: c, title: C, depends_on: [a, b], acceptance: [c works]}\n"
         "  - {id: a, title: A, acceptance: [a works]}\n"
         "  - {id: b, title: B, acceptance: [b works]}\n```\n")


def test_tasks_plan_prints_the_waves_and_the_ready_set(tmp_path):
    path = tmp_path / "tasks.md"
    path.write_text(TASKS)
    out = cli("tasks", "plan", str(path))
    assert out.exit_code == 0 and out.output == "wave 1: a b\nwave 2: c\nready: a b\n"
    one = cli("tasks", "plan", str(path), "--json").output
    path.write_text(TASKS.replace("[a, b]", "[b, a]"))
    assert cli("tasks", "plan", str(path), "--json").output == one  # same plan, same bytes
    doc = json.loads(one)
    assert doc["waves"] == [["a", "b"], ["c"]] and doc["ready"] == ["a", "b"]
    mermaid = cli("tasks", "plan", str(path), "--format", "mermaid").output
    assert mermaid.startswith("flowchart LR\n") and "t0 --> t2" in mermaid


def test_tasks_plan_of_a_work_item_reads_its_tasks_md(checkout):  # noqa: F811
    (checkout / "specs/7/tasks.md").write_text(TASKS)
    out = cli("tasks", "plan", "--work-item", REF, "--repo", str(checkout))
    assert out.exit_code == 0 and "wave 2: c" in out.output


def test_an_invalid_task_list_prints_every_finding_and_fails(tmp_path):
    path = tmp_path / "tasks.md"
    path.write_text(TASKS.replace("[a, b]", "[c, ghost]"))
    out = cli("tasks", "plan", str(path), "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 1 and doc["ok"] is False
    assert sorted(f["code"] for f in doc["findings"]) == ["missing-dependency",
                                                           "self-dependency"]


def test_check_reports_a_changed_node_and_migrate_moves_it(checkout, tmp_path):  # noqa: F811
    cli("run", "--work-item", REF, "--repo", str(checkout))  # waits at requirements-approval
    changed = tmp_path / "graph.yaml"
    changed.write_text(default_graph_path().read_text().replace(
        "      - {hook: record-feedback, with: {into: requirements.md}}\n", "", 1))
    out = cli("check", "--work-item", REF, "--repo", str(checkout), "--graph", str(changed),
              "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 1 and doc["drift"] == ["requirements-approval"]
    assert any("state migrate" in p for p in doc["problems"])
    before = state_file(checkout).read_text()
    dry = cli("state", "migrate", REF, "--to-current", "--dry-run", "--repo", str(checkout),
              "--graph", str(changed), "--json")
    assert dry.exit_code == 0 and json.loads(dry.output)["status"] == "dry-run"
    assert state_file(checkout).read_text() == before  # a dry run writes nothing
    done = cli("state", "migrate", REF, "--to-current", "--repo", str(checkout), "--graph",
               str(changed), "--reason", "record-feedback retired")
    assert done.exit_code == 0 and "re-entered" in done.output
    state = json.loads(state_file(checkout).read_text())
    assert state["migration_count"] == 1
    log = FileStateStore(checkout / ".the-loop/state").log_path(REF).read_text()
    [migrated] = [e for e in map(json.loads, log.splitlines())
                  if e["type"] == "work-item.migrated"]
    assert migrated["data"]["reason"] == "record-feedback retired"
    out = cli("check", "--work-item", REF, "--repo", str(checkout), "--graph", str(changed),
              "--json")
    assert "drift" not in json.loads(out.output)
