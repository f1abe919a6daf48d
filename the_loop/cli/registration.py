"""The GitHub App's registration: ``app manifest`` (the manifest of the permissions and
events the-loop needs) and ``app create`` (GitHub's manifest flow, credentials to .env).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from the_loop.cli.base import ENV_FILE, main


@main.group("app")
def app_group() -> None:
    """The GitHub App registration."""


@app_group.command("manifest")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json", "html"]), default="yaml",
              show_default=True,
              help="yaml: app.yml; json: what GitHub's form takes; html: a page that submits it.")
@click.option("--name", help="The App's name (unique on GitHub, at most 34 characters).")
@click.option("--webhook-url", help="Where GitHub sends deliveries, e.g. https://HOST/webhook.")
@click.option("--url", "homepage",
              help="The App's homepage (default: https://HOST/ of --webhook-url).")
@click.option("--redirect-url",
              help="Where GitHub redirects with the one-time code (default: as --url).")
@click.option("--org", help="html: register the App for this organization, not your account.")
@click.option("--github-url", default="https://github.com", show_default=True,
              help="html: GitHub's web URL (GitHub Enterprise Server: https://HOST).")
def app_manifest(fmt: str, name: str | None, webhook_url: str | None, homepage: str | None,
                 redirect_url: str | None, org: str | None, github_url: str) -> None:
    """Print the GitHub App manifest (permissions and events the-loop needs)."""
    import yaml

    from the_loop.manifest import (
        ManifestError,
        customised,
        html_form,
        manifest_text,
        registration_url,
    )

    overrides = {"name": name, "url": homepage, "webhook_url": webhook_url,
                 "redirect_url": redirect_url}
    try:
        doc = customised(**overrides)
        if fmt == "html":
            if webhook_url is None:
                raise ManifestError("--format html needs --webhook-url https://HOST/webhook "
                                    "(the address GitHub will send deliveries to)")
            click.echo(html_form(doc, registration_url(github_url, org)), nl=False)
        elif fmt == "json":
            click.echo(json.dumps(doc, indent=2, sort_keys=True))
        elif any(v is not None for v in overrides.values()):
            click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        else:
            click.echo(manifest_text(), nl=False)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None


@app_group.command("create")
@click.option("--org", default=None, help="Register the App for this organization "
              "(default: your personal account).")
@click.option("--github-url", default="https://github.com", show_default=True,
              help="GitHub's web URL (GitHub Enterprise Server: https://HOST).")
@click.option("--api-url", default=None, help="The REST API root [https://api.github.com "
              "for github.com, else GITHUB_URL/api/v3].")
@click.option("--webhook-url", default=None,
              help="Where GitHub sends deliveries, e.g. https://loop.example.com/webhook "
                   "(a tunnel's URL on a laptop: see docs/install.md).")
@click.option("--name", default=None, help="The App's name (GitHub's limit: 34 characters).")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Port of the local page (default: a free one).")
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path),
              default=Path(ENV_FILE), show_default=True, help="Where the credentials go.")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path),
              default=Path(".dev/github-app-key.pem"), show_default=True,
              help="Where the App's private key goes (mode 0600).")
@click.option("--timeout", type=click.FloatRange(1), default=900.0, show_default=True,
              help="Seconds to wait for GitHub's redirect.")
@click.option("--no-browser", is_flag=True, help="Print the page's URL; open no browser.")
def app_create(org: str | None, github_url: str, api_url: str | None,
               webhook_url: str | None, name: str | None, port: int, env_file: Path,
               key_file: Path, timeout: float, no_browser: bool) -> None:
    """Register the GitHub App from its manifest (GitHub's manifest flow): a local page
    posts app.yml to GitHub's "new App" form, GitHub redirects back with a code, and the
    code's conversion gives the App's id, secrets and key, written to .env (0600)."""
    from the_loop.app_create import AppCreateError, start
    from the_loop.manifest import ManifestError

    try:
        flow = start(github_url=github_url, org=org, webhook_url=webhook_url,
                     env_file=env_file, key_file=key_file, api_url=api_url, port=port,
                     name=name)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"the-loop app create: open {flow.url} and press \"Create GitHub App\"",
               err=True)
    if webhook_url is None:
        click.echo("the-loop app create: no --webhook-url: the App's webhook URL is the "
                   "shipped placeholder; set it on the App's page later", err=True)
    if not no_browser:
        import webbrowser

        webbrowser.open(flow.url)
    try:
        made = flow.wait(timeout)
    except AppCreateError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"registered GitHub App {made['slug']} (id {made['id']}); credentials in "
               f"{made['env_file']}, private key in {made['key_file']}")
    click.echo(f"install it: {made['html_url']}/installations/new; then: make run")
