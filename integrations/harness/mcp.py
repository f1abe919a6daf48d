"""``mcp-call`` by delegation to the harness: one MCP tool call performed by Claude Code
or Codex CLI, headless, with schema-constrained output.

Where it runs: in the worker, synchronously, inside the ``mcp-call`` hook (under the
hook's timeout). The worker therefore needs the harness binary (the runner image has
it; the receiver/worker image does not), the pinned ``harness.version`` and the MCP
servers file ``harness.mcpConfig``: :func:`check_mcp` checks all three when a graph uses
``mcp-call`` and the worker refuses to start otherwise (fail closed). Running the call
through the runner's queue instead would make a lookup an asynchronous turn (a ``wait``
and a report back) for what is one bounded, read-mostly call.

Protocol facts:

- Claude Code (CLI reference, headless mode): ``claude -p --output-format json
  --json-schema SCHEMA`` prints one result object; its ``structured_output`` holds the
  answer validated against the schema (``result`` holds it as text). ``--mcp-config
  FILE --strict-mcp-config`` loads exactly the servers of FILE; ``--allowedTools
  mcp__<server>__<tool>`` permits that one tool; ``--setting-sources user`` skips the
  working tree's settings.
- Codex CLI (``codex exec --help``): ``--output-schema FILE`` constrains the final
  message to the JSON Schema in FILE, ``-o FILE`` writes that message; MCP servers are
  configuration (``-c mcp_servers.<name>.command=...``, ``.args=[...]``, TOML values);
  ``--sandbox read-only``. ``codex exec`` runs with approval policy ``never``, so a
  tool call fails ("MCP tool call requires approval, but approval policy is never")
  unless approved: ``mcp_servers.<name>.enabled_tools=[TOOL]`` exposes the one tool
  and ``mcp_servers.<name>.default_tools_approval_mode="approve"`` (``auto`` |
  ``prompt`` | ``approve``) approves that server's tools, nothing else.

Schema (Codex's strict mode: every property required, no others): ``{"ok": bool,
"result": str, "error": str}``, ``result`` the tool's structured result as JSON text.
Nothing from a payload reaches the prompt: server, tool and arguments come from the
graph and the work item's fields. The tool's answer is bounded (:data:`MAX_RESULT_BYTES`)
and must be JSON; the process's output is not kept.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundation.settings.harness import HARNESS_BASE_URL_ENV
from graph.ports import IntegrationError
from integrations.harness.base import (
    HarnessError,
    HarnessVersionError,
    TurnLimits,
    secret_values,
)
from integrations.harness.codex import PROVIDER, write_provider
from integrations.harness.factory import build_harness
from integrations.harness.process import run_process

if TYPE_CHECKING:
    from foundation.settings import HarnessSettings
    from graph.model import Graph

__all__ = ["CALL_TIMEOUT", "MCP_HOOK", "SCHEMA", "HarnessMcp", "check_mcp", "load_servers"]

MCP_HOOK = "mcp-call"
#: Seconds one harness MCP call may take (the ``mcp-call`` hook's default timeout is
#: above it, so the process is stopped before its thread is abandoned).
CALL_TIMEOUT = 120.0
#: Bytes of the tool's JSON result kept in ``data``.
MAX_RESULT_BYTES = 64 * 1024
#: The answer's JSON Schema (strict: every property required, none other).
SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["ok", "result", "error"],
    "properties": {
        "ok": {"type": "boolean", "description": "whether the tool call was made"},
        "result": {"type": "string",
                   "description": "the tool's structured result, as JSON text"},
        "error": {"type": "string", "description": "why the call could not be made"},
    },
}
PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ")
_SERVER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def _error(message: str, *, retriable: bool = False) -> IntegrationError:
    return IntegrationError(message, integration="harness", op="mcp-call",
                            retriable=retriable)


def load_servers(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The servers of an MCP config file (``{"mcpServers": {NAME: {"command": str,
    "args": [str], "env": {str: str}}}}``, Claude Code's ``--mcp-config`` shape).

    Raises:
        HarnessError: unreadable, not that shape, or a name that is not
            ``[A-Za-z0-9_-]``; naming the file and the fix.
    """
    fix = ('write {"mcpServers": {"NAME": {"command": "...", "args": ["..."]}}} '
           "(harness.mcpConfig, THE_LOOP_MCP_CONFIG)")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{path}: the MCP servers file is unreadable "
                           f"({type(exc).__name__}): {fix}") from None
    servers = doc.get("mcpServers") if isinstance(doc, Mapping) else None
    if not isinstance(servers, Mapping) or not servers:
        raise HarnessError(f"{path}: no mcpServers: {fix}")
    out: dict[str, dict[str, Any]] = {}
    for name, server in servers.items():
        if not _SERVER.match(str(name)) or not isinstance(server, Mapping) or not (
                isinstance(server.get("command"), str) or isinstance(server.get("url"), str)):
            raise HarnessError(f"{path}: mcpServers.{name}: a server needs a name of "
                               f"letters, digits, '_' and '-' and a command (or url): {fix}")
        out[str(name)] = dict(server)
    return out


