"""``lint-artifacts``: the node's Markdown artifacts lint clean, and their diagrams parse.

Specification: "lint-artifacts | exit | markdownlint, and diagramsRender (mermaid actually
parses)". Every finding of every artifact comes back in one result.

Tools, and why:

* Markdown: PyMarkdown (PyPI ``pymarkdownlnt``), a maintained GitHub-Flavored-Markdown
  linter with markdownlint's rule ids (MD001...) and a Python API, so the check runs in
  process and needs nothing besides the venv. The npm ``markdownlint`` would need Node for
  every graph, including those that never check a diagram. Note: PyMarkdown also reads a
  ``.pymarkdown`` file or ``[tool.pymarkdown]`` in ``pyproject.toml`` from the process's
  working directory, if there is one; the-loop's own repository has neither.
* Mermaid: Mermaid's own parser, ``mermaid.parse()`` from the npm ``mermaid`` package (the
  code that renders diagrams on GitHub), run by ``foundation/hooks/mermaid_parse.mjs`` under
  Node with linkedom as the DOM its sanitizer wants. ``@mermaid-js/parser`` alone does not
  cover flowchart, sequence or state diagrams (those grammars live in ``mermaid``), and no
  Python package parses Mermaid for real. One Node process per hook run parses every
  diagram of every artifact; it gets an argument array (no shell), a time limit, a memory
  limit and a cap on what it may print, and it never prints diagram text back.

The npm packages are pinned in ``tools/mermaid/package.json`` + ``package-lock.json``;
``make venv`` installs them with ``npm ci`` into ``.venv/mermaid``. Another location is
named by the environment variable ``THE_LOOP_MERMAID_PARSER``.

Compiling a graph needs neither Node nor the npm packages (:func:`check_params` checks
the ``with:`` block only), so the commands that only read a graph (``the-loop graph
validate``, ``graph export``) work from ``pip install .`` alone. A process that will run
the hook with ``diagrams: true`` (the worker, ``the-loop run``, ``decide``, ``check
--recompute``) asks :func:`check_installed` at its start-up and refuses to start, naming
the fix (:func:`the_loop.graphs.require_tools`). A diagram check that cannot run anyway
blocks (``mermaid-not-checked``, retriable): it never passes because nothing checked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from graph.errors import LoopError
from graph.model import HookContext, HookResult, Message
from graph.registry import hook

NAME = "lint-artifacts"
PARSER_ENV = "THE_LOOP_MERMAID_PARSER"
PARSER_SCRIPT = Path(__file__).with_name("mermaid_parse.mjs")
PARSER_PACKAGES = ("mermaid", "linkedom")
DEFAULT_DISABLED_RULES = ("MD013",)  # line length: generated prose is not hand-wrapped
MARKDOWN_SUFFIXES = (".md", ".markdown")
PARSER_TIMEOUT = 30.0  # seconds for the whole batch; the hook's own limit is above it
PARSER_MEMORY_MB = 512
MAX_PARSER_OUTPUT = 1 << 20  # bytes read back from the parser
MAX_DIAGRAM_CHARS = 50_000  # Mermaid's default maxTextSize: a longer diagram does not render
MAX_MARKDOWN_FINDINGS = 50  # per artifact; the rest are counted in one message
INSTALL_HINT = (
    "run `make venv` (installs tools/mermaid/package.json with npm ci into .venv/mermaid), "
    "or run `npm ci --ignore-scripts` in a copy of tools/mermaid (package.json, "
    f"package-lock.json) and set {PARSER_ENV} to that directory"
)


# -- Mermaid blocks -------------------------------------------------------------------------

FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)([^\n]*)$")


@dataclass(frozen=True)
class Diagram:
    """A fenced ``mermaid`` block: ``line`` is the opening fence's line (1-based)."""

    line: int
    text: str


def mermaid_blocks(markdown: str) -> list[Diagram]:
    """The fenced code blocks whose info string's first word is ``mermaid``.

    Follows CommonMark's fence rules at the top level: an opening fence is indented at
    most three spaces; the block ends at a closing fence of the same character at least as
    long, or at the end of the document. Fences inside other fences are content.
    """
    lines = markdown.splitlines()
    found: list[Diagram] = []
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(4)):
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3)
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            line = lines[j]
            strip = len(line) - len(line.lstrip(" "))
            body.append(line[min(indent, strip):])
            j += 1
        if info.casefold() == "mermaid":
            found.append(Diagram(line=i + 1, text="\n".join(body) + "\n"))
        i = j + 1
    return found


