"""An agent's turn in ``make run``'s sandbox sees none of the sandbox's credentials: the
settings ``the-loop sandbox prepare`` writes, read by the runner with every credential
of the sandbox in its environment (the person's token, the dashboard's token, the admin
token, the webhook secret, the App's and the signing keys), give the harness process an
environment holding none of them (the runner pushes with the installation token through
git's askpass, outside the harness; ``tests/workers/test_workspace.py`` checks the
checkout holds no token)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from foundation.settings import Settings
from graph.work import TurnOrder
from runner.harness_turn import PASS_THROUGH, TurnSetup, environment
from the_loop.sandbox import directory as sandbox_dir
from the_loop.sandbox.server import build

BIN = Path(sys.executable).parent


def test_an_agents_turn_sees_none_of_the_sandboxs_credentials(tmp_path: Path) -> None:
    base = tmp_path / "sandbox"
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("THE_LOOP_", "GH_", "GITHUB_"))}
    clean.update({"THE_LOOP_SANDBOX_USER": "octo-dev", "THE_LOOP_ENV_FILE": ""})
    prepared = subprocess.run([str(BIN / "the-loop"), "sandbox", "prepare", "--dir",
                               str(base)], env=clean, capture_output=True, text=True,
                              timeout=60, check=True)
    exports = dict(line.removeprefix("export ").split("=", 1)
                   for line in prepared.stdout.splitlines() if line.startswith("export "))
    runner_env = {**clean, **{k: shlex.split(v)[0] for k, v in exports.items()}}
    box = build(base, user="octo-dev", webhook_url=None, secret="s",
                base_url="http://127.0.0.1")
    api_token = sandbox_dir.api_token(base)
    # The worst case: every credential of the sandbox in the runner's own environment.
    runner_env.update({"THE_LOOP_API_TOKENS": api_token, "GH_TOKEN": box.user_token})
    secrets = {"the person's token": box.user_token, "the admin token": box.admin_token,
               "the dashboard's token": api_token,
               "the webhook secret": runner_env["THE_LOOP_WEBHOOK_SECRET"],
               "the App's key": (base / sandbox_dir.APP_KEY).read_text().strip(),
               "the signing key": Path(runner_env["THE_LOOP_SIGNING_KEY_FILE"]).read_text()
               .strip()}
    files = [runner_env["THE_LOOP_GITHUB_PRIVATE_KEY_PATH"],
             runner_env["THE_LOOP_SIGNING_KEY_FILE"]]
    assert box.user_token in prepared.stdout  # make run prints it (the git remote)

    settings = Settings.from_env(runner_env, process="worker")  # as `the-loop runner` reads them
    setup = TurnSetup(settings.harness, settings.runner, runner_env)
    order = TurnOrder("t", "github:sandbox/demo#1", "requirements", 1, 1, 5, "s")
    env = environment(setup, order, "s", None, tmp_path / "result.json")

    for what, value in secrets.items():
        assert not any(value in v for v in env.values()), f"{what} reaches the harness"
    assert not any(f in v for v in env.values() for f in files)
    assert set(env) <= {*PASS_THROUGH, "HOME", "THE_LOOP_WORK_ITEM", "THE_LOOP_NODE",
                        "THE_LOOP_SESSION_ID", "THE_LOOP_TURN", "THE_LOOP_RESUME",
                        "THE_LOOP_ARTIFACTS", "THE_LOOP_RESULT_FILE", "THE_LOOP_SPEC_DIR",
                        "GIT_TERMINAL_PROMPT"}
    home = Path(env["HOME"])
    assert not [p for p in home.rglob("*") if p.is_file()]  # nothing copied into its HOME