class HarnessMcp:
    """:class:`graph.context.McpTools` through the configured harness.

    Args:
        settings: ``harness:`` (adapter, binary, the API-key variable names, mcpConfig,
            baseUrl: the gateway a call goes through, as a turn does).
        environ: the worker's environment; the harness gets ``PATH``-like variables and
            the ones ``harness.env`` names, nothing else.
        home: the harness's ``HOME``.
        timeout: seconds per call.

    Raises:
        HarnessError: the adapter cannot make MCP calls (``none``, ``command``) or the
            servers file is bad.
    """

    def __init__(self, settings: HarnessSettings, environ: Mapping[str, str], home: str,
                 *, timeout: float = CALL_TIMEOUT) -> None:
        if settings.adapter not in ("claude-code", "codex"):
            raise HarnessError(
                f"mcp-call needs harness.adapter claude-code or codex (schema-constrained "
                f"output), not {settings.adapter!r}")
        if not settings.mcp_config:
            raise HarnessError("mcp-call needs the MCP servers file: set harness.mcpConfig "
                               "(or THE_LOOP_MCP_CONFIG) in the worker's settings")
        self.settings = settings
        self.servers = load_servers(settings.mcp_config)
        self.binary = settings.binary or ("claude" if settings.adapter == "claude-code"
                                          else "codex")
        self.home = home
        self.timeout = timeout
        env = {k: environ[k] for k in PASS_THROUGH if environ.get(k)}
        env.setdefault("PATH", os.defpath)
        env["HOME"] = home
        env.update({k: environ[k] for k in settings.env if environ.get(k)})
        base_env = HARNESS_BASE_URL_ENV.get(settings.adapter)
        if settings.base_url and base_env:
            env[base_env] = settings.base_url  # the gateway the turns use, as for a turn
        self._env = env

    def __repr__(self) -> str:
        return f"HarnessMcp({self.settings.adapter}, servers={sorted(self.servers)})"

    def prompt(self, server: str, tool: str, arguments: Mapping[str, Any]) -> str:
        """The-loop's own input for one call (no payload text)."""
        call = json.dumps({"server": server, "tool": tool, "arguments": dict(arguments)},
                          sort_keys=True)
        return "\n".join([
            "Perform exactly one MCP tool call and report its result; do nothing else.",
            f"MCP-CALL {call}",
            f"Call the tool `{tool}` of the MCP server `{server}` with exactly these "
            "arguments. Answer with the JSON the output schema asks for: ok true and "
            "result set to the tool's structured result as JSON text, or ok false and "
            "error saying why the call could not be made. Call no other tool.", ""])

    def call(self, server: str, tool: str, arguments: Mapping[str, Any], *,
             session: str | None = None) -> Mapping[str, Any]:
        """See :meth:`graph.context.McpTools.call`."""
        if server not in self.servers:
            raise _error(f"MCP server {server!r} is not configured (harness.mcpConfig "
                         f"has {', '.join(sorted(self.servers))})")
        Path(self.home).mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryDirectory(prefix="the-loop-mcp-") as scratch:
            work = Path(scratch)
            answer = self._run(work, server, tool, arguments)
        if not isinstance(answer, Mapping) or not isinstance(answer.get("ok"), bool):
            raise _error("the harness's answer does not match the MCP call's schema",
                         retriable=True)
        if not answer["ok"]:
            reason = str(answer.get("error") or "no reason given")[:200]
            # The server may be down or slow: the chain blocks, retriable.
            raise _error(f"the harness could not make the call ({reason})", retriable=True)
        text = str(answer.get("result") or "")
        if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
            raise _error(f"the tool's result is larger than {MAX_RESULT_BYTES} bytes")
        try:
            result = json.loads(text) if text.strip() else {}
        except ValueError:
            raise _error("the tool's result is not JSON") from None
        return result if isinstance(result, Mapping) else {"value": result}

    def _run(self, work: Path, server: str, tool: str,
             arguments: Mapping[str, Any]) -> Any:
        config = work / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {server: self.servers[server]}}),
                          encoding="utf-8")
        limits = TurnLimits(turn_timeout=self.timeout, idle_timeout=self.timeout,
                            log_bytes=256 * 1024)
        lines: list[str] = []

        def keep(line: str) -> bool:
            lines.append(line)
            return False

        last = work / "answer.json"
        if self.settings.adapter == "claude-code":
            argv = [self.binary, "-p", "--output-format", "json", "--json-schema",
                    json.dumps(SCHEMA), "--mcp-config", str(config), "--strict-mcp-config",
                    "--allowedTools", f"mcp__{server}__{tool}", "--setting-sources", "user",
                    "--max-turns", "4"]
        else:
            schema = work / "schema.json"
            schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
            argv = [self.binary, "exec", "--json", "--skip-git-repo-check", "--sandbox",
                    "read-only", "--output-schema", str(schema), "-o", str(last)]
            for key, value in self.servers[server].items():
                if key in ("command", "args", "env", "url"):
                    argv += ["-c", f"mcp_servers.{server}.{key}={_toml(value)}"]
            # exec runs with approval policy "never": an MCP call is refused unless its
            # server's tools are approved. Only this call's tool is enabled, and only
            # this server's tools are approved.
            argv += ["-c", f"mcp_servers.{server}.enabled_tools={_toml([tool])}",
                     "-c", f'mcp_servers.{server}.default_tools_approval_mode="approve"']
            if self.settings.base_url:  # the turns' gateway, as Codex.run writes it
                write_provider(Path(self.home), self.settings.base_url, self._env)
                argv += ["-c", f"model_provider={json.dumps(PROVIDER)}"]
            argv.append("-")
        proc = run_process(argv, stdin=self.prompt(server, tool, arguments), cwd=work,
                           env=self._env, limits=limits, log_path=work / "call.log",
                           on_line=keep,
                           redact=secret_values(self._env))
        if proc.reason in ("timeout", "idle"):
            raise _error(f"the harness ran past {self.timeout:g} s", retriable=True)
        if self.settings.adapter == "claude-code":
            return _claude_answer(lines, proc.exit_code)
        try:
            return json.loads(last.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise _error(f"codex ended (exit {proc.exit_code}) without its answer",
                         retriable=True) from None


def _claude_answer(lines: list[str], exit_code: int | None) -> Any:
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, Mapping) and event.get("type") == "result":
            if event.get("is_error") is True or event.get("subtype") != "success":
                raise _error(f"claude's result is {str(event.get('subtype'))[:40]!r}",
                             retriable=True)
            structured = event.get("structured_output")
            if isinstance(structured, Mapping):
                return structured
            try:
                return json.loads(str(event.get("result") or ""))
            except ValueError:
                raise _error("claude's result is not the schema's JSON") from None
    raise _error(f"claude ended (exit {exit_code}) without a result", retriable=True)


