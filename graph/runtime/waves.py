"""Running a task plan: an agent node with ``plan: tasks.md`` does its work as one harness
session per task, wave by wave (:mod:`graph.tasks`).

The runtime calls :meth:`PlanRun.step` where it would order the node's one turn. A step:

1. the first time in a node visit, reads the plan artifact and validates it; an invalid
   plan fails closed (a block no retry can fix: the work item escalates);
2. records the task turn the event reports (spend, the task's own session): a completed
   turn whose work reached the work item's branch passes the task; any other end is a
   block whose messages are the task's next input, in its own session, until the visit's
   turns (``harness.maxTurns``) are used up, when the task fails (a merge conflict fails
   it at once: a person resolves it);
3. joins the current wave once each of its tasks passed or failed: the join record
   (``{wave, passed, failed, blocked, at}``; ``blocked`` are the failed tasks'
   dependents, which stay pending) is saved in the work item's state *before* anything
   else happens, then ``work-graph.json`` is rewritten. A wave with a failed task stops
   the plan: later waves stay pending and the work item escalates, naming the tasks;
4. orders the ready tasks of the current wave, at most ``maxParallel`` at once (the
   order saved before it is placed; ordering the same id again runs it once).

When the last wave has joined with every task passed, the step returns ``None`` and the
node's exit chain runs on the work item's branch, as for a node without a plan.

Nothing here performs I/O but through the ports: the state store, the outbox and
:class:`graph.work.AgentWork`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph import tasks as plans
from graph.context import HookConfig
from graph.effects import HookEffects
from graph.model import HookResult, InboundEvent, Message, Node, Status, WorkItem, plain
from graph.runtime.api import RuntimeAPI
from graph.runtime.chains import ChainResult
from graph.runtime.shapes import AdvanceResult, gate_artifacts
from graph.state import WorkItemState
from graph.work import (
    CANCELLED,
    TURN_COMPLETED,
    TurnEnded,
    TurnOrder,
    add_spend,
    record_totals,
    spend_of,
    totals_of,
)

#: File name of the portable work graph, beside the plan in the spec directory.
WORK_GRAPH = "work-graph.json"


@dataclass
class PlanRun:
    """The plan of one node visit, bound to the runtime that drives it (through its
    public API only)."""

    runtime: RuntimeAPI

    # -- the step -----------------------------------------------------------------------

    def step(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
             node: Node, event: InboundEvent | None, result: AdvanceResult,
             repo: Path | None) -> AdvanceResult | None:
        """Advance ``node``'s plan on ``event`` (see the module docstring).

        Returns:
            the result to return from the advance (working, escalated, blocked), or
            ``None`` once every wave joined with every task passed.
        """
        rt = self.runtime
        run = self.current(state, node)
        if run is None:
            run, chain = self._start(state, work_item, config, node, event)
            if run is None:
                assert chain is not None
                return rt.park(state, work_item, config, chain, result)
        plan = plans.Plan.from_stored(run["tasks"])
        if event is not None and event.kind == TURN_COMPLETED and event.turn \
                and self._record(state, run, node, event, config):
            state.last_event = event.delivery_id
        while run["wave"] <= len(plan.waves):
            wave = plan.waves[run["wave"] - 1]
            status = run["status"]
            if not all(status[t] in (plans.PASSED, plans.FAILED) for t in wave):
                break
            join = self._join(state, run, plan, wave, work_item, config, repo)
            if join["failed"]:
                reason = (f"task {', '.join(join['failed'])} of wave {join['wave']} failed; "
                          f"later waves stay pending"
                          + (f" (blocked: {', '.join(join['blocked'])})" if join["blocked"]
                             else ""))
                rt.escalate(state, node, reason)
                rt.store.save(state)
                result.status, result.node = state.status, state.current_node
                rt.publish(state, work_item, config, node, ())
                return result
        if run["wave"] > len(plan.waves):
            return None
        if not self._dispatch(state, run, plan, work_item, config, node):
            rt.store.save(state)  # escalated: cost cap
            result.status, result.node = state.status, state.current_node
            rt.publish(state, work_item, config, node, ())
            return result
        result.status, result.node = state.status, state.current_node
        rt.publish(state, work_item, config, node, ())
        return result

    @staticmethod
    def current(state: WorkItemState, node: Node) -> dict[str, Any] | None:
        """The plan run of ``node``'s current visit, or ``None``."""
        run = state.plan
        if run and run.get("node") == node.id and run.get("visit") == state.visit:
            return run
        return None

    # -- start --------------------------------------------------------------------------

    def _start(self, state: WorkItemState, work_item: WorkItem, config: HookConfig,
               node: Node, event: InboundEvent | None,
               ) -> tuple[dict[str, Any] | None, ChainResult | None]:
        rt = self.runtime
        assert node.plan is not None
        path = rt.artifacts_for(work_item, node.plan)
        text = config.files.read_text(path)
        if text is None:
            findings = [plans.Finding("task-list-missing", f"does not exist at "
                                      f"{config.files.revision}; node {node.id} runs its "
                                      "task list")]
            plan = None
        else:
            plan, findings = plans.check(text)
        if plan is None:
            messages = tuple(Message(f"{path}: {f.message}", path=path, code=f"plan-{f.code}")
                             for f in findings)
            chain = ChainResult(node.id, "exit", "block", "block", (HookResult(
                "block", "plan", messages, {}, retriable=False),))
            rt.record(state, chain, event)
            return None, chain
        run: dict[str, Any] = {
            "node": node.id, "visit": state.visit, "artifact": path, "digest": plan.digest,
            "tasks": plan.stored(), "waves": [list(w) for w in plan.waves], "wave": 1,
            "status": {t: plans.PENDING for t in plan.tasks}, "turns": {},
            # A task keeps its session across visits of the node (changes requested).
            "sessions": dict((state.plan or {}).get("sessions") or {})
            if (state.plan or {}).get("node") == node.id else {},
            "out": {}, "heads": {}, "next_input": {}, "joins": [],
            "max_parallel": node.max_parallel,
        }
        state.plan = run
        rt.store.save(state)
        rt.log(state, "plan.started", {"node": node.id, "digest": plan.digest,
                                       "tasks": len(plan.tasks), "edges": plan.edges,
                                       "waves": len(plan.waves)}, event)
        return run, None

    # -- a task's turn ended ------------------------------------------------------------

    def _record(self, state: WorkItemState, run: dict[str, Any], node: Node,
                event: InboundEvent, config: HookConfig) -> bool:
        """Record the task turn ``event`` reports; False when it reports none of ours."""
        rt = self.runtime
        turn_id = event.turn.get("id") if event.turn else None
        task = next((t for t, o in run["out"].items() if o.get("id") == turn_id), None)
        if task is None:
            return False
        order = run["out"].pop(task)
        try:
            ended = TurnEnded.from_dict(event.turn or {})
        except (KeyError, TypeError, ValueError):
            ended = TurnEnded(id=str(order["id"]), status="error",
                              detail="the runner's report of the turn was malformed")
        add_spend(state.spend, ended)
        session = run["sessions"].setdefault(task, {"id": order.get("session_id")})
        record_totals(session, ended)
        if ended.session_id:
            session["id"] = ended.session_id
        if ended.harness_session:
            session["resume"] = ended.harness_session
        passed = ended.ok and ended.merged is not False
        rt.log(state, "turn.completed", {
            "node": node.id, "task": task, "turn": order.get("number"),
            "status": ended.status, "merged": ended.merged, "cost_usd": ended.cost_usd,
            "seconds": ended.seconds, "agent_seconds": ended.agent_seconds,
            "head_sha": ended.head_sha, "session": session.get("id")}, event)
        if passed:
            run["status"][task] = plans.PASSED
            run["next_input"].pop(task, None)
            if ended.head_sha:
                run["heads"][task] = ended.head_sha
            rt.log(state, "task.passed", {"node": node.id, "task": task,
                                          "head_sha": ended.head_sha}, event)
            return True
        if ended.ok:  # completed, but its branch did not merge
            text = f"task {task}: its work did not merge into the work item's branch " \
                   f"({ended.detail or 'conflict'})"
            code, final = "task-merge-conflict", True
        else:
            text = (f"task {task}: the agent's turn ended without completing "
                    f"({ended.status}: {ended.detail or ended.status})")
            code = f"turn-{ended.status}"
            work = config.work
            used = int(run["turns"].get(task, 0))
            final = ended.status == CANCELLED or work is None or used >= work.max_turns
        run["next_input"][task] = {"block": {
            "hook": "harness", "boundary": "exit",
            "messages": [Message(text, code=code).to_dict()]}}
        run["status"][task] = plans.FAILED if final else plans.PENDING
        rt.log(state, "task.failed" if final else "task.blocked",
               {"node": node.id, "task": task, "code": code}, event)
        return True

    # -- the join -----------------------------------------------------------------------

    def _join(self, state: WorkItemState, run: dict[str, Any], plan: plans.Plan,
              wave: tuple[str, ...], work_item: WorkItem, config: HookConfig,
              repo: Path | None) -> dict[str, Any]:
        """Write wave ``run["wave"]``'s join record durably, then the work graph."""
        rt = self.runtime
        status = run["status"]
        failed = [t for t in wave if status[t] == plans.FAILED]
        blocked = list(plan.downstream(failed))
        for t in blocked:
            status[t] = plans.BLOCKED
        join = {"wave": run["wave"], "passed": [t for t in wave if status[t] == plans.PASSED],
                "failed": failed, "blocked": blocked, "at": rt.clock()}
        run["joins"].append(join)
        run["wave"] += 1
        rt.store.save(state)  # durable before the next wave's first turn
        rt.log(state, "wave.joined", {"node": run["node"], **join}, None)
        self.write_work_graph(state, run, plan, work_item, config, repo)
        return join

    def document(self, state: WorkItemState, run: Mapping[str, Any],
                 plan: plans.Plan) -> dict[str, Any]:
        """The ``work-graph.json`` envelope of ``run`` (:func:`graph.tasks.work_graph`)."""
        return plans.work_graph(ref=state.ref, graph_digest=state.graph_digest,
                                node=str(run["node"]), visit=int(run["visit"]), plan=plan,
                                status=run["status"], heads=run["heads"], joins=run["joins"])

    def write_work_graph(self, state: WorkItemState, run: dict[str, Any], plan: plans.Plan,
                         work_item: WorkItem, config: HookConfig, repo: Path | None) -> None:
        """Rewrite ``work-graph.json`` beside the plan: in a local checkout, in place; in
        the service, as a commit on the work item's branch through the outbox (effect
        ``<ref>/<node>/<visit>/work-graph/<wave>``: once per join). A failure is
        recorded in the event log and never wedges the plan."""
        rt = self.runtime
        text = plans.dumps(self.document(state, run, plan))
        path = rt.artifacts_for(work_item, WORK_GRAPH)
        run["work_graph_sha256"] = plans.sha256(text)
        try:
            if repo is not None:
                target = (repo / path).resolve()
                if repo.resolve() not in target.parents:
                    raise ValueError("work-graph.json would land outside the checkout")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            else:
                github = config.integrations.get("github")
                branch = config.head_ref
                if github is None or work_item.repository is None or not branch:
                    return
                effect = f"{state.ref}/{run['node']}/{run['visit']}/work-graph/{run['wave'] - 1}"
                outbox = HookEffects(state, rt.store, effect, own=config.own).github(
                    github, effect=effect)
                try:
                    current = outbox.get_file(repo=work_item.repository, path=path, ref=branch)
                except Exception:  # noqa: BLE001  (absent: a first write)
                    current = None
                outbox.put_file(repo=work_item.repository, path=path, branch=branch,
                                text=text, sha=current["sha"] if current else None,
                                message=f"the-loop: {WORK_GRAPH} after wave {run['wave'] - 1}")
        except Exception as exc:  # noqa: BLE001  (recorded; the plan must not wedge)
            rt.log(state, "notification.failed",
                   {"channel": "work-graph", "error": type(exc).__name__}, None)
        rt.store.save(state)

    # -- ordering task turns --------------------------------------------------------------

    def _dispatch(self, state: WorkItemState, run: dict[str, Any], plan: plans.Plan,
                  work_item: WorkItem, config: HookConfig, node: Node) -> bool:
        """Order the current wave's ready tasks up to ``maxParallel`` live at once, and
        place the outstanding orders again (a retried delivery: the runner runs each id
        once). False when the cost cap stopped it (the work item escalated)."""
        rt = self.runtime
        work = config.work
        assert work is not None
        wave = plan.waves[run["wave"] - 1]
        status = run["status"]
        for order in run["out"].values():
            work.order(TurnOrder.from_dict(order))
        live = sum(1 for t in wave if status[t] == plans.RUNNING)
        for task in plan.ready(status):
            if task not in wave or live >= node.max_parallel:
                continue
            spent = spend_of(state.spend)["cost_usd"]
            if work.cost_cap_usd is not None and spent >= work.cost_cap_usd:
                rt.escalate(state, node, f"the agent's cost cap of ${work.cost_cap_usd:.2f} "
                                         f"for this work item is reached (${spent:.2f} spent)")
                return False
            self._order(state, run, plan, work_item, node, task, work.max_turns)
            work.order(TurnOrder.from_dict(run["out"][task]))
            live += 1
        running = [t for t in wave if status[t] == plans.RUNNING]
        state.status = Status.WORKING
        state.parked_reason = (f"agent working: wave {run['wave']} of {len(plan.waves)}, "
                               f"{len(running)} task(s) running ({', '.join(running)}), "
                               f"{sum(1 for s in status.values() if s == plans.PASSED)} of "
                               f"{len(status)} passed, ${spend_of(state.spend)['cost_usd']:.2f}")
        rt.store.save(state)
        return True

    def _order(self, state: WorkItemState, run: dict[str, Any], plan: plans.Plan,
               work_item: WorkItem, node: Node, task_id: str, max_turns: int) -> None:
        """Record task ``task_id``'s next turn as ordered (saved before it is placed)."""
        rt = self.runtime
        number = int(run["turns"].get(task_id, 0)) + 1
        session = run["sessions"].setdefault(task_id, {
            "id": str(uuid.uuid4()), "runner": "harness", "cwd": None})
        task = plan.tasks[task_id]
        feedback = dict(run["next_input"].get(task_id) or {})
        handed = (state.next_input.get(node.id) or {}).get("feedback")
        if handed:  # a gate's changes-requested reaches every task's session
            feedback["feedback"] = handed
        order = TurnOrder(
            id=f"{work_item.ref}/{node.id}/{state.visit}/task/{task_id}/turn/{number}",
            ref=work_item.ref, node=node.id, visit=state.visit, number=number,
            max_turns=max_turns, session_id=str(session["id"]), resume=session.get("resume"),
            totals=totals_of(session.get("totals")) if session.get("resume") else {},
            command=node.command, stage=node.stage, artifacts=(),
            checks=tuple({"hook": c.name, "with": plain(c.params)} for c in node.exit),
            feedback=feedback,
            seeded_with=tuple(rt.artifacts_for(work_item, a)
                              for a in gate_artifacts(rt.graph, node)),
            task={"id": task_id, "title": task.title, "acceptance": list(task.acceptance),
                  "paths": list(task.paths), "tier": task.tier,
                  "wave": plan.wave_of[task_id], "shared": node.max_parallel == 1},
        )
        run["turns"][task_id] = number
        run["out"][task_id] = order.to_dict()
        run["status"][task_id] = plans.RUNNING
        rt.store.save(state)
        rt.log(state, "turn.ordered", {"node": node.id, "task": task_id, "turn": number,
                                       "wave": plan.wave_of[task_id],
                                       "session": order.session_id,
                                       "resume": order.resume is not None}, None)


def now() -> float:
    """Unix seconds."""
    return time.time()
