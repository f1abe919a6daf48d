"""The GitHub App manifest (app.yml): in step with the router, the permissions the-loop's
operations need and no more, shipped in the package, printed by ``the-loop app manifest``."""

from __future__ import annotations

import html
import json
import re
import tomllib

import yaml
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from the_loop.cli import main
from the_loop.manifest import load_manifest, manifest_text
from workers.router import handled_events

TOP_LEVEL = REPO_ROOT / "app.yml"
PACKAGED = REPO_ROOT / "the_loop" / "app.yml"

# GitHub sends these to every App whatever it subscribes to, so they cannot be listed in
# default_events. GitHub's "Webhook events and payloads" docs say of `installation` and
# `installation_repositories`: "All GitHub Apps receive this event by default. You cannot
# manually subscribe to this event."; `ping` is sent when the App's webhook is created.
SENT_WITHOUT_SUBSCRIPTION = {"ping", "installation", "installation_repositories"}

# Exactly what the-loop's operations need (issue 8): labels, comments and reactions
# (issues, pull_requests), config and artifact files, and committing review records with
# put-file (contents: write), CI results and the transport's check runs (checks; statuses,
# actions), and metadata, which every App has.
EXPECTED_PERMISSIONS = {
    "issues": "write",
    "pull_requests": "write",
    "contents": "write",
    "checks": "write",
    "metadata": "read",
    "statuses": "read",
    "actions": "read",
}

# The repository permission (any level) each event needs before an App may subscribe to
# it, from the "To subscribe to this event, a GitHub App must have at least read-level
# access for the ... permission" line of each event in GitHub's "Webhook events and
# payloads" docs. Alternatives are listed where the docs give several.
EVENT_PERMISSION = {
    "check_run": {"checks"},
    "check_suite": {"checks"},
    "issue_comment": {"issues", "pull_requests"},
    "issues": {"issues"},
    "label": {"metadata"},
    "pull_request": {"pull_requests"},
    "pull_request_review": {"pull_requests"},
    "pull_request_review_comment": {"pull_requests"},
    "push": {"contents"},
    "status": {"statuses"},
    "workflow_run": {"actions"},
}


def test_top_level_and_packaged_manifest_are_identical():
    assert TOP_LEVEL.read_bytes() == PACKAGED.read_bytes(), (
        "app.yml and the_loop/app.yml differ: edit app.yml, then cp app.yml the_loop/app.yml")
    assert manifest_text() == PACKAGED.read_text()


def test_manifest_ships_as_package_data():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    assert "app.yml" in package_data.get("the_loop", []) + package_data.get("*", [])


def test_subscribed_events_are_exactly_the_handled_ones():
    subscribed = load_manifest()["default_events"]
    assert len(subscribed) == len(set(subscribed)), "an event is listed twice"
    expected = handled_events() - SENT_WITHOUT_SUBSCRIPTION
    missing = expected - set(subscribed)
    unhandled = set(subscribed) - handled_events()
    assert not missing, f"handled by workers/router.py but not subscribed in app.yml: {missing}"
    assert not unhandled, f"subscribed in app.yml but not handled by the router: {unhandled}"
    assert not SENT_WITHOUT_SUBSCRIPTION & set(subscribed)


def test_permissions_are_exactly_the_needed_ones_and_cover_every_event():
    manifest = load_manifest()
    assert manifest["default_permissions"] == EXPECTED_PERMISSIONS
    for event in manifest["default_events"]:
        assert event in EVENT_PERMISSION, f"no known permission requirement for {event!r}"
        assert EVENT_PERMISSION[event] & set(EXPECTED_PERMISSIONS), event


def test_manifest_has_the_fields_github_reads():
    manifest = load_manifest()
    assert set(manifest) == {"name", "url", "description", "public", "hook_attributes",
                             "redirect_url", "default_permissions", "default_events"}
    assert manifest["public"] is False
    assert manifest["hook_attributes"]["active"] is True
    assert manifest["hook_attributes"]["url"].endswith("/webhook")  # the receiver's route
    assert 1 <= len(manifest["name"]) <= 34


def test_cli_prints_the_manifest_verbatim():
    out = CliRunner().invoke(main, ["app", "manifest"])
    assert out.exit_code == 0, out.output
    assert out.output == TOP_LEVEL.read_text()


def test_cli_json_fills_in_the_urls():
    out = CliRunner().invoke(main, ["app", "manifest", "--format", "json", "--name", "acme-loop",
                                    "--webhook-url", "https://loop.acme.io/webhook"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["name"] == "acme-loop"
    assert doc["hook_attributes"] == {"url": "https://loop.acme.io/webhook", "active": True}
    assert doc["url"] == doc["redirect_url"] == "https://loop.acme.io/"
    assert doc["default_events"] == load_manifest()["default_events"]
    assert doc["default_permissions"] == EXPECTED_PERMISSIONS


def test_cli_html_is_a_form_posting_the_manifest_to_github():
    out = CliRunner().invoke(main, ["app", "manifest", "--format", "html", "--org", "acme",
                                    "--webhook-url", "https://loop.acme.io/webhook"])
    assert out.exit_code == 0, out.output
    action = re.search(r'<form action="([^"]+)" method="post">', out.output)
    assert action and html.unescape(action.group(1)).startswith(
        "https://github.com/organizations/acme/settings/apps/new?state=")
    value = re.search(r'<input type="hidden" name="manifest" value="([^"]+)">', out.output)
    assert value
    doc = json.loads(html.unescape(value.group(1)))
    assert doc["hook_attributes"]["url"] == "https://loop.acme.io/webhook"
    assert doc["default_permissions"] == EXPECTED_PERMISSIONS


def test_cli_yaml_with_overrides_stays_yaml():
    out = CliRunner().invoke(main, ["app", "manifest", "--webhook-url",
                                    "https://loop.acme.io/webhook"])
    assert out.exit_code == 0, out.output
    assert yaml.safe_load(out.output)["hook_attributes"]["url"] == "https://loop.acme.io/webhook"


def test_cli_refuses_bad_input():
    bad_url = CliRunner().invoke(main, ["app", "manifest", "--webhook-url", "loop.acme.io"])
    assert bad_url.exit_code != 0 and "--webhook-url must be a full URL" in bad_url.output
    no_url = CliRunner().invoke(main, ["app", "manifest", "--format", "html"])
    assert no_url.exit_code != 0 and "--webhook-url" in no_url.output
    long_name = CliRunner().invoke(main, ["app", "manifest", "--name", "x" * 35])
    assert long_name.exit_code != 0 and "34" in long_name.output
