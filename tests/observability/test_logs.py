"""JSON log lines: the delivery id and work item on every line where known, never a
secret or a payload body; the settings that choose the format."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import runpy
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from rq import Queue

from foundation.inbox.enqueue import DeliveryQueue
from foundation.observability import logs
from foundation.settings import ReceiverSettings, Settings, WorkerSettings
from tests.conftest import REPO_ROOT, gh_label, load_fixture, load_payload, signed_post
from the_loop.cli import main
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.app import create_app
from webhook.events import parse_delivery
from workers.worker import LoopWorker

SECRET = "log-secret-6f1c2b"
REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"


@pytest.fixture
def json_lines():
    """Root gets a JSON handler (as `the-loop worker` and gunicorn configure it) writing
    to a buffer; yields a function returning the parsed lines so far."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logs.json_formatter())
    handler.addFilter(logs.ContextFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    levels = {name: logging.getLogger(name).level for name in ("the_loop", "rq", "graph")}
    for name in levels:
        logging.getLogger(name).setLevel(logging.INFO)
    logs.clear()

    def lines() -> list[dict]:
        return [json.loads(line) for line in buffer.getvalue().splitlines() if line]

    lines.text = buffer.getvalue  # type: ignore[attr-defined]
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        logs.clear()


def test_receiver_lines_carry_delivery_id_and_work_item_and_no_secret(redis_ns, json_lines):
    settings = ReceiverSettings(secrets=(SECRET.encode(),), redis_url=redis_ns.url,
                                queue_name=redis_ns.queue_name, redis_prefix=redis_ns.prefix)
    client = create_app(settings, redis=redis_ns.client).test_client()
    body = load_fixture("issues", "opened")
    title = json.loads(body)["issue"]["title"]
    good, bad = redis_ns.new_id(), redis_ns.new_id()
    assert signed_post(client, body, event="issues", secret=SECRET,
                       delivery=good).status_code == 202
    assert signed_post(client, body, event="issues", secret="wrong-secret-91ab",
                       delivery=bad).status_code == 401
    assert logs.DELIVERY_ID.get() is None and logs.WORK_ITEM.get() is None  # cleared

    lines = [line for line in json_lines() if line["logger"] == "the_loop.webhook"]
    by_delivery = {line["delivery_id"]: line for line in lines}
    assert by_delivery[good]["work_item"] == REF
    assert by_delivery[good]["level"] == "INFO" and "outcome=queued" in by_delivery[good][
        "message"]
    assert "work_item" not in by_delivery[bad]  # refused before the body was read
    assert "status=401" in by_delivery[bad]["message"]
    for line in lines:
        assert {"timestamp", "level", "logger", "message"} <= line.keys()
    text = json_lines.text()
    for secret_or_body in (SECRET, "wrong-secret-91ab", title, '"action": "opened"'):
        assert secret_or_body not in text


def test_worker_lines_carry_delivery_id_and_work_item(redis_ns, json_lines):
    gh = FakeGitHub()
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    payload = load_payload("issue_comment", "created")
    payload["issue"]["labels"].append(gh_label("the-loop"))
    marker = f"do-not-log-{uuid.uuid4().hex}"
    payload["comment"]["body"] = f"/approve {marker}"
    delivery = str(uuid.uuid4())
    assert queue.enqueue(parse_delivery(
        {"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery,
         "Content-Type": "application/json"}, json.dumps(payload).encode()))
    LoopWorker([Queue(redis_ns.queue_name, connection=redis_ns.client)],
               connection=redis_ns.client, name=f"w-{redis_ns.new_id()}",
               processor=processor).work(burst=True, with_scheduler=False)

    lines = json_lines()
    mine = [line for line in lines if line.get("delivery_id") == delivery]
    outcome = [line for line in mine if line["logger"] == "the_loop.worker"
               and "outcome=" in line["message"]]
    assert outcome and all(line["work_item"] == REF for line in outcome)
    # RQ's own lines are about the wake-up job, which drains many deliveries: they carry
    # no delivery id (each delivery's lines carry their own).
    job_ok = [line for line in lines if line["logger"].startswith("rq")
              and "Job OK" in line["message"]]
    assert job_ok and all("delivery_id" not in line for line in job_ok)
    assert marker not in json_lines.text()
    assert logs.DELIVERY_ID.get() is None  # cleared after the job


def test_formats_and_their_settings():
    def logging_dict(env, **kw):
        return logs.logging_dict(Settings.from_env(env).logging, **kw)

    json_cfg = logging_dict({"THE_LOOP_LOG_FORMAT": "json"})
    assert json_cfg["formatters"]["the_loop"]["()"] is logs.json_formatter
    assert json_cfg["handlers"]["stdout"]["stream"] == "ext://sys.stdout"
    assert logging_dict({})["formatters"]["the_loop"]["()"] is logs.json_formatter
    text_cfg = logging_dict({"THE_LOOP_LOG_FORMAT": "TEXT", "THE_LOOP_LOG_LEVEL": "debug"})
    assert text_cfg["formatters"]["the_loop"]["()"] is logs.text_formatter
    assert text_cfg["root"]["level"] == "DEBUG"
    with pytest.raises(ValueError, match="THE_LOOP_LOG_FORMAT"):
        logging_dict({"THE_LOOP_LOG_FORMAT": "xml"})
    with pytest.raises(ValueError, match="THE_LOOP_LOG_LEVEL"):
        logging_dict({"THE_LOOP_LOG_LEVEL": "LOUD"})
    gunicorn = logging_dict({}, gunicorn=True)["loggers"]
    assert gunicorn["gunicorn.error"]["handlers"] == [] and gunicorn["gunicorn.error"]["propagate"]


def test_worker_command_refuses_an_unknown_log_format():
    result = CliRunner().invoke(main, ["worker", "--burst"],
                                env={"THE_LOOP_LOG_FORMAT": "yaml"})
    assert result.exit_code != 0
    assert "THE_LOOP_LOG_FORMAT must be json or text" in result.output


CONF = REPO_ROOT / "the_loop" / "gunicorn_conf.py"


def test_gunicorn_conf_logs_json_and_manages_the_metrics_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("THE_LOOP_LOG_FORMAT", raising=False)
    monkeypatch.delenv("THE_LOOP_ACCESS_LOG", raising=False)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    conf = runpy.run_path(str(CONF))
    assert conf["graceful_timeout"] == 30
    assert conf["logconfig_dict"]["formatters"]["the_loop"]["()"] is not None
    assert "gunicorn.access" in conf["logconfig_dict"]["loggers"]
    assert issubclass(conf["logger_class"], __import__("gunicorn.glogging").glogging.Logger)

    # A directory named by the operator: emptied of stale files at start, kept at exit.
    stale = tmp_path / "counter_123.db"
    stale.write_bytes(b"x")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    named = runpy.run_path(str(CONF))  # gunicorn reads the file at start
    named["on_starting"](None)
    assert not stale.exists() and tmp_path.is_dir()
    named["on_exit"](None)
    assert tmp_path.is_dir()

    # None named: a fresh one under the temporary directory, removed at exit.
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    conf["on_starting"](None)
    made = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    assert made.is_dir() and made.name == f"the-loop-metrics-{os.getpid()}"
    conf["on_exit"](None)
    assert not made.exists()

    monkeypatch.setenv("THE_LOOP_LOG_FORMAT", "csv")
    with pytest.raises(SystemExit, match="THE_LOOP_LOG_FORMAT"):
        runpy.run_path(str(CONF))


def test_a_json_line_keeps_text_orjson_would_refuse(capsys) -> None:
    """A lone surrogate (the standard library's JSON parser lets one into a payload's
    text) and an integer past 64 bits still give a JSON line, not a logging error."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logs.json_formatter())
    logger = logging.getLogger("the_loop.test.surrogate")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.info("label %s", json.loads('"\\ud800x"'), extra={"big": 2**70})
    finally:
        logger.removeHandler(handler)
    out = capsys.readouterr()
    line = json.loads(out.out.strip())
    assert line["message"] == "label \ud800x"
    assert line["big"] == 2**70
    assert "Logging error" not in out.err


@pytest.fixture
def configured_root():
    """The root logger configured by :func:`logs.logging_dict` at INFO, its handler
    writing to a buffer; the root's handlers and level put back afterwards."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    buffer = io.StringIO()
    config = logs.logging_dict(Settings.from_env({"THE_LOOP_LOG_FORMAT": "text"}).logging)
    config["handlers"]["stdout"]["stream"] = buffer
    logging.config.dictConfig(config)
    try:
        yield buffer
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)


