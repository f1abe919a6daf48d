"""``the-loop`` command line (the console script ``the-loop = "the_loop.cli:main"``).

The root group and what the commands share are in :mod:`the_loop.cli.base`; each command
module adds its commands to those groups when imported, so importing this package
registers every command. The command modules import :mod:`the_loop.cli.base`, never this
package.

Every ``--json`` output is one object: ``{"schemaVersion": 1, "action", "ok", "status",
...}``. Exit status is 0 on success and non-zero on any failure.
"""

# The command groups: importing a module registers its commands on ``main``.
from the_loop.cli import (  # noqa: F401
    config_upgrade,  # upgrade
    deliveries,  # deliveries failed/retry/discard, redeliver
    drivers,  # run, check, decide, graph force
    lifecycle,  # graph validate/export, state (show), state export
    plans,  # tasks plan, state migrate
    registration,  # app manifest, app create
    sandbox,  # sandbox and its subcommands (prepare, issue create, comment, review, ...)
    service,  # serve, worker, runner, replay
    sessions,  # sessions list/show/logs/cancel/resume/attach
    signing_keys,  # keys generate/show/publish
)
from the_loop.cli.base import ENV_FILE, emit, load_env_file, main, open_operator, read_settings

__all__ = ["ENV_FILE", "emit", "load_env_file", "main", "open_operator", "read_settings"]