def _toml(value: Any) -> str:
    """A TOML value for codex's ``-c`` (JSON strings and arrays of strings are valid TOML;
    a table becomes an inline table)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def check_mcp(settings: HarnessSettings, graph: Graph, environ: Mapping[str, str],
              home: str) -> HarnessMcp | None:
    """The fail-closed start-up check of a worker whose graph uses ``mcp-call``: an
    adapter that can make the call, its servers file, the harness installed on this
    worker at the pinned ``harness.version``.

    Returns:
        the :class:`HarnessMcp` to hand hooks, or ``None`` when the graph has no
        ``mcp-call``.

    Raises:
        HarnessError (HarnessMissing, HarnessVersionError among them): naming the fix.
    """
    if not any(c.name == MCP_HOOK for n in graph.nodes.values() for c in n.calls):
        return None
    mcp = HarnessMcp(settings, environ, home)
    harness = build_harness(settings)
    assert harness is not None  # HarnessMcp refused adapter none
    printed = harness.probe()
    if not settings.version or settings.version not in printed:
        first = (printed.strip().splitlines() or [""])[0].strip()[:200]
        raise HarnessVersionError(
            f"mcp-call runs the harness on the worker: {mcp.binary} is {first!r}, but "
            f"harness.version in {settings.source} pins {settings.version!r}; install the "
            f"pinned version on the worker or set harness.version: {json.dumps(first)}")
    return mcp
