"""``the-loop sandbox show`` names states; ``THE_LOOP_SANDBOX_PORT`` moves the sandbox
and its commands together: the sandbox serves on it, and ``the-loop sandbox ...`` finds
it there with no ``THE_LOOP_SANDBOX_URL`` set, or, with neither set, through the running
sandbox's directory; a port that is not one is refused with the variable's name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.e2e.test_end_to_end import free_port, wait_until
from tests.support.processes import start, stop
from the_loop.sandbox.directory import URL_FILE
from the_loop.sandbox.server import pull_state

BIN = Path(sys.executable).parent


def sandbox_env(tmp_path: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THE_LOOP_", "GH_"))}
    env.update({"THE_LOOP_SANDBOX_PORT": str(port),
                "THE_LOOP_SANDBOX_DIR": str(tmp_path / "sandbox"),
                "THE_LOOP_SANDBOX_USER": "octo-dev", "THE_LOOP_WEBHOOK_SECRET": "s3cret",
                "THE_LOOP_ENV_FILE": ""})
    return env


def the_loop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "the-loop"), "sandbox", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_commands_find_a_sandbox_moved_by_the_port_variable_alone(tmp_path):
    port = free_port()
    env = sandbox_env(tmp_path, port)
    server = start([str(BIN / "the-loop"), "sandbox", "--webhook-url",
                    f"http://127.0.0.1:{free_port()}/webhook"], env, tmp_path / "sandbox.out")
    try:
        def up() -> bool:
            assert server.poll() is None, (tmp_path / "sandbox.out").read_text()
            try:
                return requests.get(f"http://127.0.0.1:{port}/repos/sandbox/demo",
                                    timeout=1).ok
            except requests.RequestException:
                return False

        wait_until(up, timeout=60, what="the sandbox on THE_LOOP_SANDBOX_PORT")
        made = the_loop(env, "issue", "create", "Add a login page")
        assert made.returncode == 0, made.stderr
        shown = the_loop(env, "show", "1")
        assert shown.returncode == 0, shown.stderr
        assert "Add a login page  (issue, open)" in shown.stdout
    finally:
        stop(server)


def test_the_commands_find_a_sandbox_on_another_port_from_its_directory(tmp_path):
    """``make run`` with THE_LOOP_SANDBOX_PORT in one terminal, the commands in another
    where it is not set: they find the running sandbox through its directory's ``url``
    file, which goes when the sandbox stops."""
    port = free_port()
    env = sandbox_env(tmp_path, port)
    server = start([str(BIN / "the-loop"), "sandbox", "--webhook-url",
                    f"http://127.0.0.1:{free_port()}/webhook"], env, tmp_path / "sandbox.out")
    recorded = tmp_path / "sandbox" / URL_FILE
    try:
        wait_until(lambda: recorded.is_file() or server.poll() is not None, timeout=60,
                   what="the sandbox's url file")
        assert server.poll() is None, (tmp_path / "sandbox.out").read_text()
        assert recorded.read_text().strip() == f"http://127.0.0.1:{port}"
        elsewhere = {k: v for k, v in env.items() if k != "THE_LOOP_SANDBOX_PORT"}
        made = the_loop(elsewhere, "issue", "create", "Add a login page")
        assert made.returncode == 0, made.stderr
        assert the_loop(elsewhere, "show", "1").stdout.startswith("github:sandbox/demo#1")
    finally:
        stop(server)
    assert not recorded.exists()  # a stopped sandbox is not where the commands look


def test_a_port_that_is_not_one_is_refused_naming_the_variable(tmp_path):
    env = sandbox_env(tmp_path, 0)
    env["THE_LOOP_SANDBOX_PORT"] = "80a"
    done = the_loop(env, "show", "1")
    assert done.returncode != 0
    assert "THE_LOOP_SANDBOX_PORT must be a TCP port" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("stored", "shown"), [
    ({"state": "open", "draft": True}, "draft"),
    ({"state": "open", "draft": False}, "open"),
    ({"state": "closed", "draft": True}, "closed"),
    ({"state": "closed", "merged": True}, "merged"),
])
def test_show_names_a_pull_requests_state_as_a_person_reads_it(stored, shown):
    assert pull_state(stored) == shown
