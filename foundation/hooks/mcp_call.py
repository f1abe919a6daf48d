"""``mcp-call``: one named MCP tool call, performed by the node's harness, its structured
result in ``data`` (specification: "MCP by delegation to the harness").

the-loop holds no MCP client and no MCP credentials: the deployment names the servers
(``harness.mcpConfig``), and the harness the runner uses performs the call headless with
schema-constrained output (:class:`integrations.harness.mcp.HarnessMcp`). The graph
configures a call with typed parameters only; no template, no payload text::

    - {hook: mcp-call, with: {server: tracker, tool: get_issue,
                              arguments: {issue: id, repository: repository}}}

``arguments`` maps each tool argument to a field of the work item (:data:`FIELDS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graph.model import HookContext, HookResult, Message
from graph.ports import IntegrationError
from graph.registry import hook

NAME = "mcp-call"
#: Seconds the hook may run by default: the harness call's own bound
#: (:data:`integrations.harness.mcp.CALL_TIMEOUT`) plus margin. A graph may set its own.
DEFAULT_TIMEOUT = 150.0
#: What a server or tool name must look like (MCP tool names; Claude Code's
#: ``mcp__<server>__<tool>`` permission names are built from them).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
#: Work item fields an argument may name -> how to read it from the context.
FIELDS = {
    "ref": lambda ctx: ctx.work_item.ref,
    "id": lambda ctx: ctx.work_item.id,
    "repository": lambda ctx: ctx.work_item.repository,
    "kind": lambda ctx: ctx.work_item.kind,
    "tags": lambda ctx: list(ctx.work_item.tags),
    "risk_tier": lambda ctx: ctx.work_item.risk_tier,
    "spec_dir": lambda ctx: ctx.work_item.spec_dir,
    "node": lambda ctx: ctx.node.id,
    "phase": lambda ctx: ctx.node.phase,
    "visit": lambda ctx: ctx.visit,
}


def check_params(params: Mapping[str, Any]) -> str | None:
    """Load-time check: ``server`` and ``tool`` are names, ``arguments`` maps argument
    names to work item fields (:data:`FIELDS`)."""
    for key in ("server", "tool"):
        value = params.get(key)
        if not isinstance(value, str) or not NAME_RE.match(value):
            return (f"parameter {key!r} is required: a name of letters, digits, '_' and "
                    "'-' (at most 64), e.g. server: tracker, tool: get_issue")
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        return "parameter 'arguments' must map tool arguments to work item fields"
    for name, field_name in arguments.items():
        if not NAME_RE.match(str(name)):
            return f"argument name {name!r} must be letters, digits, '_' and '-'"
        if field_name not in FIELDS:
            return (f"argument {name!r} names {field_name!r}, which is not a work item "
                    f"field; use one of {', '.join(FIELDS)}")
    return None


@hook(NAME, params={"server", "tool", "arguments"}, check=check_params,
      timeout=DEFAULT_TIMEOUT)
def mcp_call(ctx: HookContext) -> HookResult:
    """Ask the node's harness to call ``tool`` on ``server`` with the named work item
    fields as arguments.

    Returns ``pass`` with ``data = {"server", "tool", "result"}`` (``result``: the tool's
    structured result); ``block`` when no harness can make MCP calls here (not
    retriable: a deployment error) or the call failed (retriable when the harness says
    trying again may help), naming the server and tool, never echoing the tool's text.
    """
    server, tool = str(ctx.params["server"]), str(ctx.params["tool"])
    arguments = {str(k): FIELDS[str(v)](ctx)
                 for k, v in (ctx.params.get("arguments") or {}).items()}
    if ctx.config.mcp is None:
        return HookResult.blocked(NAME, Message(
            f"mcp-call {server}/{tool}: no harness is configured for MCP calls on this "
            "worker (set harness.adapter and harness.mcpConfig)", code="mcp-unavailable"),
            retriable=False)
    try:
        result = ctx.config.mcp.call(server, tool, arguments,
                                     session=ctx.session.id if ctx.session else None)
    except IntegrationError as exc:
        return HookResult.blocked(NAME, Message(
            f"mcp-call {server}/{tool} failed: {exc}", code="mcp-failed"),
            retriable=exc.retriable)
    return HookResult.passed(NAME, server=server, tool=tool, result=dict(result))
