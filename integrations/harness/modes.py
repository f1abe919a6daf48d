"""Runner modes (``runner.mode``): how an adapter runs its turn's process, in a child
process group of its own (:func:`integrations.harness.process.run_process`, mode
``process``) or inside a named tmux session a person can attach to
(:func:`integrations.harness.tmux.run_in_tmux`, mode ``tmux``), and what the adapters
that drive one CLI binary share (:class:`BinaryHarness`).

This module sits above both :mod:`.process` and :mod:`.tmux` (tmux runs its pane's
harness through ``run_process``), so :mod:`.process` does not import :mod:`.tmux`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from integrations.harness.base import TurnRequest, secret_values
from integrations.harness.process import ProcessResult, probe_env, probe_version, run_process

__all__ = ["MODES", "BinaryHarness", "launch"]

#: Runner modes (``runner.mode``): a child process group, or one inside tmux.
MODES = ("process", "tmux")


def launch(mode: str, argv: Sequence[str], request: TurnRequest,
           on_line: Callable[[str], bool] | None) -> ProcessResult:
    """Run a turn's ``argv`` for an adapter:
    :func:`~integrations.harness.process.run_process` (mode ``process``) or
    :func:`~integrations.harness.tmux.run_in_tmux` (mode ``tmux``, a session named after
    ``request.session_id``), with the request's stdin, cwd, env, limits and log; the
    values of secret-looking variables are redacted from the log.

    Raises:
        HarnessMissing: the executable (or tmux) is not installed.
    """
    common = {"stdin": request.prompt, "cwd": request.cwd, "env": request.env,
              "limits": request.limits, "log_path": request.log_path, "on_line": on_line,
              "on_start": request.on_start, "redact": secret_values(request.env)}
    if mode == "tmux":
        # Imported here: the tmux pane runs ``python -m integrations.harness.tmux``, which
        # must not find that module already imported by the package's ``__init__``.
        from integrations.harness.tmux import run_in_tmux, session_name

        return run_in_tmux(argv, name=session_name(request.session_id), **common)  # type: ignore[arg-type]
    return run_process(argv, **common)  # type: ignore[arg-type]


class BinaryHarness:
    """What the adapters that drive one CLI binary share: the binary from the settings
    (``harness.binary``, else :attr:`default_binary` on PATH), the runner's mode, and the
    ``--version`` probe. ``settings``: :class:`foundation.settings.HarnessSettings`."""

    default_binary = ""

    def __init__(self, settings: object, mode: str = "process") -> None:
        self.mode = mode  # runner.mode: process or tmux
        self.path: str | None = getattr(settings, "path", None)  # PATH of the probe
        self.binary: str = getattr(settings, "binary", None) or self.default_binary

    def probe(self) -> str:
        """``BINARY --version``, its first line. Raises HarnessMissing."""
        return probe_version(self.binary, probe_env(self.path))
