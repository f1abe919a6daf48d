"""One harness turn, the part every driver shares: the turn's files, its environment, its
input and its :class:`~integrations.harness.base.TurnRequest`, and running it.

The runner (:class:`runner.service.TurnRunner`, a workspace checkout per work item, push
and draft pull request around it) and the local driver (``the-loop run --repo DIR``:
the checkout is DIR, nothing is pushed) both build a turn here, so a turn's environment
and input are the same whichever drives it. Nothing here touches Redis, git or GitHub.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.settings import HARNESS_BASE_URL_ENV
from foundation.turns import TurnContext
from graph.work import TurnOrder
from integrations.harness.base import Harness, TurnLimits, TurnOutcome, TurnRequest
from runner import prompts

if TYPE_CHECKING:
    from foundation.settings import HarnessSettings, RunnerSettings

__all__ = ["PASS_THROUGH", "TurnSetup", "environment", "log_dir", "request", "run"]

#: Variables every harness process gets from the driver's own environment (not secrets).
PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass(frozen=True)
class TurnSetup:
    """What a driver brings to every turn it runs.

    Attributes:
        harness_settings: ``harness:`` (limits, the model per stage, the API-key names).
        runner_settings: ``runner:`` (``homeDir``, ``workspaceDir``, ``logBytes``).
        environ: the driver's environment; the harness gets :data:`PASS_THROUGH` and the
            variables ``harness.env`` names from it, nothing else.
    """

    harness_settings: HarnessSettings
    runner_settings: RunnerSettings
    environ: Mapping[str, str]


def environment(setup: TurnSetup, order: TurnOrder, session_id: str, resume: str | None,
                result_path: Path) -> dict[str, str]:
    """The harness process's whole environment.

    Args:
        setup: the driver's settings and environment.
        order: the turn.
        session_id: the-loop's session id the turn runs in.
        resume: the harness's id being resumed, or ``None`` (a fresh session).
        result_path: the command adapter's result file.

    Returns:
        :data:`PASS_THROUGH` (``PATH`` defaulting to :data:`os.defpath`), ``HOME`` (the
        runner's ``homeDir``, where the harness keeps its sessions), the ``THE_LOOP_*``
        variables naming the turn, the variables ``harness.env`` names (its API key),
        and ``harness.baseUrl`` as Claude Code's ``ANTHROPIC_BASE_URL``;
        ``GIT_TERMINAL_PROMPT=0``. None of the-loop's own secrets.
    """
    environ = setup.environ
    env = {k: environ[k] for k in PASS_THROUGH if environ.get(k)}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home_dir(setup, order.ref))
    env["THE_LOOP_WORK_ITEM"] = order.ref
    env["THE_LOOP_NODE"] = order.node
    env["THE_LOOP_SESSION_ID"] = session_id
    env["THE_LOOP_TURN"] = str(order.number)
    env["THE_LOOP_RESUME"] = "1" if resume else "0"
    env["THE_LOOP_ARTIFACTS"] = json.dumps(list(order.artifacts))
    env["THE_LOOP_RESULT_FILE"] = str(result_path)
    # The agent's own git never asks for a password (the-loop gives it no credential):
    # a blob its partial-clone mirror lacks (an old revision's) fails to fetch at once
    # instead of waiting on a prompt in a tmux session.
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["THE_LOOP_SPEC_DIR"] = str(Path(order.artifacts[0]).parent) if order.artifacts \
        else ""
    if order.task_id is not None:
        env["THE_LOOP_TASK"] = order.task_id
    for name in setup.harness_settings.env:
        if environ.get(name):
            env[name] = environ[name]
    settings = setup.harness_settings
    base_env = HARNESS_BASE_URL_ENV.get(settings.adapter)
    if settings.base_url and base_env:
        env[base_env] = settings.base_url  # harness.baseUrl wins over the environment
    return env


def home_dir(setup: TurnSetup, ref: str) -> Path:
    """The harness's HOME for work item ``ref``: ``<homeDir>/<ref slug>`` (created 0700).
    One per work item: a session resumes in the HOME that holds its transcript, and no
    work item's agent writes another's ``~/.claude`` or ``~/.codex`` configuration."""
    slug = ref.replace(":", "_").replace("/", "_").replace("#", "_")
    path = Path(setup.runner_settings.home_dir) / slug
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def log_dir(setup: TurnSetup, ref: str, *, create: bool = True) -> Path:
    """Where ``ref``'s turn logs and result files are kept: ``<workspaceDir>/.logs/<ref
    slug>``, outside any checkout (created unless ``create`` is false)."""
    slug = ref.replace(":", "_").replace("/", "_").replace("#", "_")
    path = Path(setup.runner_settings.workspace_dir) / ".logs" / slug
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def request(setup: TurnSetup, order: TurnOrder, context: TurnContext, *, cwd: Path,
            branch: str, session_id: str, resume: str | None, attempt: int = 1,
            override: Callable[[str], str | None] | None = None,
            on_start: Callable[[int], None] | None = None,
            create_dirs: bool = True) -> TurnRequest:
    """The :class:`TurnRequest` of one attempt of ``order``.

    Args:
        setup: the driver's settings and environment.
        order: the turn; ``context``: the work item.
        cwd: the checkout the harness works in.
        branch: the branch the turn's work lands on (named in the input).
        session_id, resume: the session it runs in and the harness's id to resume.
        attempt: the attempt number (names the log and result files).
        override: path -> text on the default branch, for a repository's template.
        on_start: called with the harness's process group id once it started.
        create_dirs: create the log directory (false for a dry run: nothing written).

    Returns:
        the request: the input rendered by :func:`runner.prompts.render` (a resumed
        session gets only the feedback), the environment of :func:`environment`, the
        model for the node's stage, the log and result paths under :func:`log_dir`, the
        limits of ``harness:`` and ``runner.logBytes``, and the order's running totals
        of the session when it is resumed (none for a fresh session).
    """
    logs = log_dir(setup, order.ref, create=create_dirs)
    task = f"-{order.task_id}" if order.task_id is not None else ""
    stem = f"{order.node}{task}-{order.visit}-{order.number}-{attempt}"
    result_path = logs / f"{stem}.result.json"
    settings = setup.harness_settings
    text = prompts.render(order, context, branch, resumed=resume is not None,
                          override=override)
    return TurnRequest(
        session_id=session_id, resume=resume, prompt=text, cwd=cwd,
        env=environment(setup, order, session_id, resume, result_path),
        model=settings.model_for(order.stage),
        log_path=logs / f"{stem}.log", result_path=result_path,
        limits=TurnLimits(turn_timeout=settings.turn_timeout,
                          idle_timeout=settings.idle_timeout,
                          log_bytes=setup.runner_settings.log_bytes),
        on_start=on_start, totals=dict(order.totals) if resume is not None else {})


def run(harness: Harness, turn: TurnRequest) -> TurnOutcome:
    """Run ``turn`` (a stale result file removed first, so only this turn's is read).

    Returns:
        the harness's outcome; a failed turn is an outcome, never an exception.

    Raises:
        integrations.harness.base.HarnessError: the harness cannot be started at all
            (e.g. it is not installed).
    """
    turn.result_path.unlink(missing_ok=True)
    return harness.run(turn)
