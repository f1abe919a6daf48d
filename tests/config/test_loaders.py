"""The three config files: schemas, defaults, named errors, the refusal of legacy files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from foundation.config.deployment import (
    CliConfig,
    cli_config_from_path,
    load_cli_config,
)
from foundation.config.loader import (
    CLI_CONFIG,
    COLLABORATORS,
    HARNESS_CONFIG,
    KINDS,
    ConfigFileError,
    InvalidConfigError,
    LegacyConfigError,
    as_dict,
    kind_for_path,
    schema,
    upgrade_command,
)
from foundation.config.repository import (
    Collaborators,
    HarnessConfig,
    Person,
    collaborators_from_path,
    harness_config_from_path,
    load_collaborators,
    load_harness_config,
)
from foundation.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "config"
DOCS = ROOT / "docs" / "configuration.md"
OLD = FIXTURES / "cli-config.v1.yaml"


def schema_defaults(node: dict[str, Any]) -> Any:
    """The defaults a schema declares, objects built from their properties' defaults."""
    if node.get("type") == "object" and "properties" in node and node["properties"]:
        return {k: schema_defaults(v) for k, v in node["properties"].items()}
    return node.get("default")


def walk_objects(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            out.append((path, node))
        for key, value in node.items():
            out += walk_objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += walk_objects(value, f"{path}/{i}")
    return out


# -- schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_valid_draft_2020_12_and_closed(kind):
    doc = schema(kind)
    Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for where, obj in walk_objects(doc):
        if where == "/properties/roles":  # role names are free; each value is checked
            assert isinstance(obj["additionalProperties"], dict)
            continue
        assert obj.get("additionalProperties") is False, f"{kind}{where} is open"


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_ship_as_package_data(kind):
    from importlib import resources

    assert resources.files("foundation.config").joinpath("schemas", f"{kind}.schema.json").is_file()
    # Namespace packages are found too, so the schemas folder is a package whose *.json ships.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"*" = ["*.yaml", "*.json"' in pyproject
    assert '"the_loop*"' in pyproject


def test_schema_defaults_match_the_dataclasses():
    assert schema_defaults(dict(schema(CLI_CONFIG))) == as_dict(CliConfig())
    assert schema_defaults(dict(schema(HARNESS_CONFIG))) == as_dict(HarnessConfig())


# -- defaults --------------------------------------------------------------------------


def test_absent_or_empty_files_give_every_default():
    assert load_cli_config(None) == CliConfig()
    assert load_cli_config("# nothing yet\n") == CliConfig()
    assert load_cli_config("{}\n") == CliConfig()
    assert load_harness_config(None) == HarnessConfig()
    assert load_collaborators(None).roles == {}
    assert cli_config_from_path(FIXTURES / "nope.yaml") == CliConfig()


def test_the_harness_and_runner_sections_are_one_type_from_file_to_settings(tmp_path):
    """The file's ``harness:`` and ``runner:`` are built into the settings' own section
    types; start-up resolves the same type. Fields only start-up sets (``source``,
    ``path``, ``queue``) are no keys of the file: refused in it, left out of its shape."""
    from foundation.settings import HarnessSettings, RunnerSettings

    path = tmp_path / "cli-config.yaml"
    path.write_text("version: 2\nharness: {adapter: codex, maxTurns: 2}\n"
                    "runner: {lease: 60}\n")
    config = cli_config_from_path(path)
    settings = Settings.from_env({"THE_LOOP_CONFIG": str(path), "HOME": str(tmp_path)})
    assert type(config.harness) is type(settings.harness) is HarnessSettings
    assert type(config.runner) is type(settings.runner) is RunnerSettings
    assert (settings.harness.max_turns, settings.runner.lease) == (2, 60)
    assert settings.harness.source == str(path) and settings.harness.binary == "codex"
    shape = as_dict(CliConfig())
    assert not {"source", "path"} & set(shape["harness"]) and "queue" not in shape["runner"]
    with pytest.raises(InvalidConfigError, match="harness.source"):
        load_cli_config("version: 2\nharness: {source: elsewhere.yaml}\n")


def test_cli_config_defaults_are_filled_around_what_the_file_sets():
    config = load_cli_config(
        "version: 2\n"
        "integrations:\n  github:\n    transport: cli\n"
        "webhooks:\n  ghWebhook:\n    routing:\n      reactions: {started: rocket}\n"
    )
    assert config.integrations.github.transport == "cli"
    assert config.integrations.github.cli.binary == "gh"
    assert config.integrations.github.api.token_env == ("GH_TOKEN", "GITHUB_TOKEN")
    assert config.integrations.github.api.base_url == "https://api.github.com"
    assert config.integrations.slack.transport == "sdk"
    assert config.integrations.slack.url_env == "THE_LOOP_SLACK_WEBHOOK_URL"
    assert config.integrations.jira.api.token_env == "THE_LOOP_JIRA_TOKEN"
    assert config.routing.reactions.started == "rocket"
    assert config.routing.reactions.completed == "hooray"
    assert config.routing.reactions.enabled is True
    assert config.routing.announce.enabled is True
    assert config.queue.name == "the-loop" and config.queue.default_timeout == 300
    assert config.state.prefix == "the-loop" and config.state.lock_timeout == 300


def test_harness_config_defaults_merge_per_event_and_tier():
    harness = load_harness_config(
        "version: 1\n"
        "notifications:\n  events:\n    work-item-done: [approver, lead]\n"
        "autonomy:\n  tiers: {1: agent}\n"
    )
    assert harness.notifications.roles("work-item-done") == ("approver", "lead")
    assert harness.notifications.roles("phase-approval-pending") == ("approver",)
    assert harness.notifications.roles("phase-approved") == ()
    assert harness.autonomy.tiers == {1: "agent", 2: "human", 3: "human", 4: "human"}
    assert harness.spec_dir(7) == "specs/7"
    assert harness.enrolment.label == "the-loop"
    assert harness.ticketing.system == "github"
    assert harness.security.review.human_sign_off_min_tier == 4
    assert harness.gates.dismiss_stale_approvals is True
    assert harness.gates.minimum_permission is None
    assert harness.requires_human(1) is False
    assert harness.requires_human(2) is True
    assert harness.requires_human(None) is True


def test_security_sign_off_outranks_autonomy():
    harness = load_harness_config(
        "version: 1\nsecurity: {review: {humanSignOffMinTier: 2}}\n"
        "autonomy: {tiers: {1: agent, 2: agent, 3: agent}}\n"
    )
    assert [harness.requires_human(t) for t in (1, 2, 3, 4)] == [False, True, True, True]


def test_token_env_accepts_one_name_or_a_list():
    one = load_cli_config("version: 2\nintegrations: {github: {api: {tokenEnv: MY_TOKEN}}}\n")
    assert one.integrations.github.api.token_env == ("MY_TOKEN",)


# -- the documented examples -----------------------------------------------------------


def doc_examples() -> dict[str, str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    named = {}
    for block in blocks:
        first = block.splitlines()[0]
        for name in ("cli-config.yaml", "harness-config.yaml", "collaborators.yaml"):
            if first.startswith("#") and name in first.split("—")[0]:
                named[name] = block
    return named


def test_docs_examples_load_and_cli_example_is_all_defaults():
    examples = doc_examples()
    assert set(examples) == {"cli-config.yaml", "harness-config.yaml", "collaborators.yaml"}
    assert load_cli_config(examples["cli-config.yaml"]) == CliConfig()
    harness = load_harness_config(examples["harness-config.yaml"])
    assert harness.autonomy.tiers[1] == "agent"
    assert harness.gates.minimum_permission == "write"
    people = load_collaborators(examples["collaborators.yaml"])
    assert people.people("approver")[0] == Person(
        "Alice Example", "alice", "U012AB3CD", "5b10ac8d82e05b22cc7d4ef5")
    assert people.is_authorized("CAROL", "security-reviewer")


@pytest.mark.parametrize("kind", KINDS)
def test_docs_table_names_every_key(kind):
    text = DOCS.read_text()

    def paths(node: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for key, sub in (node.get("properties") or {}).items():
            here = f"{prefix}.{key}" if prefix else key
            if sub.get("properties"):
                out += paths(sub, here)
            else:
                out.append(here)
        return out

    for path in paths(dict(schema(kind)), ""):
        if path.startswith("autonomy.tiers."):
            path = "autonomy.tiers.1"
        assert f"`{path}`" in text, f"docs/configuration.md lacks {path}"


# -- named errors ----------------------------------------------------------------------


def test_misspelt_key_in_cli_config_names_file_key_line_and_fix():
    text = (
        "version: 2\n"
        "webhooks:\n"
        "  ghWebhook:\n"
        "    routing:\n"
        "      reactions:\n"
        "        enabled: true\n"
        "        startd: eyes\n"
    )
    with pytest.raises(InvalidConfigError) as caught:
        load_cli_config(text, "/etc/the-loop/cli-config.yaml")
    message = str(caught.value)
    assert message.startswith(
        "/etc/the-loop/cli-config.yaml:7: webhooks.ghWebhook.routing.reactions.startd: "
        "unknown key; did you mean 'started'?")
    assert "allowed here: completed, enabled, error, started" in message
    issue = caught.value.issues[0]
    assert (issue.key, issue.line) == ("webhooks.ghWebhook.routing.reactions.startd", 7)
    assert isinstance(caught.value, ConfigFileError)


def test_misspelt_key_in_harness_config_names_file_key_line_and_fix():
    text = "version: 1\nnotifications:\n  events:\n    phase-aproval-pending: [approver]\n"
    with pytest.raises(InvalidConfigError) as caught:
        load_harness_config(text, "octo/repo:.the-loop/harness-config.yaml")
    assert str(caught.value).startswith(
        "octo/repo:.the-loop/harness-config.yaml:4: "
        "notifications.events.phase-aproval-pending: unknown key; "
        "did you mean 'phase-approval-pending'?")


def test_misspelt_key_in_collaborators_names_file_key_line_and_fix():
    text = "version: 1\nroles:\n  approver:\n    - name: Alice\n      githb: alice\n"
    with pytest.raises(ConfigFileError) as caught:
        Collaborators.parse(text, "octo/repo:.the-loop/collaborators.yaml")
    assert str(caught.value) == (
        "octo/repo:.the-loop/collaborators.yaml:5: roles.approver[0].githb: unknown key; "
        "did you mean 'github'? (allowed here: github, jira, name, slack)")


def test_a_key_in_the_wrong_section_is_pointed_to_its_place():
    with pytest.raises(InvalidConfigError) as caught:
        load_cli_config("version: 2\nreactions: {started: eyes}\n")
    assert "it belongs at webhooks.ghWebhook.routing.reactions" in str(caught.value)


def test_every_problem_is_listed_in_line_order():
    text = (
        "version: 2\n"
        "state:\n  lockTimeout: 0\n"
        "integrations:\n  github:\n    transport: automatic\n"
        "webhooks:\n  ghWebhook:\n    routing:\n      announce: {enabled: yes}\n"
    )
    with pytest.raises(InvalidConfigError) as caught:
        load_cli_config(text)
    lines = str(caught.value).splitlines()
    assert lines == [
        "cli-config.yaml:3: state.lockTimeout: must be at least 1; use a value of at least 1",
        "cli-config.yaml:6: integrations.github.transport: must be one of auto, api, cli; "
        "did you mean 'auto'?",
        "cli-config.yaml:10: webhooks.ghWebhook.routing.announce.enabled: must be true or "
        "false, not a string; change the value to true or false",
    ]


def test_credentials_are_only_variable_names_and_never_echoed():
    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    for text in (
        f"version: 2\nintegrations: {{github: {{api: {{tokenEnv: {token}}}}}}}\n",
        f"version: 2\nintegrations: {{github: {{api: {{tokenEnv: [GH_TOKEN, {token}]}}}}}}\n",
        f"version: 2\nintegrations: {{slack: {{tokenEnv: xoxb-{token}}}}}\n",
        f"version: 2\nintegrations: {{jira: {{api: {{tokenEnv: '{token.lower()}'}}}}}}\n",
    ):
        with pytest.raises(InvalidConfigError) as caught:
            load_cli_config(text)
        message = str(caught.value)
        assert "tokenEnv" in message and "NAME of an environment variable" in message
        assert token not in message and token.lower() not in message


def test_env_name_pattern_is_in_the_schema():
    env_name = schema(CLI_CONFIG)["$defs"]["envName"]
    assert env_name["pattern"] == "^[A-Z_][A-Z0-9_]*$"
    validator = Draft202012Validator(schema(CLI_CONFIG))
    good = {"version": 2, "integrations": {"slack": {"tokenEnv": "SLACK_BOT_TOKEN"}}}
    bad = {"version": 2, "integrations": {"slack": {"tokenEnv": "xoxb-123"}}}
    assert validator.is_valid(good)
    assert not validator.is_valid(bad)


def test_reactions_accept_only_github_emoji_and_hint_at_quoting():
    with pytest.raises(InvalidConfigError) as caught:
        load_cli_config("version: 2\nwebhooks: {ghWebhook: {routing: {reactions: "
                        "{started: +1, error: thumbsdown}}}}\n")
    message = str(caught.value)
    assert 'quote it: "+1"' in message
    assert "reactions.error: must be one of +1, -1, laugh" in message
    ok = load_cli_config("version: 2\nwebhooks: {ghWebhook: {routing: {reactions: "
                         "{started: '+1', error: '-1'}}}}\n")
    assert ok.routing.reactions.started == "+1"


def test_yaml_errors_name_the_line():
    with pytest.raises(InvalidConfigError, match=r"^cli-config.yaml:3: not valid YAML"):
        load_cli_config("version: 2\nqueue:\n  name: a: b\n")
    duplicate = r":4: not valid YAML: found duplicate key.*other is at line 3"
    with pytest.raises(InvalidConfigError, match=duplicate):
        load_cli_config("version: 2\nqueue:\n  name: a\n  name: b\n")
    with pytest.raises(InvalidConfigError, match="top level must be a mapping"):
        load_harness_config("- version: 1\n")


def test_spec_directory_must_be_a_template_inside_the_repository():
    for bad in ("/abs/{number}", "../{number}", "specs/{id}", "specs/all"):
        with pytest.raises(InvalidConfigError, match=r":3: specs.directory: "):
            load_harness_config(f"version: 1\nspecs:\n  directory: '{bad}'\n")
    assert load_harness_config("version: 1\nspecs: {directory: 'docs/{number}/spec'}\n") \
        .spec_dir(3) == "docs/3/spec"


def test_gate_settings_are_checked():
    with pytest.raises(InvalidConfigError, match="gates.minimumPermission: must be one of"):
        load_harness_config("version: 1\ngates: {minimumPermission: owner}\n")
    with pytest.raises(InvalidConfigError, match="humanSignOffMinTier: must be at most 4"):
        load_harness_config("version: 1\nsecurity: {review: {humanSignOffMinTier: 5}}\n")


def test_newer_or_malformed_versions_are_invalid_not_legacy():
    with pytest.raises(InvalidConfigError, match="version 3 is newer than this the-loop"):
        load_cli_config("version: 3\n")
    with pytest.raises(InvalidConfigError, match="version: must be a whole number"):
        load_harness_config("version: '1'\n")


# -- legacy files are refused ----------------------------------------------------------


def test_runtime_refuses_the_unmigrated_config():
    with pytest.raises(LegacyConfigError) as caught:
        cli_config_from_path(OLD)
    error = caught.value
    message = str(error)
    assert message.splitlines()[0] == (
        f"{OLD} is version 1; this the-loop reads version 2. Run: the-loop upgrade {OLD}")
    for key, line in (
        ("webhooks.ghWebhook.routing.control.ghBinary", 10),
        ("webhooks.ghWebhook.routing.reactions.ghBinary", 14),
        ("webhooks.ghWebhook.routing.announce.ghBinary", 22),
        ("poller.github.ghBinary", 27),
    ):
        assert (f"{OLD}:{line}: {key}: removed in version 2; replaced by "
                "integrations.github.cli.binary") in message
    assert error.command == f"the-loop upgrade {OLD}"
    assert (error.found_version, error.current_version) == (1, 2)


def test_runtime_refuses_the_unmigrated_config_named_by_the_environment():
    with pytest.raises(SettingsError, match="Run: the-loop upgrade") as caught:
        Settings.from_env({"THE_LOOP_CONFIG": str(OLD)})
    assert isinstance(caught.value.__cause__, LegacyConfigError)


def test_a_current_version_still_carrying_gh_binary_is_refused():
    text = "version: 2\nwebhooks:\n  ghWebhook:\n    routing:\n      control: {ghBinary: gh}\n"
    with pytest.raises(LegacyConfigError) as caught:
        load_cli_config(text)
    assert str(caught.value) == (
        "cli-config.yaml still carries keys removed in version 2. Run: the-loop upgrade "
        "cli-config.yaml\n"
        "cli-config.yaml:5: webhooks.ghWebhook.routing.control.ghBinary: removed in version 2; "
        "replaced by integrations.github.cli.binary")


def test_files_without_a_version_are_refused_with_the_command():
    with pytest.raises(LegacyConfigError) as caught:
        load_cli_config("queue: {name: q}\n")
    assert "has no 'version' key; this the-loop reads version 2" in str(caught.value)
    with pytest.raises(LegacyConfigError) as caught:
        load_collaborators("roles: {}\n", "octo/repo:.the-loop/collaborators.yaml")
    assert caught.value.command == "the-loop upgrade .the-loop/collaborators.yaml"
    with pytest.raises(LegacyConfigError, match="upgrade .the-loop/harness-config.yaml"):
        load_harness_config("ticketing: {system: jira}\n")


def test_upgrade_command_quotes_paths():
    assert upgrade_command("/etc/my config.yaml") == "the-loop upgrade '/etc/my config.yaml'"
    assert upgrade_command("octo/repo:.the-loop/x.yaml") == "the-loop upgrade .the-loop/x.yaml"


# -- collaborators keep their behaviour ------------------------------------------------


def test_collaborators_parse_keeps_its_behaviour():
    collaborators = Collaborators.parse(
        "version: 1\nroles:\n  approver:\n"
        "    - {name: Alice, github: '@Alice', slack: U1}\n"
        "    - {github: bob}\n"
        "    - {jira: 12345}\n"
        "  empty: []\n"
    )
    assert collaborators.people("approver") == (
        Person("Alice", "Alice", "U1", None),
        Person("bob", "bob", None, None),
        Person("approver-2", None, None, "12345"),
    )
    assert collaborators.is_authorized("alice", "approver")
    assert not collaborators.is_authorized("alice", "empty")
    assert not collaborators.is_authorized(None, "approver")
    assert Collaborators.parse(None) == Collaborators()
    assert Collaborators.parse("") == Collaborators()
    assert Collaborators.parse("version: 1\nroles:\n").roles == {}


def test_collaborators_shape_errors_are_config_errors():
    for text, where in (
        ("version: 1\nroles: [approver]\n", ":2: roles: must be a mapping or null"),
        ("version: 1\nroles:\n  approver: alice\n", ":3: roles.approver: must be a list"),
        ("version: 1\nroles:\n  approver: [alice]\n", ":3: roles.approver[0]: must be a mapping"),
        ("version: 1\nroles:\n  approver:\n    - {github: 'alice bob'}\n",
         ":4: roles.approver[0].github: has a value of the wrong form"),
    ):
        with pytest.raises(ConfigFileError) as caught:
            Collaborators.parse(text, "c.yaml")
        assert where in str(caught.value), str(caught.value)


# -- paths and the environment ---------------------------------------------------------


def test_kind_by_file_name():
    assert kind_for_path("repo/.the-loop/harness-config.yaml") == HARNESS_CONFIG
    assert kind_for_path(".the-loop/collaborators.yml") == COLLABORATORS
    assert kind_for_path("/etc/the-loop/cli-config.yaml") == CLI_CONFIG
    assert kind_for_path("deploy.yaml") == CLI_CONFIG


def test_the_settings_read_the_file_named_by_the_environment(tmp_path):
    assert Settings.from_env({}).deployment == CliConfig()
    with pytest.raises(SettingsError, match=r"does not exist \(named by \$THE_LOOP_CONFIG\)"):
        Settings.from_env({"THE_LOOP_CONFIG": str(tmp_path / "missing.yaml")})
    path = tmp_path / "cli-config.yaml"
    path.write_text("version: 2\nqueue: {name: other}\n")
    assert Settings.from_env({"THE_LOOP_CONFIG": str(path)}).deployment.queue.name == "other"


def test_from_path_helpers(tmp_path):
    (tmp_path / "harness-config.yaml").write_text("version: 1\nenrolment: {label: pdlc}\n")
    (tmp_path / "collaborators.yaml").write_text("version: 1\nroles: {a: [{github: x}]}\n")
    assert harness_config_from_path(tmp_path / "harness-config.yaml").enrolment.label == "pdlc"
    assert collaborators_from_path(tmp_path / "collaborators.yaml").is_authorized("X", "a")


def test_as_dict_round_trips_through_the_loader():
    harness = load_harness_config("version: 1\nautonomy: {tiers: {2: agent}}\n")
    again = load_harness_config(json.dumps(harness.as_dict()))
    assert again == harness