# -- the parser process ---------------------------------------------------------------------


class ParserError(LoopError, RuntimeError):
    """The Mermaid parser could not be run or answered nonsense; ``str()`` says which."""


def parser_dir() -> Path:
    """Where the parser's ``node_modules`` lives: ``$THE_LOOP_MERMAID_PARSER`` or
    ``<venv>/mermaid`` (``sys.prefix`` is the venv when run from it)."""
    configured = os.environ.get(PARSER_ENV)
    return Path(configured) if configured else Path(sys.prefix) / "mermaid"


def parser_unavailable() -> str | None:
    """Why diagrams cannot be checked here (what to install), or ``None`` when they can."""
    if shutil.which("node") is None:
        return "diagram checks need Node.js (>= 20) on PATH to run Mermaid's parser; " + (
            "install it (Debian: apt-get install nodejs npm), then " + INSTALL_HINT
        )
    if not PARSER_SCRIPT.is_file():
        return f"diagram checks need {PARSER_SCRIPT.name}, missing from the installed package"
    where = parser_dir()
    missing = [p for p in PARSER_PACKAGES if not (where / "node_modules" / p / "package.json")
               .is_file()]
    if missing:
        return (
            f"diagram checks need the npm packages {', '.join(missing)} of Mermaid's parser "
            f"in {where}/node_modules ({PARSER_ENV}, default <venv>/mermaid); {INSTALL_HINT}"
        )
    return None


