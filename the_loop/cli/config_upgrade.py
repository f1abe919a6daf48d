"""``the-loop upgrade``: config files migrated to the current version
(:mod:`the_loop.upgrade`).
"""

from __future__ import annotations

import os
import sys

import click

from the_loop.cli.base import main


@main.command("upgrade")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the moves; write nothing.")
@click.option("--kind", type=click.Choice(["cli-config", "harness-config", "collaborators"]),
              help="The file kind (default: by file name; any name but harness-config.yaml "
                   "and collaborators.yaml is a cli-config).")
def upgrade_cmd(files: tuple[str, ...], dry_run: bool, kind: str | None) -> None:
    """Migrate config FILES (default: $THE_LOOP_CONFIG, else ./cli-config.yaml) to the
    current version by deterministic key moves, keeping comments. Prints one line per
    moved key; a second run changes nothing. Exits non-zero when a file cannot be read or
    parsed, or still does not load after the migration."""
    from foundation.config.deployment import CLI_CONFIG_NAME
    from foundation.config.loader import ConfigFileError
    from foundation.settings import config_path
    from the_loop.upgrade import upgrade_file

    paths = list(files) or [config_path(os.environ) or CLI_CONFIG_NAME]
    failed = 0
    for path in paths:
        try:
            result = upgrade_file(path, kind=kind, dry_run=dry_run)
        except ConfigFileError as exc:
            click.echo(f"error: {exc}", err=True)
            failed += 1
            continue
        for line in result.report(dry_run=dry_run):
            click.echo(line)
        failed += bool(result.problems)
    if failed:
        sys.exit(1)
