"""The commands get the worker's GitHub client: ``the-loop graph force`` (service state)
and ``the-loop redeliver`` honour cli-config.yaml's integrations block (the variables
named by ``*Env``, a GitHub Enterprise Server ``baseUrl``) and say why a client cannot be
built instead of moving on without it."""

from __future__ import annotations

import base64
import json

import pytest
import responses
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from graph.context import HookConfig
from graph.runtime import Runtime
from the_loop.cli import main
from the_loop.graphs import load_graph
from the_loop.local import parse_ref
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
OPS_TOKEN = "ghp_operator_token_from_a_named_variable"


@pytest.fixture
def deployment(monkeypatch, redis_ns, tmp_path):
    """A service deployment: Redis state with one work item, and nothing GitHub-related
    in the environment under the-loop's own names (the file names the variables)."""
    for name in ("GH_TOKEN", "GITHUB_TOKEN", "THE_LOOP_GITHUB_API_URL",
                 "THE_LOOP_GITHUB_TRANSPORT", "THE_LOOP_GITHUB_APP_ID",
                 "THE_LOOP_GITHUB_PRIVATE_KEY", "THE_LOOP_GITHUB_PRIVATE_KEY_PATH",
                 "THE_LOOP_GITHUB_CLI_BINARY", "GH_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_ns.url)
    monkeypatch.setenv("THE_LOOP_REDIS_PREFIX", redis_ns.prefix)
    monkeypatch.setenv("THE_LOOP_QUEUE", redis_ns.queue_name)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    Runtime(load_graph(), store).enrol(parse_ref(REF), HookConfig(), None)
    assert store.load(REF) is not None

    def configure(text: str) -> None:
        path = tmp_path / "cli-config.yaml"
        path.write_text(text)
        monkeypatch.setenv("THE_LOOP_CONFIG", str(path))

    return store, configure


def through_api(configure, monkeypatch, url: str) -> None:
    """The deployment's GitHub: the api transport at ``url`` (a GitHub Enterprise Server
    base URL) with the operator's token from a variable the file names."""
    configure(f"""version: 2
integrations:
  github:
    transport: api
    api: {{tokenEnv: [OPS_GH_TOKEN], baseUrl: "{url}/api/v3"}}
""")
    monkeypatch.setenv("OPS_GH_TOKEN", OPS_TOKEN)


def force(*extra: str):
    return CliRunner().invoke(main, ["graph", "force", "--work-item", REF, "--to", "design",
                                     "--reason", "reviewed offline", "--json", *extra])


def test_force_comments_through_the_deployments_github_enterprise_client(deployment,
                                                                          monkeypatch):
    store, configure = deployment
    fake = HttpFakeGitHub(tokens=[OPS_TOKEN])
    fake.add_repo(REPO)
    url, stop = serve(fake)
    try:
        through_api(configure, monkeypatch, url)
        out = force()
    finally:
        stop()
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["status"] == "forced"
    assert store.load(REF).current_node == "design"
    comments = fake.comments(REPO, 1)
    assert len(comments) == 1 and "an operator forced this work item" in comments[0]["body"]
    assert comments[0]["user"] == fake.user_login  # the token the file named
    assert all(r.path.startswith("/api/v3/") for r in fake.requests)  # the GHES layout


def test_force_reports_why_no_github_client_can_be_built_and_moves_nothing(deployment):
    store, configure = deployment
    before = store.load(REF).current_node
    configure("""version: 2
integrations:
  github:
    transport: cli
    cli: {binary: /nonexistent/bin/gh}
""")
    out = force()
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert doc["status"] == "refused" and "not forced" in doc["error"]
    assert "/nonexistent/bin/gh" in doc["error"] and "not on PATH" in doc["error"]
    assert store.load(REF).current_node == before  # nothing recorded without its comment
    plain = force()
    assert plain.exit_code == 1 and "no GitHub client can be built" in plain.output


@pytest.fixture(scope="module")
def pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@responses.activate(assert_all_requests_are_fired=True)
def test_redeliver_uses_the_app_credentials_and_base_url_the_file_names(deployment, pem,
                                                                        monkeypatch):
    _store, configure = deployment
    configure("""version: 2
integrations:
  github:
    api:
      baseUrl: "https://ghe.example.com/api/v3"
      appIdEnv: OPS_APP_ID
      privateKeyEnv: OPS_APP_KEY
""")
    monkeypatch.setenv("OPS_APP_ID", "5150")
    monkeypatch.setenv("OPS_APP_KEY", pem)
    # PyGithub puts the port into every URL.
    responses.get("https://ghe.example.com:443/api/v3/app/hook/deliveries", json=[])
    out = CliRunner().invoke(main, ["redeliver", "--since", "1h", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["checked"] == 0
    scheme, token = responses.calls[0].request.headers["Authorization"].split(" ")
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert scheme == "Bearer" and str(claims["iss"]) == "5150"


def test_redeliver_names_what_to_set_without_app_credentials(deployment, monkeypatch):
    _store, configure = deployment
    configure("version: 2\nintegrations:\n  github:\n    api: {tokenEnv: [OPS_GH_TOKEN]}\n")
    monkeypatch.setenv("OPS_GH_TOKEN", OPS_TOKEN)
    out = CliRunner().invoke(main, ["redeliver", "--since", "1h", "--json"])
    assert out.exit_code == 1
    error = json.loads(out.output)["error"]
    assert "THE_LOOP_GITHUB_APP_ID" in error and "appIdEnv" in error
    assert OPS_TOKEN not in out.output


def test_keys_publish_commits_the_public_key_to_the_default_branch_once(deployment,
                                                                        monkeypatch, tmp_path):
    """`the-loop keys publish OWNER/NAME` adds the configured key's public half to
    .the-loop/keys/records.pub on the default branch through the worker's client, keeps
    a key published before, and commits nothing the second time."""
    from foundation.signing import KEYS_PATH
    from graph.signing import Signer
    from tests.conftest import TEST_SIGNER
    from the_loop.cli.signing_keys import write_private_key

    _store, configure = deployment
    fake = HttpFakeGitHub(tokens=[OPS_TOKEN])
    fake.add_repo(REPO)
    old = Signer.generate()
    fake.add_file(REPO, KEYS_PATH, old.public_pem())
    write_private_key(tmp_path / "signing.pem", TEST_SIGNER)
    monkeypatch.setenv("THE_LOOP_SIGNING_KEY_FILE", str(tmp_path / "signing.pem"))
    url, stop = serve(fake)
    try:
        through_api(configure, monkeypatch, url)
        first = CliRunner().invoke(main, ["keys", "publish", REPO, "--json"])
        second = CliRunner().invoke(main, ["keys", "publish", REPO, "--json"])
    finally:
        stop()
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["status"] == "published"
    assert json.loads(second.output)["status"] == "published-already"
    published = fake.file(REPO, KEYS_PATH)
    assert TEST_SIGNER.public_pem() in published and old.public_pem() in published
    assert len([a for a in fake.actions if ":put-file:" in a]) == 1
    assert "PRIVATE" not in first.output + second.output
