"""Commands that run the-loop's processes, and the one that feeds the receiver:
``serve`` (the webhook receiver under gunicorn), ``worker`` (the RQ delivery worker),
``runner`` (the harness runner) and ``replay`` (signed payload files POSTed as GitHub
would).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import click

from the_loop.cli.base import main, read_settings, setup_logging


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              show_default="$PORT or 8080", help="TCP port to listen on.")
@click.option("--host", default=None,
              show_default="$THE_LOOP_HOST or 0.0.0.0", help="Address to bind.")
def serve(port: int | None, host: str | None) -> None:
    """Run the webhook receiver under gunicorn (POST /webhook, /healthz, /readyz)."""
    settings = read_settings("receiver")  # fail here, not in every gunicorn worker
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:the_loop.gunicorn_conf",
            "--bind", f"{host or settings.web.host}:{port or settings.web.port}",
            "the_loop.wsgi:app"]
    os.execv(sys.executable, argv)


@main.command()
@click.option("--burst", is_flag=True, help="Exit when the queue is empty.")
def worker(burst: bool) -> None:
    """Run an RQ worker that processes queued deliveries."""
    settings = read_settings("worker")
    setup_logging(settings)
    import redis

    from graph.compile import GraphError
    from integrations.capabilities import CapabilityError
    from integrations.harness.base import HarnessError
    from the_loop.wiring import build_worker
    from workers.worker import run_worker

    try:
        run_worker(build_worker(settings), settings, burst=burst)
    except (GraphError, CapabilityError, HarnessError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); start it or fix REDIS_URL"
        ) from None


@main.command()
@click.option("--burst", is_flag=True, help="Exit when the turns queue is empty.")
@click.option("--processes", type=click.IntRange(1, 64), default=None,
              show_default="runner.concurrency",
              help="Runner processes to start (each runs one turn at a time).")
def runner(burst: bool, processes: int | None) -> None:
    """Run the harness runner: agent turns from the turns queue, each in its own
    workspace, reported back to the worker (see docs/harness.md)."""
    settings = read_settings("worker")
    setup_logging(settings)
    import redis

    from foundation.settings import SettingsError
    from graph.compile import GraphError
    from integrations.capabilities import CapabilityError
    from integrations.harness.base import HarnessError
    from runner.service import serve
    from the_loop.wiring import build_runner

    try:
        build_runner(settings)  # fail here, naming the fix, before any process starts
    except (GraphError, CapabilityError, HarnessError, SettingsError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); start it or fix REDIS_URL"
        ) from None
    sys.exit(serve(lambda: build_runner(settings), processes or settings.runner.concurrency,
                   burst=burst, logging_level=settings.logging.level))


def _payload_files(paths: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.json") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise click.BadParameter(f"{raw}: no such file or directory", param_hint="PATH")
    return files


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--url", required=True, help="The receiver's URL, e.g. http://127.0.0.1:8080/webhook")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds per request.")
def replay(paths: tuple[str, ...], url: str, timeout: float) -> None:
    """Sign payload files with THE_LOOP_WEBHOOK_SECRET and POST them as GitHub would.

    The event name is each file's parent folder name (as in GitHub's payload examples);
    folders are walked. Each delivery gets a fresh X-GitHub-Delivery id. Prints one line
    per delivery: status code, event, delivery id, file.
    """
    import requests

    from webhook.signature import sign

    # The receiver's own reading of THE_LOOP_WEBHOOK_SECRET: the first secret listed.
    secret = read_settings("receiver").receiver.secrets[0]
    files = _payload_files(paths)
    if not files:
        raise click.ClickException("no .json payload files found under the given paths")
    failures = 0
    with requests.Session() as http:
        for file in files:
            body = file.read_bytes()
            event = file.parent.name
            delivery = str(uuid.uuid4())
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "GitHub-Hookshot/the-loop-replay",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": sign(body, secret),
            }
            try:
                status = str(http.post(url, data=body, headers=headers, timeout=timeout)
                             .status_code)
            except requests.RequestException as exc:
                status = f"ERR({type(exc).__name__})"
            if not status.isdigit() or not 200 <= int(status) < 300:
                failures += 1
            click.echo(f"{status} {event} {delivery} {file}")
    if failures:
        raise click.ClickException(
            f"{failures} of {len(files)} deliveries were not accepted by {url}")