def test_a_lint_of_a_long_artifact_adds_no_library_info_line(configured_root):
    from tests.graph.test_lint_artifacts import run_hook

    body = "\n".join(f"Line {n} of the artifact, secret-looking text {n}." for n in range(200))
    # Through the lint-artifacts hook, as a node's exit runs it (PyMarkdown only).
    linted = run_hook({"specs/1/design.md": f"# Design\n\n{body}\n"}, {"diagrams": False})
    assert linted.hook == "lint-artifacts" and linted.status in ("pass", "block")
    logging.getLogger("workers.drain").info("the worker's own line")
    logging.getLogger("pymarkdown.tokens").warning("a library's warning")
    logging.getLogger("urllib3.connectionpool").info("a library's info")
    lines = configured_root.getvalue().splitlines()
    assert logging.getLogger().level == logging.INFO  # the root is not silenced
    assert [line for line in lines if "the worker's own line" in line]
    assert [line for line in lines if "a library's warning" in line]
    assert not [line for line in lines if "a library's info" in line]
    assert not [line for line in lines if "Line 5 of the artifact" in line or
                "Processing line" in line], lines[:5]
    assert len(lines) == 2, lines[:5]


def test_at_debug_the_libraries_lines_come_through():
    record = logging.LogRecord("pymarkdown.x", logging.INFO, __file__, 1, "m", None, None)
    assert logs.ThirdPartyFilter("DEBUG").filter(record)
    assert not logs.ThirdPartyFilter("INFO").filter(record)
    own = logging.LogRecord("the_loop.cli", logging.INFO, __file__, 1, "m", None, None)
    assert logs.ThirdPartyFilter("INFO").filter(own)
