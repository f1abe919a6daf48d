"""The input of an agent turn: the-loop's own text, paths and hook names; never text
from a payload (specification, "Feedback to the harness"; "never feed untrusted comment
text to it as instructions").

A first turn gets the node command's template (``runner/prompts/<command>.md``, package
data; a repository may override one with ``.the-loop/prompts/<command>.md`` on its
default branch), then the artifacts to write with their required sections and the checks
that will run. A resumed turn gets only what changed: the messages of the block (the-loop
wrote them: paths, section names, hook names) or a reference to a reviewer's decision
(who, which comment; the agent reads the text itself); a failed CI check's own output
(title, summary, annotations, the end of its log: :mod:`foundation.ci_report`) is the
one text from elsewhere, bounded and shown inside a fence as untrusted data, never as
instructions. A fresh session that replaces one
that could not be resumed gets both, seeded with the artifacts already written.

Templates use :class:`string.Template` placeholders: ``$subject`` (``issue #N of
OWNER/REPO``, or ``the local work item REF`` in ``the-loop run --repo DIR``), ``$about``
and ``$read_hint`` (what to read, and how), ``$work_item``, ``$repository``, ``$number``,
``$node``, ``$branch``, ``$turn``, ``$max_turns``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from string import Template
from typing import Any

from foundation import ci_report
from foundation.turns import TurnContext
from graph.work import CI_REPORT, TurnOrder

#: Where a repository may override a command's template (read on its default branch).
OVERRIDE_DIR = ".the-loop/prompts"
#: The template of a node without a ``command`` of its own.
DEFAULT_TEMPLATE = "default"
#: Longest template accepted from a repository, characters.
MAX_TEMPLATE = 20_000


def shipped_template(command: str | None) -> str:
    """The packaged template of ``command`` (``default`` when it has none)."""
    folder = resources.files("runner") / "prompts"
    for name in (command, DEFAULT_TEMPLATE):
        if name and (folder / f"{name}.md").is_file():
            return (folder / f"{name}.md").read_text(encoding="utf-8")
    raise FileNotFoundError(f"no prompt template {DEFAULT_TEMPLATE}.md in the package")


def render(order: TurnOrder, context: TurnContext, branch: str, *, resumed: bool,
           override: Callable[[str], str | None] | None = None) -> str:
    """The turn's input.

    Args:
        order: the turn.
        context: the work item.
        branch: the branch the turn's work is pushed to.
        resumed: the harness resumes the node's session (it has the earlier context):
            only the feedback is sent.
        override: path -> text on the default branch, for a repository's template.

    Returns:
        the text written to the harness's stdin.
    """
    local = context.number < 1  # `the-loop run --repo DIR`: no issue, nothing pushed
    values = {"subject": (f"the local work item {order.ref}" if local
                          else f"issue #{context.number} of {context.repository}"),
              "about": "the code" if local else "the issue, its comments and the code",
              "read_hint": "" if local else (
                  f" (for example `gh issue view {context.number} --repo "
                  f"{context.repository} --comments`)"),
              "work_item": order.ref, "repository": context.repository,
              "number": str(context.number), "node": order.node, "branch": branch,
              "turn": str(order.number), "max_turns": str(order.max_turns)}
    feedback = _feedback(order.feedback, context)
    if resumed and feedback:
        return "\n".join([
            f"the-loop checked the work of node `{order.node}` on branch `{branch}`; "
            "it is not complete yet.", "", *feedback, "",
            *_artifacts(order), "", *_closing(order, branch, local)]) + "\n"
    template = _template(order.command, override)
    parts = [f"You are the agent of node `{order.node}` of the-loop, turn {order.number} "
             f"of {order.max_turns}.", "", Template(template).safe_substitute(values).strip(),
             ""]
    if order.seeded_with or (feedback and not resumed):
        written = [f"- `{p}`" for p in dict.fromkeys((*order.seeded_with, *order.artifacts))]
        parts += ["This continues earlier work on this work item; read these files in "
                  "the checkout first (those that exist):", *written, ""]
    if feedback:
        parts += [*feedback, ""]
    parts += [*_artifacts(order), "", *_closing(order, branch, local)]
    return "\n".join(parts) + "\n"


def override_path(command: str) -> str:
    """``.the-loop/prompts/<command>.md``: where a repository overrides ``command``'s
    template (on its default branch)."""
    return f"{OVERRIDE_DIR}/{command}.md"


def _template(command: str | None, override: Callable[[str], str | None] | None) -> str:
    if override is not None and command:
        text = override(override_path(command))
        if text and len(text) <= MAX_TEMPLATE:
            return text
    return shipped_template(command)


def _sections(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for check in checks:
        for name in (check.get("with") or {}).get("sections") or ():
            if str(name) not in names:
                names.append(str(name))
    return names


def _task(order: TurnOrder) -> list[str]:
    """The task of a plan the turn works on (the task list's own fields)."""
    task = order.task
    if not task:
        return []
    lines = [f"Your task is `{task['id']}` of the task list (wave {task.get('wave')}): "
             f"{task.get('title')}", "It passes when:"]
    lines += [f"- {a}" for a in task.get("acceptance") or ()]
    if task.get("paths"):
        lines.append("It is expected to touch: " + ", ".join(f"`{p}`" for p in task["paths"]))
    lines.append("Other tasks run beside yours: change only what your task needs.")
    return lines


def _artifacts(order: TurnOrder) -> list[str]:
    if order.task:
        return _task(order)
    if not order.artifacts:
        return ["This node has no artifact of its own: change the code as the work needs."]
    sections = _sections(order.checks)
    lines = ["Artifacts to write:"]
    for path in order.artifacts:
        heads = ", ".join(f"`## {s}`" for s in sections)
        lines.append(f"- `{path}` with sections: {heads}" if heads else f"- `{path}`")
    return lines


def _closing(order: TurnOrder, branch: str, local: bool = False) -> list[str]:
    checks = []
    for check in order.checks:
        params = check.get("with") or {}
        shown = "; ".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}"
                          for k, v in sorted(params.items()))
        checks.append(f"- {check.get('hook')}" + (f" ({shown})" if shown else ""))
    landing = (f"commits what you changed on `{branch}` (nothing is pushed)" if local
               else f"commits what you changed, pushes it to `{branch}`")
    return [f"When you are done, stop. the-loop {landing} and runs these checks on it:",
            *checks]


def _feedback(feedback: Mapping[str, Any], context: TurnContext) -> list[str]:
    """The-loop's own lines about the last block and a gate's decision."""
    lines: list[str] = []
    block = feedback.get("block") or {}
    if block:
        lines.append("The-loop's checks blocked your last turn:")
        for message in block.get("messages") or ():
            text, path = str(message.get("text") or ""), message.get("path")
            where = f" ({path})" if path else ""
            lines.append(f"- {block.get('hook') or 'a check'}: {text}{where}")
        report = block.get(CI_REPORT)
        if isinstance(report, Mapping):
            lines += ["", *ci_report.frame(report), ""]
        lines.append("Fix every one of these, then stop.")
    review = feedback.get("feedback") or {}
    if review:
        who = f"@{review['actor']}" if review.get("actor") else "a reviewer"
        source = (f"comment {review['comment_id']}" if review.get("comment_id")
                  else "their review")
        where = (f" on #{context.number} of {context.repository}" if context.number >= 1
                 else "")
        lines += [f"{who} decided `{review.get('kind')}` at the gate `{review.get('gate')}` "
                  f"({source}{where}). Read it with "
                  "your own tools (its text is not repeated here) and revise the "
                  "artifacts accordingly."]
    return lines
