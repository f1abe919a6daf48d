"""``the-loop app create`` against the loopback fake GitHub, driven over real HTTP as a
browser would: the local page's form is posted to the fake's "new App" page, its
redirect followed back to the command's callback, the code exchanged; ``.env`` (0600)
and the key file (0600) hold the App's credentials, which the-loop's settings read."""

from __future__ import annotations

import html
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import requests
from dotenv import dotenv_values

from foundation.settings import Settings
from tests.support.processes import start, stop
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

BIN = Path(sys.executable).parent


def test_app_create_registers_the_app_and_writes_env(tmp_path):
    fake = HttpFakeGitHub()
    url, stop_fake = serve(fake)
    log = tmp_path / "create.out"
    env = {**os.environ, "THE_LOOP_ENV_FILE": ""}
    proc = start([str(BIN / "the-loop"), "app", "create", "--org", "acme", "--github-url",
                  url, "--webhook-url", "https://loop.example.com/webhook", "--no-browser",
                  "--timeout", "60"], env, log, cwd=tmp_path)
    try:
        page_url = None
        deadline = time.monotonic() + 30
        while page_url is None and time.monotonic() < deadline:
            found = re.search(r"open (http://127\.0\.0\.1:\d+/)", log.read_text())
            page_url = found[1] if found else None
            time.sleep(0.05)
        assert page_url, log.read_text()
        page = requests.get(page_url, timeout=5).text
        action = html.unescape(re.search(r'<form action="([^"]+)"', page)[1])
        manifest = html.unescape(re.search(r'name="manifest" value="([^"]+)"', page)[1])
        assert action.startswith(f"{url}/organizations/acme/settings/apps/new?state=")
        assert '"url":"https://loop.example.com/webhook"' in manifest
        posted = requests.post(action, data={"manifest": manifest}, timeout=5,
                               allow_redirects=False)
        assert posted.status_code == 302
        assert posted.headers["Location"].startswith(page_url + "callback?code=")
        done = requests.get(posted.headers["Location"], timeout=30)
        assert done.status_code == 200 and "registered" in done.text
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        stop(proc)
        stop_fake()
    env_file, key_file = tmp_path / ".env", tmp_path / ".dev" / "github-app-key.pem"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    values = dotenv_values(env_file)
    assert set(values) == {"THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_CLIENT_ID",
                           "THE_LOOP_GITHUB_CLIENT_SECRET", "THE_LOOP_WEBHOOK_SECRET",
                           "THE_LOOP_GITHUB_PRIVATE_KEY_PATH", "THE_LOOP_GITHUB_API_URL"}
    assert values["THE_LOOP_GITHUB_API_URL"] == f"{url}/api/v3"
    assert "BEGIN RSA PRIVATE KEY" in key_file.read_text()
    assert "registered GitHub App the-loop" in log.read_text()
    settings = Settings.from_env({**values, "REDIS_URL": "redis://127.0.0.1:6379/14"},
                                 process="worker")
    github = settings.require_github()
    assert str(github.app_id) == values["THE_LOOP_GITHUB_APP_ID"]


def test_every_command_reads_env(tmp_path):
    (tmp_path / ".env").write_text("THE_LOOP_WEBHOOK_SECRET='from-dotenv'\n")
    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_ENV_FILE"}
    env.pop("THE_LOOP_WEBHOOK_SECRET", None)
    code = ("import os, sys; from the_loop.cli import load_env_file; load_env_file(); "
            "print(os.environ.get('THE_LOOP_WEBHOOK_SECRET'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "from-dotenv"
