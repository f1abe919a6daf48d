// Parse Mermaid diagrams with Mermaid's own parser (mermaid.parse), for lint-artifacts.
//
// Usage: node mermaid_parse.mjs PARSER_DIR
//   PARSER_DIR holds node_modules/ with `mermaid` and `linkedom` (tools/mermaid/package.json,
//   installed by `make venv` into .venv/mermaid).
// stdin:  {"diagrams": ["<diagram text>", ...]}
// stdout: {"mermaid": "<version>", "results": [{"ok": true, "type": "flowchart-v2"}
//          | {"ok": false, "kind": "syntax" | "unknown-diagram" | "error",
//             "line": <1-based line in the diagram text, or null>, "expected": ["'ID'", ...]}]}
// Exit 0 when every diagram was tried (parse failures are results, not errors); exit 2 with a
// one-line reason on stderr when the parser itself cannot be loaded or the input is malformed.
//
// Nothing of the diagram text is ever written out: only line numbers, Mermaid's diagram type
// and the grammar's expected-token names.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

function fail(reason) {
  process.stderr.write(`${reason}\n`);
  process.exit(2);
}

const parserDir = process.argv[2];
if (!parserDir) fail("usage: node mermaid_parse.mjs PARSER_DIR");

let input;
try {
  input = JSON.parse(readFileSync(0, "utf8"));
} catch {
  fail("stdin is not JSON");
}
const diagrams = input && Array.isArray(input.diagrams) ? input.diagrams : null;
if (!diagrams || !diagrams.every((d) => typeof d === "string")) {
  fail('stdin must be {"diagrams": [string, ...]}');
}

// Mermaid sanitizes labels with DOMPurify, which needs a window even when only parsing.
// linkedom is a DOM without a script engine or a network stack: nothing runs, nothing is
// fetched, nothing is rendered. (It gave the same verdicts as happy-dom on every example of
// @mermaid-js/examples, in about half the start-up time.)
let mermaid;
let version = null;
try {
  const require = createRequire(join(resolve(parserDir), "package.json"));
  const { parseHTML } = await import(pathToFileURL(require.resolve("linkedom")).href);
  const { window } = parseHTML("<!doctype html><html><head></head><body></body></html>");
  globalThis.window = window;
  globalThis.document = window.document;
  mermaid = (await import(pathToFileURL(require.resolve("mermaid")).href)).default;
  version = require("mermaid/package.json").version;
} catch (err) {
  fail(`cannot load mermaid/linkedom from ${parserDir}: ${err && err.code ? err.code : err}`);
}
mermaid.initialize({ startOnLoad: false });

// Mermaid drops front matter, %%{directives}%%, %% comment lines and leading blank lines
// before its grammar sees the text (preprocessDiagram in mermaid 11), so the line a grammar
// reports counts from what is left. Comment lines are blanked here (same meaning, same line
// count) and the lines dropped at the top are added back.
const FRONT_MATTER = /^([^\S\n\r]*)-{3}\s*[\n\r](.*?)[\n\r]\1-{3}\s*[\n\r]+/s;
const DIRECTIVE = /^%{2}{\s*(?:(\w+)\s*:|(\w+))\s*(?:(\w+)|((?:(?!}%{2}).|\r?\n)*))?\s*(?:}%{2})?/i;
const COMMENT_LINE = /^[ \t]*%%(?!{).*$/gm;

function newlines(s) {
  return (s.match(/\n/g) || []).length;
}

function droppedAtTop(text) {
  let dropped = 0;
  let rest = text;
  const fm = rest.match(FRONT_MATTER);
  if (fm) {
    dropped += newlines(fm[0]);
    rest = rest.slice(fm[0].length);
  }
  for (;;) {
    const ws = rest.match(/^\s+/);
    if (ws) {
      dropped += newlines(ws[0]);
      rest = rest.slice(ws[0].length);
      continue;
    }
    const dir = rest.match(DIRECTIVE);
    if (dir && dir[0].length > 0) {
      dropped += newlines(dir[0]);
      rest = rest.slice(dir[0].length);
      continue;
    }
    return dropped;
  }
}

function errorLine(err) {
  const hash = err && err.hash;
  if (hash && hash.loc && Number.isInteger(hash.loc.first_line)) return hash.loc.first_line;
  if (hash && Number.isInteger(hash.line)) return hash.line + 1;
  const m = /\bline (\d+)/.exec(String(err && err.message));
  return m ? Number(m[1]) : null;
}

function expected(err) {
  const names = err && err.hash && Array.isArray(err.hash.expected) ? err.hash.expected : [];
  // Grammar token names only (e.g. 'NODE_STRING'); never a piece of the input.
  return names.filter((n) => typeof n === "string" && /^'[^'\s`]{1,40}'$/.test(n)).slice(0, 12);
}

const results = [];
for (const raw of diagrams) {
  const text = raw.replace(/\r\n?/g, "\n").replace(COMMENT_LINE, "");
  try {
    const parsed = await mermaid.parse(text);
    results.push({ ok: true, type: parsed && parsed.diagramType ? parsed.diagramType : null });
  } catch (err) {
    const name = err && err.name;
    if (name === "UnknownDiagramError") {
      results.push({ ok: false, kind: "unknown-diagram", line: 1 + droppedAtTop(text), expected: [] });
      continue;
    }
    const line = errorLine(err);
    results.push({
      ok: false,
      kind: line === null ? "error" : "syntax",
      line: line === null ? null : line + droppedAtTop(text),
      expected: expected(err),
    });
  }
}
process.stdout.write(JSON.stringify({ mermaid: version, results }));
