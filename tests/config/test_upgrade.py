"""``the-loop upgrade``: old fixtures in, migrated files asserted out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from foundation.config.deployment import load_cli_config
from foundation.config.loader import (
    CLI_CONFIG,
    COLLABORATORS,
    HARNESS_CONFIG,
    InvalidConfigError,
    parse_yaml,
)
from foundation.config.repository import load_collaborators
from the_loop.cli import main
from the_loop.upgrade import UpgradeError, migrate_document, upgrade_file, upgrade_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "config"
OLD = FIXTURES / "cli-config.v1.yaml"
MIGRATED = FIXTURES / "cli-config.v1.migrated.yaml"

MOVES = [
    "  moved webhooks.ghWebhook.routing.control.ghBinary -> integrations.github.cli.binary",
    "  moved webhooks.ghWebhook.routing.announce.ghBinary -> integrations.github.cli.binary",
    "  moved poller.github.ghBinary -> integrations.github.cli.binary",
]
CONFLICT = (
    "  conflict webhooks.ghWebhook.routing.reactions.ghBinary: '/opt/gh/bin/gh' differs from "
    "integrations.github.cli.binary: 'gh'; kept 'gh' and removed "
    "webhooks.ghWebhook.routing.reactions.ghBinary"
)


@pytest.fixture
def old_config(tmp_path) -> Path:
    path = tmp_path / "cli-config.yaml"
    shutil.copyfile(OLD, path)
    return path


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["upgrade", *args], env=env)


# -- the fixture -----------------------------------------------------------------------


def test_old_fixture_migrates_to_the_expected_file_with_its_comments(old_config):
    result = upgrade_file(old_config)
    assert result.written and result.problems is None
    assert old_config.read_text() == MIGRATED.read_text()
    migrated = MIGRATED.read_text()
    for comment in ("# the-loop daemon configuration.", "# gh from PATH",
                    "# Emoji on the comment that triggered the work",
                    "# RQ queue; THE_LOOP_QUEUE overrides"):
        assert comment in migrated
    # The removed keys' own comments go with them.
    assert "pinned: the distro's gh" not in migrated
    assert "Catches events missed" not in migrated


def test_migrated_fixture_loads_with_the_old_values():
    config = load_cli_config(MIGRATED.read_text(), str(MIGRATED))
    assert config.version == 2
    assert config.integrations.github.cli.binary == "gh"
    assert config.routing.reactions.completed == "rocket"
    assert config.routing.announce.enabled is True
    assert config.queue.default_timeout == 600


def test_report_names_every_moved_key_and_the_conflict(old_config):
    result = run(str(old_config))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{old_config}:"
    assert lines[1] == "  version 1 -> 2"
    assert lines[2] == MOVES[0]
    assert lines[3] == CONFLICT
    assert lines[4:6] == MOVES[1:]
    assert lines[6:8] == ["  removed empty poller.github", "  removed empty poller"]
    assert lines[8] == f"{old_config}: upgraded to version 2 (3 moved, 1 conflict)"


def test_second_run_changes_nothing_and_says_so(old_config):
    assert run(str(old_config)).exit_code == 0
    before = old_config.read_bytes()
    mtime = old_config.stat().st_mtime_ns
    second = run(str(old_config))
    assert second.exit_code == 0
    assert second.output == f"{old_config}: already at version 2; nothing to change\n"
    assert old_config.read_bytes() == before
    assert old_config.stat().st_mtime_ns == mtime


def test_dry_run_prints_each_moved_key_and_writes_nothing(old_config):
    result = run("--dry-run", str(old_config))
    assert result.exit_code == 0, result.output
    for line in MOVES + [CONFLICT]:
        assert line in result.output.splitlines()
    assert result.output.splitlines()[-1] == (
        f"{old_config}: dry run, nothing written; would upgrade to version 2 "
        "(3 moved, 1 conflict)")
    assert old_config.read_bytes() == OLD.read_bytes()
    assert [p.name for p in old_config.parent.iterdir()] == ["cli-config.yaml"]


def test_default_file_comes_from_the_environment(old_config):
    result = run("--dry-run", env={"THE_LOOP_CONFIG": str(old_config)})
    assert result.exit_code == 0
    assert MOVES[0] in result.output


def test_default_file_is_cli_config_yaml_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("THE_LOOP_CONFIG", raising=False)
    shutil.copyfile(OLD, tmp_path / "cli-config.yaml")
    result = run("--dry-run")
    assert result.exit_code == 0
    assert result.output.startswith("cli-config.yaml:\n")


# -- properties ------------------------------------------------------------------------


def test_existing_new_key_wins_and_conflicts_are_reported():
    text = (
        "version: 2\n"
        "integrations:\n"
        "  github:\n"
        "    cli:\n"
        "      binary: /usr/bin/gh   # distro\n"
        "webhooks:\n"
        "  ghWebhook:\n"
        "    routing:\n"
        "      control:\n"
        "        ghBinary: gh\n"
        "      announce:\n"
        "        ghBinary: /usr/bin/gh\n"
        "        enabled: false\n"
    )
    out, migration = upgrade_text(text, CLI_CONFIG, "c.yaml")
    assert [str(c) for c in migration.changes] == [
        "conflict webhooks.ghWebhook.routing.control.ghBinary: 'gh' differs from "
        "integrations.github.cli.binary: '/usr/bin/gh'; kept '/usr/bin/gh' and removed "
        "webhooks.ghWebhook.routing.control.ghBinary",
        "moved webhooks.ghWebhook.routing.announce.ghBinary -> integrations.github.cli.binary",
    ]
    assert out == (
        "version: 2\n"
        "integrations:\n"
        "  github:\n"
        "    cli:\n"
        "      binary: /usr/bin/gh   # distro\n"
        "webhooks:\n"
        "  ghWebhook:\n"
        "    routing:\n"
        "      control: {}\n"
        "      announce:\n"
        "        enabled: false\n"
    )


def test_stated_order_decides_not_document_order():
    text = (
        "version: 1\n"
        "poller: {github: {ghBinary: /poller/gh}}\n"
        "webhooks:\n"
        "  ghWebhook:\n"
        "    routing:\n"
        "      announce: {ghBinary: /announce/gh}\n"
        "      reactions: {ghBinary: /reactions/gh}\n"
    )
    out, migration = upgrade_text(text, CLI_CONFIG, "c.yaml")
    assert load_cli_config(out).integrations.github.cli.binary == "/reactions/gh"
    assert [(c.action, c.key) for c in migration.changes] == [
        ("version", "version"),
        ("moved", "webhooks.ghWebhook.routing.reactions.ghBinary"),
        ("conflict", "webhooks.ghWebhook.routing.announce.ghBinary"),
        ("conflict", "poller.github.ghBinary"),
        ("removed", "poller.github"),
        ("removed", "poller"),
    ]
    assert out == (
        "version: 2\n"
        "integrations:\n"
        "  github:\n"
        "    cli:\n"
        "      binary: /reactions/gh\n"
        "webhooks:\n"
        "  ghWebhook:\n"
        "    routing:\n"
        "      announce: {}\n"
        "      reactions: {}\n"
    )


def test_migration_is_deterministic():
    text = OLD.read_text()
    assert upgrade_text(text, CLI_CONFIG, "a")[0] == upgrade_text(text, CLI_CONFIG, "b")[0]


def test_a_file_without_version_gets_one():
    out, migration = upgrade_text(
        "# old\nwebhooks: {ghWebhook: {routing: {control: {ghBinary: gh}}}}\n", CLI_CONFIG, "c")
    assert out == (
        "# old\n"
        "version: 2\n"
        "integrations:\n"
        "  github:\n"
        "    cli:\n"
        "      binary: gh\n"
        "webhooks: {ghWebhook: {routing: {control: {}}}}\n"
    )
    assert str(migration.changes[0]) == "added version: 2"


def test_leftover_poller_settings_are_reported_and_fail_the_command(tmp_path):
    path = tmp_path / "cli-config.yaml"
    path.write_text("version: 1\npoller:\n  github:\n    ghBinary: gh\n    interval: 60\n")
    result = run(str(path))
    assert result.exit_code == 1
    assert "moved poller.github.ghBinary -> integrations.github.cli.binary" in result.output
    assert f"{path}: still does not load (lines of the migrated text):" in result.output
    assert f"{path}:6: poller: unknown key" in result.output
    assert "interval: 60" in path.read_text()  # written: the move itself is still right


def test_per_repo_files_are_detected_by_name_and_keep_comments(tmp_path):
    repo = tmp_path / ".the-loop"
    repo.mkdir()
    collaborators = repo / "collaborators.yaml"
    shutil.copyfile(FIXTURES / "collaborators.unversioned.yaml", collaborators)
    harness = repo / "harness-config.yaml"
    harness.write_text("# what matters\nticketing:\n  system: jira  # our tracker\n")
    result = run(str(collaborators), str(harness))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{collaborators}:", "  added version: 1", f"{collaborators}: upgraded to version 1",
        f"{harness}:", "  added version: 1", f"{harness}: upgraded to version 1",
    ]
    assert collaborators.read_text() == \
        (FIXTURES / "collaborators.unversioned.migrated.yaml").read_text()
    assert harness.read_text() == (
        "# what matters\nversion: 1\nticketing:\n  system: jira  # our tracker\n")
    assert load_collaborators(collaborators.read_text()).is_authorized("carol", "security-reviewer")
    again = run(str(collaborators), str(harness))
    assert again.output.count("nothing to change") == 2


def test_kind_option_overrides_the_name(tmp_path):
    path = tmp_path / "people.yaml"
    path.write_text("roles: {}\n")
    assert run("--kind", "collaborators", str(path)).exit_code == 0
    assert path.read_text() == "version: 1\nroles: {}\n"


def test_unparsable_or_missing_files_exit_non_zero_and_write_nothing(tmp_path):
    bad = tmp_path / "cli-config.yaml"
    bad.write_text("version: 1\nwebhooks: [\n")
    result = run(str(bad))
    assert result.exit_code == 1
    assert "not valid YAML" in result.output  # CliRunner mixes stderr in
    assert bad.read_text() == "version: 1\nwebhooks: [\n"
    assert run(str(tmp_path / "missing.yaml")).exit_code == 1


def test_one_bad_file_does_not_stop_the_others(tmp_path, old_config):
    bad = tmp_path / "other.yaml"
    bad.write_text(": :\n  - [\n")
    result = run(str(bad), str(old_config))
    assert result.exit_code == 1
    assert old_config.read_text() == MIGRATED.read_text()


def test_newer_versions_are_refused(tmp_path):
    path = tmp_path / "cli-config.yaml"
    path.write_text("version: 3\n")
    result = run(str(path))
    assert result.exit_code == 1
    assert "version 3 is not one this the-loop knows" in result.output
    with pytest.raises(UpgradeError):
        upgrade_text("version: two\n", HARNESS_CONFIG, "h")


# -- the pure function -----------------------------------------------------------------


def test_migrate_document_edits_the_document_in_place():
    doc = parse_yaml(OLD.read_text(), "old")
    migration = migrate_document(doc, CLI_CONFIG)
    assert (migration.from_version, migration.to_version) == (1, 2)
    assert doc["integrations"]["github"]["cli"]["binary"] == "gh"
    assert "poller" not in doc
    assert dict(doc["webhooks"]["ghWebhook"]["routing"]["control"]) == {}
    again = migrate_document(doc, CLI_CONFIG)
    assert not again.changed


def test_collaborators_at_current_version_are_untouched():
    text = "version: 1\nroles:\n  approver:\n  - {github: a}   # odd indent stays\n"
    out, migration = upgrade_text(text, COLLABORATORS, "c")
    assert out is text and not migration.changed


def test_a_bug_in_emitting_can_not_reach_the_file(monkeypatch, old_config):
    import the_loop.upgrade as upgrade

    real = upgrade.parse_yaml
    calls = []

    def parse_then_fail(text, source):
        calls.append(text)
        if len(calls) > 1:
            raise InvalidConfigError([])
        return real(text, source)

    monkeypatch.setattr(upgrade, "parse_yaml", parse_then_fail)
    with pytest.raises(UpgradeError, match="nothing written"):
        upgrade_file(old_config)
    assert old_config.read_bytes() == OLD.read_bytes()