def parse_diagrams(texts: Sequence[str], *, timeout: float = PARSER_TIMEOUT
                   ) -> tuple[str | None, list[dict[str, Any]]]:
    """Parse ``texts`` with Mermaid in one Node process.

    Returns:
        Mermaid's version and one result per text, in order: ``{"ok": True, "type"}`` or
        ``{"ok": False, "kind", "line", "expected"}`` (see ``mermaid_parse.mjs``).

    Raises:
        ParserError: the parser is not installed, timed out, failed, or answered out of
            protocol.
    """
    problem = parser_unavailable()
    if problem:
        raise ParserError(problem)
    node = shutil.which("node")
    assert node is not None  # parser_unavailable() checked
    argv = [node, f"--max-old-space-size={PARSER_MEMORY_MB}", str(PARSER_SCRIPT),
            str(parser_dir())]
    env = {"PATH": os.path.dirname(node), "NO_COLOR": "1"}  # node alone, nothing inherited
    payload = json.dumps({"diagrams": list(texts)}).encode("utf-8")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run(  # noqa: S603  (an argument array, no shell)
                argv, input=payload, stdout=out, stderr=err, env=env, timeout=timeout,
                check=False)
        except subprocess.TimeoutExpired:
            raise ParserError(f"Mermaid's parser ran past {timeout:g} s") from None
        except OSError as exc:
            raise ParserError(f"Mermaid's parser could not start ({exc.strerror})") from None
        out.seek(0)
        raw = out.read(MAX_PARSER_OUTPUT + 1)
        err.seek(0)
        reason = err.read(300).decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0:
        first = reason[0] if reason else "no reason given"
        raise ParserError(f"Mermaid's parser exited with {proc.returncode}: {first}")
    if len(raw) > MAX_PARSER_OUTPUT:
        raise ParserError("Mermaid's parser printed more than the hook reads")
    try:
        answer = json.loads(raw)
        version, results = answer.get("mermaid"), answer["results"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ParserError("Mermaid's parser answered out of protocol") from None
    if not isinstance(results, list) or len(results) != len(texts) or not all(
            isinstance(r, dict) and isinstance(r.get("ok"), bool) for r in results):
        raise ParserError("Mermaid's parser answered out of protocol")
    return (str(version) if version else None), results


def _diagram_finding(path: str, diagram: Diagram, result: Mapping[str, Any],
                     version: str | None) -> Message:
    mermaid = f"Mermaid {version}" if version else "Mermaid"
    line = result.get("line")
    at = (f"line {diagram.line + line}" if isinstance(line, int) and line > 0
          else f"line {diagram.line}")
    if result.get("kind") == "unknown-diagram":
        why = f"it does not start with a diagram type {mermaid} knows"
    else:
        why = f"{mermaid}'s parser rejects it"
        expected = [str(e) for e in result.get("expected") or ()][:12]
        if expected:
            why += f" (expected {', '.join(expected)})"
    return Message(
        f"{path} {at}: the mermaid diagram opened at line {diagram.line} does not parse: "
        f"{why}; it would not render", path=path, code="mermaid-unparseable")


# -- Markdown -------------------------------------------------------------------------------

RULE_ID = re.compile(r"^(MD|PML)\d{3}$", re.IGNORECASE)


@lru_cache(maxsize=1)
def known_rules() -> frozenset[str]:
    """Rule ids PyMarkdown ships (``MD001``...), read from its plugin modules."""
    import pkgutil

    import pymarkdown.plugins

    ids = set()
    for module in pkgutil.iter_modules(pymarkdown.plugins.__path__):
        m = re.fullmatch(r"rule_(md|pml)_(\d{3})", module.name)
        if m:
            ids.add(f"{m.group(1).upper()}{m.group(2)}")
    return frozenset(ids)


@contextlib.contextmanager
def _root_logger_kept() -> Iterator[None]:
    """Put the root logger's level and handlers back as they were, whatever a library
    did to them (a library must not change the application's logging)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)


def lint_markdown(path: str, text: str, disabled: Sequence[str]) -> list[Message]:
    """PyMarkdown's findings for ``text`` (front matter allowed), as the-loop's messages.

    Each message carries the rule id, its name and description, and the line; never the
    linter's extra detail, which can quote the artifact.
    """
    from pymarkdown.api import PyMarkdownApi, PyMarkdownApiException

    # inherit_logging: PyMarkdown otherwise sets the root logger to WARNING (and adds a
    # stdout handler) on its first scan, silencing the worker's own lines.
    with _root_logger_kept():
        api = PyMarkdownApi(inherit_logging=True).enable_extension_by_identifier(
            "front-matter")
        for rule in disabled:
            api = api.disable_rule_by_identifier(rule.lower())
        try:
            result = api.scan_string(text)
        except PyMarkdownApiException as exc:
            return [Message(f"{path}: the Markdown linter could not read it "
                            f"({type(exc).__name__})", path=path, code="markdown-unreadable")]
    findings = sorted(result.scan_failures, key=lambda f: (f.line_number, f.column_number))
    messages = []
    for f in findings[:MAX_MARKDOWN_FINDINGS]:
        rule_name = f.rule_name.split(",")[0]
        description = f.rule_description.rstrip(".")
        messages.append(Message(
            f"{path} line {f.line_number}: Markdown rule {f.rule_id} ({rule_name}) is not "
            f"met: {description}", path=path, code=f"markdown-{f.rule_id}"))
    if len(findings) > MAX_MARKDOWN_FINDINGS:
        messages.append(Message(
            f"{path}: {len(findings) - MAX_MARKDOWN_FINDINGS} more Markdown findings not "
            "listed; fix the ones above and lint again", path=path, code="markdown-more"))
    return messages


# -- the hook -------------------------------------------------------------------------------


def _rules(params: Mapping[str, Any]) -> Sequence[str]:
    rules = params.get("rules")
    return DEFAULT_DISABLED_RULES if rules is None else [str(r).upper() for r in rules]


def check_params(params: Mapping[str, Any]) -> str | None:
    """Load-time check of a call's ``with:`` block (``HookDef.check``).

    Returns the problem, or ``None``: a non-boolean ``markdown``/``diagrams``, nothing to
    check, unknown rule ids, a malformed ``artifacts``. Whether the Mermaid parser is
    installed is not asked here (compiling a graph needs no Node): see
    :func:`check_installed`.
    """
    for key in ("markdown", "diagrams"):
        if key in params and not isinstance(params[key], bool):
            return f"parameter {key!r} must be true or false"
    if not params.get("markdown", True) and not params.get("diagrams", False):
        return "both 'markdown' and 'diagrams' are false; there is nothing to check"
    rules = params.get("rules")
    if rules is not None:
        if not isinstance(rules, list | tuple) or not all(isinstance(r, str) for r in rules):
            return "parameter 'rules' must be a list of rule ids to disable, e.g. [MD013]"
        known = known_rules()
        bad = [r for r in rules if not RULE_ID.match(r) or (known and r.upper() not in known)]
        if bad:
            return f"parameter 'rules' names unknown Markdown rule {bad[0]!r}"
    artifacts = params.get("artifacts")
    if artifacts is not None and (not isinstance(artifacts, list | tuple)
                                  or not all(isinstance(a, str) for a in artifacts)):
        return "parameter 'artifacts' must be a list of file names"
    return None


def check_installed(params: Mapping[str, Any]) -> str | None:
    """Start-up check of a call, for a process that will run it: what it needs installed.

    Args:
        params: the call's (compiled) ``with:`` block.

    Returns:
        ``None`` without ``diagrams: true`` (PyMarkdown is a Python dependency); else
        :func:`parser_unavailable`: what is missing (Node, or the npm packages where
        ``THE_LOOP_MERMAID_PARSER`` points) and how to install it, or ``None``.
    """
    return parser_unavailable() if params.get("diagrams", False) else None


def _artifacts(ctx: HookContext) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of each Markdown artifact that exists (absence is
    validate-artifacts' finding, not this hook's)."""
    names = list(ctx.params.get("artifacts") or ctx.artifacts.keys())
    base = ctx.work_item.spec_dir.rstrip("/")
    for name in names:
        path = ctx.artifacts.get(name) or (f"{base}/{name}" if base else name)
        if not path.lower().endswith(MARKDOWN_SUFFIXES):
            continue
        text = ctx.config.files.read_text(path)
        if text is not None:
            yield path, text


@hook(NAME, boundaries={"exit"}, params={"markdown", "diagrams", "rules", "artifacts"},
      check=check_params, timeout=PARSER_TIMEOUT + 30, validating=True)
def lint_artifacts(ctx: HookContext) -> HookResult:
    """Lint each Markdown artifact of the node (``produces``, or ``with.artifacts``).

    Parameters (``with:``): ``markdown`` (default true) — PyMarkdown's rules, less the
    disabled ones; ``rules`` — the rule ids to disable (default ``[MD013]``, line length;
    ``[]`` enables all); ``diagrams`` (default false) — every ``mermaid`` fenced block must
    parse with Mermaid's parser.

    Returns ``pass``, or one ``block`` with every finding of every artifact (codes
    ``markdown-MDnnn``, ``mermaid-unparseable``, ``mermaid-too-large``, and
    ``mermaid-not-checked`` when the parser could not run, which is retriable).
    """
    artifacts = list(_artifacts(ctx))
    if not artifacts:
        return HookResult.skipped(NAME, "no Markdown artifact to lint")
    findings: list[Message] = []
    checked = [path for path, _ in artifacts]
    if ctx.params.get("markdown", True):
        disabled = _rules(ctx.params)
        for path, text in artifacts:
            findings.extend(lint_markdown(path, text, disabled))

    data: dict[str, Any] = {"checked": checked}
    if ctx.params.get("diagrams", False):
        todo: list[tuple[str, Diagram]] = []
        for path, text in artifacts:
            for diagram in mermaid_blocks(text):
                if len(diagram.text) > MAX_DIAGRAM_CHARS:
                    findings.append(Message(
                        f"{path} line {diagram.line}: the mermaid diagram is longer than "
                        f"{MAX_DIAGRAM_CHARS} characters (Mermaid's default maxTextSize); "
                        "it would not render", path=path, code="mermaid-too-large"))
                else:
                    todo.append((path, diagram))
        data["diagrams"] = len(todo)
        if todo:
            try:
                version, results = parse_diagrams([d.text for _, d in todo])
            except ParserError as exc:
                for path in dict.fromkeys(p for p, _ in todo):
                    findings.append(Message(
                        f"{path}: its mermaid diagrams were not checked: {exc}",
                        path=path, code="mermaid-not-checked"))
            else:
                data["mermaid"] = version
                for (path, diagram), result in zip(todo, results, strict=True):
                    if not result["ok"]:
                        findings.append(_diagram_finding(path, diagram, result, version))
    if findings:
        return HookResult.blocked(NAME, *findings, **data)
    return HookResult.passed(NAME, **data)
