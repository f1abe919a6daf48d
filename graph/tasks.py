"""A task plan: the machine-readable task list of ``tasks.md``, validated as a dependency
graph, and its waves (pure code: no I/O, same input -> same bytes).

The task list is a YAML document with a ``tasks`` list, either the front matter of
``tasks.md`` or its first fenced block whose info string is ``yaml`` (or ``yml``) and
whose document has a ``tasks`` key::

    tasks:
      - id: schema
        title: The table and its migration
        depends_on: []
        acceptance: ["the migration applies and rolls back"]
        paths: [db/]
        tier: economy
      - id: api
        title: The endpoint
        depends_on: [schema]
        acceptance: ["GET /items answers 200 with the rows"]

Validation (:func:`check`) fails closed and reports every finding at once: the list is
missing or not a list of mappings, a field has the wrong type, an id is malformed or
appears twice, a dependency names no task, a task depends on itself, tasks depend on each
other in a cycle (each cycle is one finding naming its members), or the plan is over the
caps (:data:`MAX_TASKS` tasks, :data:`MAX_EDGES` unique dependency edges). The caps,
rules and wave semantics follow the validated scheduling view of an execution graph:
stable sorted topological waves, the ready set, and a failed blocker never unlocking its
dependents.

A valid :class:`Plan` has waves (wave 1: tasks with no dependency; wave *n*: tasks whose
dependencies are all in earlier waves, one of them in wave *n-1*), each sorted by id, and
a digest over its canonical JSON form. :func:`work_graph` builds the portable,
metadata-only ``work-graph.json`` envelope of a plan being run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from graph.errors import LoopError

#: Most tasks a plan may hold.
MAX_TASKS = 1000
#: Most unique dependency edges (task -> one of its ``depends_on``) a plan may hold.
MAX_EDGES = 10_000
#: A task id: safe in a git branch name, a Redis key and an effect id.
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
#: Format version of :meth:`Plan.to_dict` and of ``work-graph.json``.
PLAN_VERSION = 1
WORK_GRAPH_SCHEMA = "the-loop.work-graph/v1"
#: Task statuses while a plan runs.
PENDING, RUNNING, PASSED, FAILED, BLOCKED = "pending", "running", "passed", "failed", "blocked"

_FIELDS = {"id", "title", "depends_on", "acceptance", "paths", "tier"}
# Linear on artifact text: a fence never closed runs to the end (CommonMark), and the
# info string's leading blanks are taken once (possessive).
_FENCE = re.compile(r"^(?P<fence>```|~~~)[ \t]*+(?P<info>[^\n]*)\n(?P<body>.*?)"
                    r"(?:^(?P=fence)[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Finding:
    """One problem of a task list.

    Attributes:
        code: ``task-list-missing``, ``task-list-invalid``, ``task-invalid``,
            ``duplicate-id``, ``missing-dependency``, ``self-dependency``, ``cycle``,
            ``too-many-tasks`` or ``too-many-edges``.
        message: the-loop's words, naming the task(s) and the fix.
        tasks: the task ids concerned, sorted (a cycle's members).
    """

    code: str
    message: str
    tasks: tuple[str, ...] = ()


class TaskPlanError(LoopError, ValueError):
    """A task list is not a valid plan.

    Attributes:
        findings: every problem found, in a stable order.
    """

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = tuple(findings)
        super().__init__("; ".join(f.message for f in self.findings) or "invalid task list")


@dataclass(frozen=True)
class Task:
    """One task of a plan.

    Attributes:
        id: the task id (:data:`TASK_ID`).
        title: one line saying what it is.
        depends_on: ids of the tasks that must pass first, sorted, no duplicates.
        acceptance: what must hold for the task to pass (the agent's checklist).
        paths: repository paths the task is expected to touch (advisory).
        tier: a model tier name (advisory), or ``None``.
    """

    id: str
    title: str
    depends_on: tuple[str, ...] = ()
    acceptance: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    tier: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form."""
        return {"id": self.id, "title": self.title, "depends_on": list(self.depends_on),
                "acceptance": list(self.acceptance), "paths": list(self.paths),
                "tier": self.tier}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        """Inverse of :meth:`to_dict` (for a plan stored in state; no validation)."""
        return cls(str(data["id"]), str(data.get("title") or ""),
                   tuple(str(d) for d in data.get("depends_on") or ()),
                   tuple(str(a) for a in data.get("acceptance") or ()),
                   tuple(str(p) for p in data.get("paths") or ()),
                   None if data.get("tier") is None else str(data["tier"]))


@dataclass(frozen=True)
class Plan:
    """A validated task plan.

    Attributes:
        tasks: id -> task, sorted by id.
        waves: the waves, each a sorted tuple of ids; wave 1 first.
        wave_of: id -> its wave number (1-based).
        dependents: id -> ids of the tasks that depend on it directly, sorted.
    """

    tasks: Mapping[str, Task]
    waves: tuple[tuple[str, ...], ...]
    wave_of: Mapping[str, int] = field(repr=False)
    dependents: Mapping[str, tuple[str, ...]] = field(repr=False)

    @property
    def edges(self) -> int:
        """Unique dependency edges."""
        return sum(len(t.depends_on) for t in self.tasks.values())

    @property
    def digest(self) -> str:
        """SHA-256 hex of the canonical JSON of the tasks (what a running plan pins)."""
        body = json.dumps([t.to_dict() for t in self.tasks.values()], sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(body.encode()).hexdigest()

    def ready(self, status: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The ready set: tasks not yet started (``pending``, or absent from ``status``)
        whose dependencies have all ``passed``, sorted by id. A failed or blocked
        dependency never makes a task ready."""
        status = status or {}
        return tuple(t for t, task in self.tasks.items()
                     if status.get(t, PENDING) == PENDING
                     and all(status.get(d) == PASSED for d in task.depends_on))

    def downstream(self, roots: Iterable[str]) -> tuple[str, ...]:
        """Every task that depends on one of ``roots``, directly or not (roots
        excluded), sorted."""
        seen: set[str] = set()
        stack = list(roots)
        start = set(stack)
        while stack:
            for d in self.dependents.get(stack.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return tuple(sorted(seen - start))

    def to_dict(self, status: Mapping[str, str] | None = None) -> dict[str, Any]:
        """``{schemaVersion, digest, tasks, edges, waves, ready}`` (plus ``status``
        when given): what ``the-loop tasks plan --json`` prints."""
        doc: dict[str, Any] = {
            "schemaVersion": PLAN_VERSION, "digest": self.digest,
            "tasks": [t.to_dict() for t in self.tasks.values()],
            "edges": self.edges, "waves": [list(w) for w in self.waves],
            "ready": list(self.ready(status)),
        }
        if status is not None:
            doc["status"] = {t: status.get(t, PENDING) for t in self.tasks}
        return doc

    def to_json(self, status: Mapping[str, str] | None = None) -> str:
        """:meth:`to_dict` as JSON text: keys sorted, two-space indents, a final newline
        (same plan, same bytes)."""
        return json.dumps(self.to_dict(status), indent=2, sort_keys=True,
                          ensure_ascii=False) + "\n"

    def to_mermaid(self, status: Mapping[str, str] | None = None) -> str:
        """A Mermaid flowchart: one subgraph per wave, an edge from each dependency to
        its dependent; nodes are labelled with their ids only (titles are not shown:
        they are free text)."""
        index = {t: f"t{i}" for i, t in enumerate(self.tasks)}
        lines = ["flowchart LR"]
        for n, wave in enumerate(self.waves, 1):
            lines.append(f"    subgraph wave{n}[\"wave {n}\"]")
            for t in wave:
                state = f" ({status.get(t, PENDING)})" if status is not None else ""
                lines.append(f"        {index[t]}[\"{t}{state}\"]")
            lines.append("    end")
        for t, task in self.tasks.items():
            for d in task.depends_on:
                lines.append(f"    {index[d]} --> {index[t]}")
        return "\n".join(lines) + "\n"

    def stored(self) -> list[dict[str, Any]]:
        """The tasks as JSON data (kept in a work item's state while the plan runs)."""
        return [t.to_dict() for t in self.tasks.values()]

    @classmethod
    def from_stored(cls, tasks: Sequence[Mapping[str, Any]]) -> Plan:
        """Rebuild a plan from :meth:`stored` (validated again: state is a cache).

        Raises:
            TaskPlanError: the stored tasks are not a valid plan.
        """
        return build([Task.from_dict(t) for t in tasks])


# -- reading a task list --------------------------------------------------------------


def extract(markdown: str) -> tuple[Any, list[Finding]]:
    """The raw ``tasks`` value of ``markdown`` (front matter first, then the first
    ``yaml`` fenced block with a ``tasks`` key), or ``None`` with the findings."""
    yaml = YAML(typ="safe", pure=True)
    if markdown.startswith("---"):
        end = markdown.find("\n---", 3)
        if end > 0:
            try:
                doc = yaml.load(markdown[3:end])
            except YAMLError as exc:
                return None, [Finding("task-list-invalid",
                                      f"the front matter is not valid YAML ({_where(exc)})")]
            if isinstance(doc, Mapping) and "tasks" in doc:
                return doc["tasks"], []
    for match in _FENCE.finditer(markdown):
        if match["info"].strip().split(" ")[0].lower() not in ("yaml", "yml"):
            continue
        try:
            doc = yaml.load(match["body"])
        except YAMLError as exc:
            return None, [Finding("task-list-invalid",
                                  f"the yaml block is not valid YAML ({_where(exc)})")]
        if isinstance(doc, Mapping) and "tasks" in doc:
            return doc["tasks"], []
    return None, [Finding("task-list-missing",
                          "no task list: add a ```yaml block (or front matter) with a "
                          "'tasks:' list of {id, title, depends_on, acceptance}")]


def _where(exc: YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}" if mark is not None else type(exc).__name__


def parse(raw: Any) -> tuple[list[Task], list[Finding]]:
    """Typed tasks from a raw ``tasks`` value, and the findings of their fields. A
    task with a bad field is still returned (with what could be read) when it has an
    id, so graph checks see it."""
    findings: list[Finding] = []
    if not isinstance(raw, list):
        return [], [Finding("task-list-invalid", "'tasks' must be a list of mappings")]
    tasks: list[Task] = []
    for i, item in enumerate(raw):
        where = f"tasks[{i}]"
        if not isinstance(item, Mapping):
            findings.append(Finding("task-invalid", f"{where} must be a mapping"))
            continue
        task_id = item.get("id")
        if not isinstance(task_id, str) or not TASK_ID.fullmatch(task_id):
            findings.append(Finding("task-invalid", f"{where}: 'id' must match "
                                    f"{TASK_ID.pattern} (letters, digits, '-', '_')"))
            continue
        where = f"task {task_id}"
        unknown = sorted(set(map(str, item)) - _FIELDS)
        if unknown:
            findings.append(Finding("task-invalid", f"{where}: unknown field "
                                    f"{unknown[0]!r} (fields: {', '.join(sorted(_FIELDS))})",
                                    (task_id,)))
        title = item.get("title")
        if not isinstance(title, str) or not title.strip():
            findings.append(Finding("task-invalid", f"{where}: 'title' must be a non-empty "
                                    "string", (task_id,)))
            title = ""
        depends = _strings(item.get("depends_on", []), f"{where}: 'depends_on'", task_id,
                           findings)
        acceptance = _strings(item.get("acceptance"), f"{where}: 'acceptance'", task_id,
                              findings, required=True)
        paths = _strings(item.get("paths", []), f"{where}: 'paths'", task_id, findings)
        tier = item.get("tier")
        if tier is not None and not isinstance(tier, str):
            findings.append(Finding("task-invalid", f"{where}: 'tier' must be a string",
                                    (task_id,)))
            tier = None
        tasks.append(Task(task_id, title.strip(), tuple(sorted(set(depends))),
                          tuple(acceptance), tuple(paths), tier))
    return tasks, findings


def _strings(value: Any, where: str, task_id: str, findings: list[Finding], *,
             required: bool = False) -> list[str]:
    if value is None and not required:
        return []
    if isinstance(value, str) and not required:
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) \
            or (required and not value):
        findings.append(Finding("task-invalid", f"{where} must be a "
                                f"{'non-empty ' if required else ''}list of strings",
                                (task_id,)))
        return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []
    return list(value)


def graph_findings(tasks: Sequence[Task]) -> list[Finding]:
    """Every graph problem of ``tasks``: caps, duplicate ids, missing dependencies,
    self-dependencies and cycles (one finding per cycle, its members named)."""
    findings: list[Finding] = []
    if len(tasks) > MAX_TASKS:
        findings.append(Finding("too-many-tasks", f"the plan has {len(tasks)} tasks; at "
                                f"most {MAX_TASKS} are allowed: split the work item"))
    edges = sum(len(t.depends_on) for t in tasks)
    if edges > MAX_EDGES:
        findings.append(Finding("too-many-edges", f"the plan has {edges} dependency edges; "
                                f"at most {MAX_EDGES} are allowed: split the work item"))
    seen: dict[str, int] = {}
    for t in tasks:
        seen[t.id] = seen.get(t.id, 0) + 1
    for task_id in sorted(t for t, n in seen.items() if n > 1):
        findings.append(Finding("duplicate-id", f"task id {task_id!r} is used "
                                f"{seen[task_id]} times: ids must be unique", (task_id,)))
    for t in sorted(tasks, key=lambda t: t.id):
        if t.id in t.depends_on:
            findings.append(Finding("self-dependency", f"task {t.id} depends on itself: "
                                    "remove it from its depends_on", (t.id,)))
        for d in t.depends_on:
            if d not in seen:
                findings.append(Finding("missing-dependency", f"task {t.id} depends on "
                                        f"{d!r}, which is not a task of the list", (t.id,)))
    union: dict[str, set[str]] = {}
    for t in tasks:  # a duplicated id's dependencies are the union of its copies'
        union.setdefault(t.id, set()).update(d for d in t.depends_on if d in seen and d != t.id)
    graph = {t: tuple(sorted(ds)) for t, ds in union.items()}
    for members in _cycles(graph):
        path = _cycle_path(graph, members)
        findings.append(Finding("cycle", f"tasks {', '.join(members)} depend on each other "
                                f"in a cycle ({' -> '.join(path)}): break it",
                                tuple(members)))
    return findings


def _cycles(graph: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Strongly connected components of more than one task (Tarjan's algorithm,
    iterative), each sorted, in order of their smallest member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succ = graph.get(node, ())
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found, key=lambda c: c[0])


def _cycle_path(graph: Mapping[str, Sequence[str]], members: Sequence[str]) -> list[str]:
    """One concrete cycle through the smallest member (breadth first inside the
    component): ``[a, b, a]`` means a depends on b, which depends on a."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for d in sorted(graph.get(node, ())):
                if d not in inside:
                    continue
                if d == start:
                    path = [start]
                    step = node
                    while step != start:
                        path.append(step)
                        step = previous[step]
                    path.append(start)
                    return [start, *reversed(path[1:-1]), start]
                if d not in previous:
                    previous[d] = node
                    nxt.append(d)
        frontier = nxt
    return [*members, start]  # unreachable for a real component


def build(tasks: Sequence[Task]) -> Plan:
    """A plan from typed tasks.

    Raises:
        TaskPlanError: any of :func:`graph_findings`.
    """
    findings = graph_findings(tasks)
    if findings:
        raise TaskPlanError(findings)
    by_id = {t.id: t for t in sorted(tasks, key=lambda t: t.id)}
    dependents: dict[str, list[str]] = {t: [] for t in by_id}
    for t in by_id.values():
        for d in t.depends_on:
            dependents[d].append(t.id)
    wave_of: dict[str, int] = {}
    # Kahn by levels: the ids whose dependencies are all placed, in sorted order.
    waiting = {t: len(task.depends_on) for t, task in by_id.items()}
    current = sorted(t for t, n in waiting.items() if n == 0)
    waves: list[tuple[str, ...]] = []
    while current:
        waves.append(tuple(current))
        for tid in current:
            wave_of[tid] = len(waves)
        nxt = []
        for tid in current:
            for d in dependents[tid]:
                waiting[d] -= 1
                if waiting[d] == 0:
                    nxt.append(d)
        current = sorted(nxt)
    return Plan(by_id, tuple(waves), wave_of,
                {t: tuple(sorted(ds)) for t, ds in dependents.items()})


def check(markdown: str) -> tuple[Plan | None, list[Finding]]:
    """Read and validate the task list of ``markdown`` (a ``tasks.md``).

    Returns:
        ``(plan, [])`` when valid, else ``(None, findings)`` with every finding.
    """
    raw, findings = extract(markdown)
    if raw is None:
        return None, findings
    tasks, findings = parse(raw)
    findings += graph_findings(tasks)
    if findings or not tasks:
        if not tasks and not findings:
            findings.append(Finding("task-list-invalid", "'tasks' is empty: list at least "
                                    "one task"))
        return None, findings
    return build(tasks), []


def load(markdown: str) -> Plan:
    """:func:`check`, raising.

    Raises:
        TaskPlanError: with every finding.
    """
    plan, findings = check(markdown)
    if plan is None:
        raise TaskPlanError(findings)
    return plan


# -- the portable work graph ----------------------------------------------------------


def sha256(text: str) -> str:
    """SHA-256 hex of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def work_graph(*, ref: str, graph_digest: str, node: str, visit: int, plan: Plan,
               status: Mapping[str, str], heads: Mapping[str, str],
               joins: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``work-graph.json`` envelope of a running plan: metadata and SHA-256 digests
    only (titles and acceptance criteria are digested, never copied), canonical order.

    Args:
        ref: the work item; graph_digest: the lifecycle graph it is walked with; node,
            visit: the node running the plan; plan: the plan; status: task id -> status;
            heads: task id -> the commit its work was merged as; joins: the join
            records (``{wave, passed, failed, blocked, at}``), oldest first.

    Returns:
        ``{schema, version, dataClassification, workItem, graphDigest, node, visit,
        planDigest, waves, nodes, edges}``: a node per task (``task/<id>``) and per wave
        join (``join/<n>``); edges ``depends_on`` (dependency -> dependent) and
        ``joined_by`` (task -> its wave's join).
    """
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for t, task in plan.tasks.items():
        entry: dict[str, Any] = {
            "id": f"task/{t}", "kind": "task", "task": t, "wave": plan.wave_of[t],
            "status": status.get(t, PENDING), "tier": task.tier,
            "titleSha256": sha256(task.title),
            "acceptanceSha256": sha256("\n".join(task.acceptance)),
            "paths": len(task.paths),
        }
        if t in heads:
            entry["headSha"] = heads[t]
        nodes.append(entry)
        edges += [{"from": f"task/{d}", "to": f"task/{t}", "relation": "depends_on"}
                  for d in task.depends_on]
    for join in joins:
        n = int(join["wave"])
        nodes.append({"id": f"join/{n}", "kind": "wave-join", "wave": n,
                      "passed": len(join.get("passed") or ()),
                      "failed": len(join.get("failed") or ()),
                      "blocked": len(join.get("blocked") or ()), "at": join.get("at")})
        edges += [{"from": f"task/{t}", "to": f"join/{n}", "relation": "joined_by"}
                  for t in plan.waves[n - 1]] if n <= len(plan.waves) else []
    return {
        "schema": WORK_GRAPH_SCHEMA, "version": PLAN_VERSION,
        "dataClassification": "metadata_only", "workItem": ref,
        "graphDigest": graph_digest, "node": node, "visit": visit,
        "planDigest": plan.digest, "waves": [list(w) for w in plan.waves],
        "nodes": nodes, "edges": edges,
    }


def dumps(doc: Mapping[str, Any]) -> str:
    """Canonical JSON text of an envelope (sorted keys, two-space indents, newline)."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
